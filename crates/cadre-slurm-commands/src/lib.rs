//! Slurm's commands, as the `cadre` binary answers them: invoked as `sbatch`, `srun`,
//! `salloc`, `scontrol`, `squeue`, `sinfo`, `sacct`, `scancel`, `sshare` or `sprio`
//! (`argv[0]`'s file name; `cadre install-aliases DIR` makes the links), the binary hands the
//! command line to [`run_as_named`], which takes their options and prints their formats,
//! talking to cadre's controller (`cadre-client`). Errors are printed as Slurm prints them,
//! with Slurm's exit codes (`cadre_proto::exit`; the controller's refusals by their reason,
//! `cadre_slurm::refusal`).
//!
//! - `sbatch` and `scontrol`: option parsing, conversion and record formats live in
//!   `cadre-slurm` (pure, beside which these front ends live); here are the I/O around them
//!   (scripts, the environment, the clock and the local time zone, users and groups, the
//!   controller's API);
//! - the read side: [`format`] (the `-o` `%`-field and `-O` named-field engines, and how
//!   Slurm writes times, durations and job ids), [`query`] (the controller, error
//!   reporting and exit codes), and one module per command; every command splits its command
//!   line with `cadre-slurm`'s one getopt ([`cadre_slurm::getopt`]).
//!
//! `srun` and `salloc` ([`srun`]) run job steps and allocations. Where Slurm releases differ, the
//! commands follow current Slurm and say so in their module docs; the reference they were
//! compared with is Slurm 22.05.
//!
//! Not here: the `cadre` binary's own commands, and anything the controller runs.
//!
//! [`format`]: mod@format

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

use anyhow::{Context, Result};
use cadre_cli::ConnectArgs;
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

/// Runs the Slurm command this process was invoked as (`argv[0]`'s file name), if it is
/// one of [`COMMANDS`]: its exit code, or `None` for another name.
pub fn run_as_named() -> Option<ExitCode> {
    let argv: Vec<String> = std::env::args().collect();
    let name = command_name(argv.first()?)?;
    // Slurm's commands are C programs that end quietly when their output is closed
    // (`scontrol show hostnames | head -n 1`); Rust's runtime ignores SIGPIPE, which
    // would make every later print fail. The Slurm personalities take the default.
    // SAFETY: resetting a signal's disposition before any thread is started touches
    // no memory of this program.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let rest = || std::env::args_os().skip(1).collect();
    Some(match name {
        "sbatch" => sbatch::run(argv),
        "scontrol" => scontrol::run(argv),
        "squeue" => squeue::run(rest()),
        "sinfo" => sinfo::run(rest()),
        "sacct" => sacct::run(rest()),
        "scancel" => scancel::run(rest()),
        "sshare" => sshare::run(rest()),
        "sprio" => sprio::run(rest()),
        "srun" => srun::run_srun(argv),
        "salloc" => srun::run_salloc(argv),
        other => unreachable!("`{other}` is in COMMANDS but has no front end"),
    })
}

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
/// `$CADRE_TOKEN`, `$CADRE_CA`, `$CADRE_DATA_DIR`, else the default data directory).
pub fn connect_args() -> ConnectArgs {
    let var = query::env_var;
    ConnectArgs {
        server: var("CADRE_SERVER"),
        token: var("CADRE_TOKEN"),
        ca: var("CADRE_CA").map(PathBuf::from),
        data_dir: var("CADRE_DATA_DIR").map(PathBuf::from),
    }
}

/// A client of the controller, or Slurm's kind of failure to reach it.
pub fn connect() -> Result<Client, SlurmError> {
    connect_args()
        .client()
        .map_err(|e| SlurmError::submission(cadre_cli::error_chain(&e)))
}

/// The API's answer to a failed request, if that is what `e` is.
pub fn api_failure(e: &anyhow::Error) -> Option<&ApiFailure> {
    cadre_client::Error::api_failure_in(e.as_ref())
}

/// The wall clock and the local time zone's offset now (the client library's clock).
pub fn local_clock() -> Clock {
    let now = cadre_client::clock::now();
    Clock {
        now: i64::try_from(now).unwrap_or(i64::MAX),
        utc_offset: cadre_client::clock::utc_offset(now),
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
