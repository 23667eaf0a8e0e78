//! One `sbatch` invocation, from its command line, environment and script to the
//! [`BatchOptions`] that hold: the order of sources and the errors of each.
//!
//! The caller reads the script (a file, standard input, or `--wrap`); this module decides
//! nothing about I/O.

use crate::env::env_options;
use crate::error::SlurmError;
use crate::getopt::{Order, parse};
use crate::options::{BatchOptions, Opt, SBATCH_OPTIONS};
use crate::script::directives;
use crate::time::Clock;

/// The command line, split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandLine {
    pub opts: Vec<(Opt, Option<String>)>,
    /// The script's path (or none: standard input) and its arguments.
    pub operands: Vec<String>,
}

impl CommandLine {
    /// `--wrap`'s command, if given on the command line (the only place it counts).
    pub fn wrap(&self) -> Option<&str> {
        self.opts
            .iter()
            .rev()
            .find(|(o, _)| *o == Opt::Wrap)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Whether the command line asks only for help, usage or the version.
    pub fn informational(&self) -> Option<Opt> {
        self.opts
            .iter()
            .map(|(o, _)| *o)
            .find(|o| matches!(o, Opt::Help | Opt::Usage | Opt::Version))
    }
}

/// Splits `sbatch`'s arguments (without the program name).
pub fn parse_command_line(args: &[String]) -> Result<CommandLine, SlurmError> {
    let p = parse(SBATCH_OPTIONS, args, Order::RequireOrder)?;
    Ok(CommandLine {
        opts: p.opts,
        operands: p.operands,
    })
}

/// Applies the sources in Slurm's order: the script's directives, then the environment,
/// then the command line. `script` is `None` for `--wrap`.
pub fn resolve_options<'a>(
    cli: &CommandLine,
    env: impl Fn(&str) -> Option<&'a str>,
    script: Option<&str>,
    clock: &Clock,
) -> Result<BatchOptions, SlurmError> {
    let mut o = BatchOptions::default();
    if let Some(text) = script {
        for words in directives(text) {
            let p = parse(SBATCH_OPTIONS, &words, Order::RequireOrder)
                .map_err(SlurmError::DirectiveGetopt)?;
            if let Some(first) = p.operands.first() {
                if first == "hetjob" || first == "packjob" {
                    return Err(SlurmError::unsupported(
                        "a heterogeneous job (`#SBATCH hetjob`)",
                    ));
                }
                return Err(SlurmError::InvalidDirective(first.clone()));
            }
            for (opt, v) in p.opts {
                // `--wrap` in a script has no effect, as in Slurm.
                if opt != Opt::Wrap {
                    o.set(opt, v.as_deref(), clock)?;
                }
            }
        }
    }
    for (opt, v) in env_options(env) {
        o.set(opt, v.as_deref(), clock)?;
    }
    apply_command_line(o, cli, clock)
}

/// Applies the command line's options over `o` (the last source), then the checks between
/// options: for `sbatch` after its script and environment, for `srun` and `salloc` alone.
pub fn apply_command_line(
    mut o: BatchOptions,
    cli: &CommandLine,
    clock: &Clock,
) -> Result<BatchOptions, SlurmError> {
    for (opt, v) in &cli.opts {
        o.set(*opt, v.as_deref(), clock)?;
    }
    o.check()?;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::TimeLimit;

    const CLOCK: Clock = Clock {
        now: 1_795_269_697,
        utc_offset: 0,
    };

    fn cli(args: &[&str]) -> CommandLine {
        parse_command_line(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn resolve(
        args: &[&str],
        env: &[(&str, &str)],
        script: &str,
    ) -> Result<BatchOptions, SlurmError> {
        resolve_options(
            &cli(args),
            |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| *v),
            Some(script),
            &CLOCK,
        )
    }

    const SCRIPT: &str =
        "#!/bin/bash\n#SBATCH -t 5 -J fromscript -A scriptacct\n#SBATCH -N 2\ntrue\n";

    #[test]
    fn command_line_beats_environment_beats_script() {
        let o = resolve(&[], &[], SCRIPT).unwrap();
        assert_eq!(o.time, Some(TimeLimit::Minutes(5)));
        assert_eq!(o.job_name.as_deref(), Some("fromscript"));
        let o = resolve(
            &[],
            &[("SBATCH_TIMELIMIT", "10"), ("SBATCH_JOB_NAME", "fromenv")],
            SCRIPT,
        )
        .unwrap();
        assert_eq!(o.time, Some(TimeLimit::Minutes(10)));
        assert_eq!(o.job_name.as_deref(), Some("fromenv"));
        assert_eq!(o.account.as_deref(), Some("scriptacct"));
        let o = resolve(&["-t", "20"], &[("SBATCH_TIMELIMIT", "10")], SCRIPT).unwrap();
        assert_eq!(o.time, Some(TimeLimit::Minutes(20)));
        assert_eq!(o.nodes.map(|n| n.min), Some(2));
    }

    #[test]
    fn every_source_is_checked_even_when_overridden() {
        let e = resolve(&["-t", "20"], &[("SBATCH_TIMELIMIT", "abc")], SCRIPT).unwrap_err();
        assert_eq!(e.to_string(), "Invalid --time specification");
        let e = resolve(
            &[],
            &[("SBATCH_TIMELIMIT", "10")],
            "#!/bin/sh\n#SBATCH -t abc\n",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "Invalid --time specification");
    }

    #[test]
    fn directive_errors() {
        let e = resolve(&[], &[], "#!/bin/sh\n#SBATCH --foo\ntrue\n").unwrap_err();
        assert_eq!(
            e.render("sbatch", "/usr/bin/sbatch"),
            "sbatch: unrecognized option '--foo'\nTry \"sbatch --help\" for more information"
        );
        let e = resolve(&[], &[], "#!/bin/sh\n#SBATCH myscriptarg\ntrue\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "Invalid directive found in batch script: myscriptarg"
        );
        assert_eq!(e.exit_code(None), 255);
        let e = resolve(&[], &[], "#!/bin/sh\n#SBATCH --time\ntrue\n").unwrap_err();
        assert_eq!(e.to_string(), "option '--time' requires an argument");
    }

    #[test]
    fn operands_are_the_script_and_its_arguments() {
        let c = cli(&["--hold", "s.sh", "a", "--foo"]);
        assert_eq!(c.operands, vec!["s.sh", "a", "--foo"]);
        let c = cli(&["--wrap", "echo hi", "-N2"]);
        assert_eq!(c.wrap(), Some("echo hi"));
        assert!(c.operands.is_empty());
        assert_eq!(cli(&["--help"]).informational(), Some(Opt::Help));
    }
}
