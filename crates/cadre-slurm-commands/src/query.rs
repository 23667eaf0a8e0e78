//! What Slurm's read-side commands share beyond formatting: reaching the controller (as
//! every cadre client does: `$CADRE_SERVER`, else the socket of `$CADRE_DATA_DIR`, with
//! `$CADRE_TOKEN`), reporting errors and usage mistakes as Slurm's commands do (one place
//! for their messages and exit codes), and the values of a job that several commands show.
//!
//! Exit codes, as Slurm's: 0 success, 1 any error (bad option or value, a controller that
//! cannot be reached or refuses, an unknown job where the command says so).

use cadre_client::Client;
use cadre_core::job::{Dependency, DependencyKind, JobSpec};
use cadre_proto::api::JobView;
use cadre_proto::exit;
use cadre_slurm::getopt::{self, GetoptError, OptDef, Order, Parsed};
use std::ffi::OsString;
use std::process::ExitCode;

/// The Slurm release whose behaviour these commands follow where releases differ, and the
/// version they report (`--version`).
pub(crate) const SLURM_VERSION: &str = "23.11.0";

/// How long a finished job stays visible to squeue (Slurm's default `MinJobAge`).
pub(crate) const MIN_JOB_AGE_SECS: u64 = 300;

/// Prepares the process as Slurm's C commands are: a closed pipe on stdout (`squeue | head`)
/// ends it quietly by SIGPIPE, instead of Rust's default of ignoring the signal and failing
/// the next write. Returns the arguments as strings.
pub(crate) fn start(args: Vec<OsString>) -> Vec<String> {
    // SAFETY: called first thing in a single-threaded command, before any thread or
    // handler exists; setting a signal's disposition to the default has no other effect.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    strings(args)
}

/// Arguments as strings (non-UTF-8 ones lossily: Slurm's options are ASCII).
pub(crate) fn strings(args: Vec<OsString>) -> Vec<String> {
    args.into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// A read-side command's option, keyed by its long name.
pub(crate) type Opt = OptDef<&'static str>;

/// The program name as invoked, which getopt's messages start with.
fn argv0(cmd: &str) -> String {
    std::env::args_os()
        .next()
        .map_or_else(|| cmd.to_owned(), |a| a.to_string_lossy().into_owned())
}

/// Parses the command line, or reports the mistake as getopt does and gives exit code 1.
pub(crate) fn parse_args(
    cmd: &str,
    args: &[String],
    table: &[Opt],
) -> Result<Parsed<&'static str>, ExitCode> {
    getopt::parse(table, args, Order::Permute).map_err(|e: GetoptError| {
        eprintln!("{}: {e}", argv0(cmd));
        // sacct says only what getopt said.
        if cmd != "sacct" {
            eprintln!("Try \"{cmd} --help\" for more information");
        }
        ExitCode::from(exit::ERROR)
    })
}

/// How every read-side command begins: the process set up as Slurm's ([`start`]), the
/// options parsed ([`parse_args`]), and `--help`/`--usage` (the command's `usage`) and
/// `--version` answered. `Err` is the exit code to end with at once.
pub(crate) fn begin(
    cmd: &str,
    args: Vec<OsString>,
    table: &[Opt],
    usage: fn() -> ExitCode,
) -> Result<Parsed<&'static str>, ExitCode> {
    let args = start(args);
    let p = parse_args(cmd, &args, table)?;
    if p.has("help") || p.has("usage") {
        return Err(usage());
    }
    if p.has("version") {
        return Err(version());
    }
    Ok(p)
}

/// An environment variable that is set and not empty (Slurm's commands treat an empty
/// `SQUEUE_FORMAT=` as unset).
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `cmd: error: msg`, exit code 1.
pub(crate) fn fail(cmd: &str, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("{cmd}: error: {msg}");
    ExitCode::from(exit::ERROR)
}

/// The version line.
pub(crate) fn version() -> ExitCode {
    println!("slurm {SLURM_VERSION}");
    ExitCode::SUCCESS
}

/// A client of the controller, configured from the environment. Failing, the message
/// starts with Slurm's words for it, which scripts look for.
pub(crate) fn connect() -> anyhow::Result<Client> {
    crate::connect_args().client().map_err(|e| {
        anyhow::anyhow!(
            "Unable to contact slurm controller (connect failure): {}",
            cadre_cli::error_chain(&e)
        )
    })
}

/// Who runs the command.
pub(crate) fn current_user() -> String {
    cadre_client::user::current()
}

/// Now, in seconds since the epoch.
pub(crate) fn now() -> u64 {
    cadre_client::clock::now()
}

