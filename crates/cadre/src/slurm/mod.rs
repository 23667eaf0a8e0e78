//! The `cadre` binary answering as Slurm's commands: invoked as `sbatch`, `scontrol`,
//! `squeue`, `sinfo`, `sacct`, `scancel`, `sshare` or `sprio` (argv[0]'s file name; `cadre
//! install-aliases DIR` makes the links), it takes their options and prints their formats,
//! talking to cadre's controller. Errors are printed as Slurm prints them, with Slurm's
//! exit codes.
//!
//! - `sbatch` and `scontrol`: option parsing, conversion and record formats live in
//!   `cadre-slurm`; here are the I/O around them (scripts, the environment, the clock and
//!   the local time zone, users and groups, the controller's API);
//! - the read side: [`format`] (the `-o` `%`-field and `-O` named-field engines, and how
//!   Slurm writes times, durations and job ids), [`query`] (the controller, error
//!   reporting and exit codes), and one module per command; every command splits its command
//!   line with `cadre-slurm`'s one getopt ([`cadre_slurm::getopt`]).
//!
//! `srun` and `salloc` ([`srun`]) run job steps and allocations. Where Slurm releases differ, the
//! commands follow current Slurm and say so in their module docs; the reference they were
//! compared with is Slurm 22.05.

pub mod format;
pub mod query;
pub mod sacct;
pub mod sbatch;
pub mod scancel;
pub mod scontrol;
pub mod sinfo;
pub mod sprio;
pub mod squeue;
pub mod srun;
pub mod sshare;

use crate::native::ConnectArgs;
use anyhow::{Context, Result};
use cadre_client::{ApiFailure, Client};
use cadre_slurm::SlurmError;
use cadre_slurm::time::Clock;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Every command name the binary answers to.
pub const COMMANDS: [&str; 10] = [
    "sbatch", "srun", "salloc", "squeue", "sinfo", "scancel", "sacct", "scontrol", "sshare",
    "sprio",
];

/// The command a program path names, if it is one of [`COMMANDS`].
pub fn command_name(argv0: &str) -> Option<&'static str> {
    let name = Path::new(argv0).file_name()?.to_str()?;
    COMMANDS.iter().copied().find(|c| *c == name)
}

/// `cadre install-aliases DIR`: a symbolic link to this executable under every Slurm
/// command name. Existing links are replaced; other files are left alone (an error).
pub fn install_aliases(dir: &Path) -> Result<ExitCode> {
    let exe = std::env::current_exe()
        .context("failed to find the path of this executable")?
        .canonicalize()?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("failed to create the directory {}", dir.display()))?;
    for name in COMMANDS {
        let link = dir.join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(&link)?,
            Ok(_) => anyhow::bail!(
                "{} exists and is not a symbolic link; not replacing it",
                link.display()
            ),
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&exe, &link)
            .with_context(|| format!("failed to link {} to {}", link.display(), exe.display()))?;
        println!("{} -> {}", link.display(), exe.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The controller, found as cadre's own commands find it (`$CADRE_SERVER`,
/// `$CADRE_TOKEN`, `$CADRE_DATA_DIR`, else the default data directory).
pub fn connect_args() -> ConnectArgs {
    let var = query::env_var;
    ConnectArgs {
        server: var("CADRE_SERVER"),
        token: var("CADRE_TOKEN"),
        data_dir: var("CADRE_DATA_DIR").map(PathBuf::from),
    }
}

/// A client of the controller, or Slurm's kind of failure to reach it.
pub fn connect() -> Result<Client, SlurmError> {
    connect_args()
        .client()
        .map_err(|e| SlurmError::submission(crate::error_chain(&e)))
}

/// The API's answer to a failed request, if that is what `e` is.
pub fn api_failure(e: &anyhow::Error) -> Option<&ApiFailure> {
    cadre_client::Error::api_failure_in(e.as_ref())
}

/// The wall clock and the local time zone's offset now.
pub fn local_clock() -> Clock {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let t = now as libc::time_t;
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are a valid value;
    // localtime_r reads `t` and writes only into `tm`, both owned by this frame and alive
    // for the whole call, and is thread-safe (unlike localtime).
    let offset = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            0
        } else {
            tm.tm_gmtoff
        }
    };
    Clock {
        now,
        utc_offset: offset,
    }
}

/// The user running this command.
pub fn current_user() -> String {
    cadre_client::user::current()
}

/// A user's uid, primary group name and gid, for `UserId=`/`GroupId=` (nobody's when the
/// user is not known here).
pub fn ids_of(user: &str) -> (u32, String, u32) {
    match nix::unistd::User::from_name(user) {
        Ok(Some(u)) => {
            let group = nix::unistd::Group::from_gid(u.gid)
                .ok()
                .flatten()
                .map_or_else(|| u.gid.as_raw().to_string(), |g| g.name);
            (u.uid.as_raw(), group, u.gid.as_raw())
        }
        _ => (65_534, "nogroup".into(), 65_534),
    }
}

/// `$SLURM_EXIT_ERROR`, which Slurm's commands exit with when a request fails.
pub fn exit_error() -> Option<u8> {
    std::env::var("SLURM_EXIT_ERROR").ok()?.parse().ok()
}

