//! `srun`'s and `salloc`'s option tables. Both take most of `sbatch`'s options with the same
//! meaning (resources, limits, placement, accounting), less those that only make sense for
//! a batch script, plus their own ([`LAUNCH_ONLY`], whose table is with `sbatch`'s in
//! [`crate::options`]); values are read into the same
//! [`BatchOptions`] and checked as for `sbatch`.
//!
//! Sources: the command line only. Slurm's `srun` also reads `SLURM_*` input variables
//! (which is how a step inherits its job's task count); cadre's steps take their defaults
//! from the job's allocation itself, which the controller knows, so the outcome is the
//! same for the variables a job sets.

use crate::error::SlurmError;
use crate::getopt::{OptDef, Order, parse};
use crate::options::{BatchOptions, LAUNCH_ONLY, Opt, SBATCH_OPTIONS};
use crate::sbatch::{CommandLine, apply_command_line};
use crate::time::Clock;
use std::sync::LazyLock;

/// `sbatch` options neither takes.
const BATCH_ONLY: &[Opt] = &[
    Opt::Array,
    Opt::Batch,
    Opt::ExportFile,
    Opt::IgnorePbs,
    Opt::Parsable,
    Opt::Requeue,
    Opt::NoRequeue,
    Opt::Wait,
    Opt::Wrap,
    Opt::KillOnInvalidDep,
    Opt::Propagate,
];

/// `sbatch` options `salloc` does not take besides [`BATCH_ONLY`].
const NOT_SALLOC: &[Opt] = &[
    Opt::Error,
    Opt::Input,
    Opt::Output,
    Opt::OpenMode,
    Opt::Export,
    Opt::TestOnly,
    Opt::Distribution,
];

/// Launch-only options `salloc` takes.
const SALLOC_OWN: &[Opt] = &[
    Opt::Bell,
    Opt::Immediate,
    Opt::KillCommand,
    Opt::NoBell,
    Opt::NoShell,
    Opt::X11,
];

fn table(keep_batch: impl Fn(Opt) -> bool, keep_own: impl Fn(Opt) -> bool) -> Vec<OptDef<Opt>> {
    let mut t: Vec<OptDef<Opt>> = SBATCH_OPTIONS
        .iter()
        .filter(|d| !BATCH_ONLY.contains(&d.key) && keep_batch(d.key))
        .chain(LAUNCH_ONLY.iter().filter(|d| keep_own(d.key)))
        .copied()
        .collect();
    t.sort_by_key(|d| d.long);
    t
}

/// `srun`'s option table.
pub static SRUN_OPTIONS: LazyLock<Vec<OptDef<Opt>>> = LazyLock::new(|| {
    table(
        |_| true,
        |k| !SALLOC_OWN.contains(&k) || k == Opt::Immediate || k == Opt::X11,
    )
});

/// `salloc`'s option table.
pub static SALLOC_OPTIONS: LazyLock<Vec<OptDef<Opt>>> =
    LazyLock::new(|| table(|k| !NOT_SALLOC.contains(&k), |k| SALLOC_OWN.contains(&k)));

/// Splits a command line by `table`: options, then the program and its arguments.
pub fn parse_launch(table: &[OptDef<Opt>], args: &[String]) -> Result<CommandLine, SlurmError> {
    let p = parse(table, args, Order::RequireOrder)?;
    Ok(CommandLine {
        opts: p.opts,
        operands: p.operands,
    })
}

/// The options of a command line, checked as `sbatch`'s are.
pub fn resolve_launch(cli: &CommandLine, clock: &Clock) -> Result<BatchOptions, SlurmError> {
    apply_command_line(BatchOptions::default(), cli, clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCK: Clock = Clock {
        now: 1_795_269_697,
        utc_offset: 0,
    };

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn srun_stops_at_the_program_and_reads_its_own_options() {
        let cli = parse_launch(
            &SRUN_OPTIONS,
            &args(&[
                "-N2",
                "-l",
                "--ntasks-per-node=2",
                "-W",
                "5",
                "python",
                "-u",
                "x.py",
            ]),
        )
        .unwrap();
        assert_eq!(cli.operands, args(&["python", "-u", "x.py"]));
        let o = resolve_launch(&cli, &CLOCK).unwrap();
        assert!(o.label);
        assert_eq!(o.ntasks_per_node, Some(2));
        assert_eq!(o.nodes.unwrap().min, 2);
        assert_eq!(o.recorded.get("wait").map(String::as_str), Some("5"));
    }

    #[test]
    fn salloc_refuses_batch_only_options_and_srun_takes_output_files() {
        assert!(parse_launch(&SALLOC_OPTIONS, &args(&["--array=1-3"])).is_err());
        assert!(parse_launch(&SALLOC_OPTIONS, &args(&["--output=x"])).is_err());
        let o = resolve_launch(
            &parse_launch(&SRUN_OPTIONS, &args(&["-o", "%t.out", "true"])).unwrap(),
            &CLOCK,
        )
        .unwrap();
        assert_eq!(o.output.as_deref(), Some("%t.out"));
        let o = resolve_launch(
            &parse_launch(&SALLOC_OPTIONS, &args(&["--no-shell", "-N", "1"])).unwrap(),
            &CLOCK,
        )
        .unwrap();
        assert!(o.no_shell);
    }

    #[test]
    fn tables_have_no_duplicate_long_names() {
        for t in [&*SRUN_OPTIONS, &*SALLOC_OPTIONS] {
            let mut names: Vec<&str> = t.iter().map(|d| d.long).collect();
            let n = names.len();
            names.dedup();
            assert_eq!(names.len(), n);
        }
    }
}