/// A user's numeric id, if the system knows the user.
pub(crate) fn uid_of(user: &str) -> Option<u32> {
    nix::unistd::User::from_name(user)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw())
}

/// A user name or numeric id as a name; `None` if neither is known here.
pub(crate) fn user_name(text: &str) -> Option<String> {
    if let Ok(uid) = text.parse::<u32>() {
        return nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map(|u| u.name);
    }
    uid_of(text).map(|_| text.to_owned())
}

/// A comma-separated list, empty items dropped.
pub(crate) fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The nodes a job asks for: the sum over its groups of the nodes each names, or needs
/// for its tasks per node, or one.
pub(crate) fn requested_nodes(spec: &JobSpec) -> u64 {
    spec.groups
        .iter()
        .map(|g| {
            if let Some(n) = g.nodes {
                u64::from(n)
            } else if let Some(k) = g.tasks_per_node.filter(|&k| k > 0) {
                u64::from(g.count.div_ceil(k))
            } else if spec.one_task_per_node {
                u64::from(g.count)
            } else {
                1
            }
        })
        .sum::<u64>()
        .max(1)
}

/// The nodes a job has (if it runs or ran) or asks for.
pub(crate) fn node_count(j: &JobView) -> u64 {
    if !j.nodes.is_empty()
        && let Ok(n) = cadre_core::hostlist::count(&j.nodes)
    {
        return n as u64;
    }
    j.spec.as_ref().map_or(1, requested_nodes)
}

/// Memory per node in MiB, if the job asked for any.
pub(crate) fn mem_per_node(j: &JobView) -> Option<u64> {
    let spec = j.spec.as_ref()?;
    let total = spec.amounts().mem_mib;
    (total > 0).then(|| total.div_ceil(node_count(j).max(1)))
}

/// GPUs per node, if the job has any.
pub(crate) fn gpus_per_node(j: &JobView) -> Option<u64> {
    let gpus = super::format::whole_gpus(j.gpus);
    (gpus > 0).then(|| gpus.div_ceil(node_count(j).max(1)))
}

/// A job's dependencies as Slurm writes them (`afterok:12,singleton`), or `(null)`.
pub(crate) fn dependency_text(spec: &JobSpec) -> String {
    if spec.dependencies.is_empty() {
        return "(null)".into();
    }
    let sep = if spec.dependencies_any { "?" } else { "," };
    spec.dependencies
        .iter()
        .map(|d| match d {
            Dependency::Singleton => "singleton".to_owned(),
            Dependency::On { kind, job } => {
                let k = match kind {
                    DependencyKind::After => "after",
                    DependencyKind::AfterAny => "afterany",
                    DependencyKind::AfterOk => "afterok",
                    DependencyKind::AfterNotOk => "afternotok",
                };
                format!("{k}:{}", job.0)
            }
        })
        .collect::<Vec<_>>()
        .join(sep)
}

/// A job id operand of squeue, scancel, sacct and sprio: `ID`, `ID_INDEX`, or `ID.STEP`
/// (the step is ignored: cadre has no steps yet).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct JobRef {
    pub id: u64,
    pub index: Option<u32>,
}

impl JobRef {
    pub(crate) fn parse(text: &str) -> Option<JobRef> {
        let text = text.split('.').next().unwrap_or(text);
        let (id, index) = match text.split_once('_') {
            Some((id, ix)) => (id, Some(ix.parse().ok()?)),
            None => (text, None),
        };
        Some(JobRef {
            id: id.parse().ok()?,
            index,
        })
    }

    /// Whether this reference names the job: by its own id, or (without an index) any task
    /// of the array it names, or (with an index) that task.
    pub(crate) fn matches(&self, j: &JobView) -> bool {
        match (self.index, j.array) {
            (None, Some(a)) => j.id.0 == self.id || a.array_job.0 == self.id,
            (None, None) => j.id.0 == self.id,
            (Some(ix), Some(a)) => a.array_job.0 == self.id && a.index == ix,
            (Some(_), None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_references_parse() {
        assert_eq!(
            JobRef::parse("12"),
            Some(JobRef {
                id: 12,
                index: None
            })
        );
        assert_eq!(
            JobRef::parse("12_3"),
            Some(JobRef {
                id: 12,
                index: Some(3)
            })
        );
        assert_eq!(
            JobRef::parse("12.batch"),
            Some(JobRef {
                id: 12,
                index: None
            })
        );
        assert_eq!(JobRef::parse("abc"), None);
        assert_eq!(JobRef::parse("12_x"), None);
    }
}