/// Prints an error as command `cmd` (invoked as `prog`) and returns its exit code.
pub fn fail(cmd: &str, prog: &str, e: &SlurmError) -> ExitCode {
    eprintln!("{}", e.render(cmd, prog));
    ExitCode::from(e.exit_code(exit_error()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names_come_from_the_programs_file_name() {
        assert_eq!(command_name("/usr/local/bin/sbatch"), Some("sbatch"));
        assert_eq!(command_name("scontrol"), Some("scontrol"));
        assert_eq!(command_name("/opt/cadre/bin/cadre"), None);
        assert_eq!(command_name("sbatch2"), None);
    }

    #[test]
    fn the_local_clock_has_a_sane_offset() {
        let c = local_clock();
        assert!(c.now > 1_600_000_000);
        assert!(c.utc_offset.abs() <= 14 * 3600);
    }
}

#[cfg(test)]
mod front_end_time_limits {
    use crate::native::time_limit_arg;
    use cadre_core::time::Dur;
    use cadre_slurm::convert::{Literal, ScriptSource, SubmitContext, build_job, wrap_script};
    use cadre_slurm::sbatch::{parse_command_line, resolve_options};
    use cadre_slurm::time::Clock;

    const CLOCK: Clock = Clock {
        now: 1_795_269_697,
        utc_offset: 0,
    };

    /// `sbatch` with `T` given as `-t T` (`on_command_line`) or as `#SBATCH -t T`: the job
    /// spec's time limit, or `None` if sbatch refuses it.
    fn sbatch_time_limit(t: &str, on_command_line: bool) -> Option<Dur> {
        let (args, script) = if on_command_line {
            (
                vec!["-t".to_string(), t.to_string()],
                "#!/bin/sh\ntrue\n".to_string(),
            )
        } else {
            (Vec::new(), format!("#!/bin/sh\n#SBATCH -t {t}\ntrue\n"))
        };
        let cli = parse_command_line(&args).ok()?;
        let opts = resolve_options(&cli, |_| None, Some(&script), &CLOCK).ok()?;
        let ctx = SubmitContext {
            user: "alice".into(),
            default_account: "alice".into(),
            cwd: "/home/alice".into(),
            env: Vec::new(),
            submit_host: None,
            clock: CLOCK,
            max_array_size: 1001,
        };
        let job = build_job(
            &opts,
            &wrap_script("true"),
            &ScriptSource::Wrap,
            &[],
            &ctx,
            &Literal,
        )
        .ok()?;
        Some(job.submissions[0].spec.time_limit)
    }

    /// Every entry point reads a time limit with the same rules and gets the same limit:
    /// `cadre submit -t`, `sbatch -t`, `#SBATCH -t` and `scontrol update TimeLimit=`
    /// (regression: `cadre submit -t 1-1:60:15` was refused while sbatch took it).
    #[test]
    fn every_front_end_reads_time_limits_alike() {
        const MIN: u64 = 60;
        const DAY: u64 = 86_400;
        // (text, the limit in seconds with 0 for none, or None for refused), as Slurm 22.05
        // reads each (measured with `sbatch -t T` and `scontrol show job`), except where
        // Slurm overflows (noted).
        let table: &[(&str, Option<u64>)] = &[
            ("1-1:60:15", Some(DAY + 121 * MIN)),
            ("0", Some(0)),
            ("0:0", Some(0)),
            ("UNLIMITED", Some(0)),
            ("unlimited", Some(0)),
            ("infinite", Some(0)),
            ("INFINITE", Some(0)),
            ("-1", Some(0)),
            ("1:2:3:4", None),
            ("1-24:00:00", Some(2 * DAY)),
            ("1-25:00", Some(2 * DAY + 60 * MIN)),
            ("60", Some(60 * MIN)),
            ("1:60", Some(2 * MIN)),
            ("1:30", Some(2 * MIN)),
            ("0:30", Some(MIN)),
            ("0:0:1", Some(MIN)),
            ("10:60", Some(11 * MIN)),
            ("1:00:60", Some(61 * MIN)),
            ("1-", Some(DAY)),
            ("0-", Some(0)),
            ("00000000000000000000005", Some(5 * MIN)),
            // Slurm overflows its integers from 35791394 minutes on; cadre keeps the number.
            ("99999999", Some(99_999_999 * MIN)),
            ("4294967294", Some(4_294_967_294 * MIN)),
            ("4294967295", Some(0)),
            ("4294967296", Some(0)),
            // Slurm makes garbage limits of these; cadre refuses them.
            ("-5", None),
            ("99999999999999999999", None),
            ("", None),
            (" 5", None),
            ("5 ", None),
            ("1-2-3", None),
            ("1:", None),
            (":5", None),
            ("+5", None),
            ("1.5", None),
            ("5m", None),
            ("1-1:1:1:1", None),
        ];
        for &(t, want) in table {
            let submit = time_limit_arg(Some(t)).ok().map(|d| d.0);
            let sbatch = sbatch_time_limit(t, true).map(|d| d.0);
            let directive = sbatch_time_limit(t, false).map(|d| d.0);
            let scontrol = super::scontrol::time_limit_value(t, &[], &[]).ok();
            assert_eq!(submit, want, "cadre submit -t {t:?}");
            assert_eq!(sbatch, want, "sbatch -t {t:?}");
            if !t.starts_with(' ') && !t.ends_with(' ') && !t.is_empty() {
                // A directive's words are split on spaces, as in Slurm.
                assert_eq!(directive, want, "#SBATCH -t {t:?}");
            }
            if !t.starts_with(['+', '-']) || t == "-1" {
                // A leading sign is relative in `scontrol update TimeLimit=`.
                assert_eq!(scontrol, want, "scontrol update TimeLimit={t:?}");
            }
        }
        assert_eq!(time_limit_arg(None), Ok(Dur(0)), "no -t is no limit");
    }
}
