//! What a job runs, as opposed to what it asks for ([`crate::job::JobSpec`]): the program,
//! its working directory and environment, its output files and the signals it wants.
//!
//! The scheduler never looks at this; the store keeps it beside the spec and the agent
//! launches from it. Plain data, so that every front end (Slurm options, manifests, the
//! REST API) produces the same thing and the wire carries it unchanged.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Slurm's default KillWait, in seconds: time between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_WAIT_SECS: u64 = 30;

/// Slurm's default `--signal` lead time, in seconds.
const DEFAULT_SIGNAL_LEAD_SECS: u64 = 60;

/// How much of the submitter's environment a task gets (`--export`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Export {
    /// `--export=ALL`, the default: all of it.
    #[default]
    All,
    /// `--export=NONE`: none of it, except `SLURM_*` variables (which Slurm always
    /// propagates); `HOME`, `USER`, `LOGNAME`, `SHELL` come from the user's account and
    /// `PATH` is a default.
    None,
    /// `--export=A,B`: these variables only (plus `SLURM_*`), with the same account
    /// variables as [`Export::None`].
    Named(Vec<String>),
}

/// Append to or truncate the output files (`--open-mode`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OpenMode {
    Append,
    #[default]
    Truncate,
}

/// Who receives a signal.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SignalTarget {
    /// The task's process group: the task and everything it started.
    #[default]
    Group,
    /// The task's main process only (`--signal=B:...`).
    Leader,
}

/// `--signal=[{R|B}:]SIG[@TIME]`: a signal sent before the end of the time limit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PreEndSignal {
    /// The signal's number on Linux.
    pub signal: i32,
    /// How many seconds before the end of the time limit.
    pub before_secs: u64,
    #[serde(default)]
    pub target: SignalTarget,
}

/// Linux signal names and numbers (x86-64 and arm64 agree on these).
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// The name of signal `number` without the `SIG` prefix (`USR1`), if it has one.
pub fn signal_name(number: i32) -> Option<&'static str> {
    SIGNALS.iter().find(|(_, n)| *n == number).map(|(s, _)| *s)
}

/// A `--signal` value that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("failed to parse --signal value `{value}`: {why}")]
pub struct SignalSpecError {
    pub value: String,
    pub why: String,
}

impl FromStr for PreEndSignal {
    type Err = SignalSpecError;

    /// Parses Slurm's `--signal` value: `USR1`, `SIGUSR1@90`, `B:10@120`, `R:TERM`.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let err = |why: String| SignalSpecError {
            value: value.to_string(),
            why,
        };
        let (target, rest) = match value.split_once(':') {
            Some(("B", rest)) => (SignalTarget::Leader, rest),
            Some(("R", rest)) => (SignalTarget::Group, rest),
            Some((other, _)) => return Err(err(format!("unknown prefix `{other}:`"))),
            None => (SignalTarget::Group, value),
        };
        let (sig, before_secs) = match rest.split_once('@') {
            Some((sig, secs)) => {
                let secs: u64 = secs
                    .parse()
                    .map_err(|_| err(format!("`{secs}` is not a number of seconds")))?;
                if secs > 65_535 {
                    return Err(err(format!("{secs} s is above 65535")));
                }
                (sig, secs)
            }
            None => (rest, DEFAULT_SIGNAL_LEAD_SECS),
        };
        let signal = match sig.parse::<i32>() {
            Ok(n) if signal_name(n).is_some() => n,
            Ok(n) => return Err(err(format!("no signal number {n}"))),
            Err(_) => {
                let upper = sig.to_ascii_uppercase();
                let name = upper.strip_prefix("SIG").unwrap_or(&upper);
                SIGNALS
                    .iter()
                    .find(|(s, _)| *s == name)
                    .map(|(_, n)| *n)
                    .ok_or_else(|| err(format!("no signal named `{sig}`")))?
            }
        };
        Ok(PreEndSignal {
            signal,
            before_secs,
            target,
        })
    }
}

impl fmt::Display for PreEndSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.target == SignalTarget::Leader {
            f.write_str("B:")?;
        }
        match signal_name(self.signal) {
            Some(name) => write!(f, "{name}@{}", self.before_secs),
            None => write!(f, "{}@{}", self.signal, self.before_secs),
        }
    }
}

/// What a job runs and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Program and arguments. With a `script`, the arguments given to the script (the
    /// agent writes the script to a file and runs it, like `sbatch script.sh args`).
    #[serde(default)]
    pub command: Vec<String>,
    /// A batch script's text (it starts with `#!`).
    #[serde(default)]
    pub script: Option<String>,
    /// Where the tasks start (`--chdir`); relative output paths are under it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub work_dir: PathBuf,
    /// `SLURM_SUBMIT_DIR`; `None`: the working directory.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub submit_dir: Option<PathBuf>,
    #[serde(default)]
    pub submit_host: Option<String>,
    /// `--output` pattern; `None`: `slurm-%j.out` (`slurm-%A_%a.out` for arrays).
    #[serde(default)]
    pub stdout: Option<String>,
    /// `--error` pattern; `None`: stderr goes to the stdout file.
    #[serde(default)]
    pub stderr: Option<String>,
    #[serde(default)]
    pub open_mode: OpenMode,
    #[serde(default)]
    pub export: Export,
    /// The submitter's environment, as captured at submission.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// `--signal`.
    #[serde(default)]
    pub signal: Option<PreEndSignal>,
    /// Seconds between SIGTERM and SIGKILL when the job is stopped.
    #[serde(default = "default_kill_wait")]
    pub kill_wait_secs: u64,
    /// When the job has succeeded: once every task of these task groups (positions in the
    /// spec) has exited 0; the job's other tasks (an MPI job's workers running `sshd`) are
    /// then stopped and do not count in its outcome. `None`: once every task has ended, the
    /// job's outcome being the worst task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completing_groups: Option<Vec<u16>>,
    /// A Kubernetes workload's translation, from which the agent computes each task's
    /// program, environment, host names and files at launch (`cadre_k8s::WorkloadRun`,
    /// versioned; see docs/kubernetes.md). Opaque to the scheduler and the store; `None`
    /// for every other job. With it, `command` and `work_dir` are those of the first task
    /// group, kept for display and validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub kubernetes: Option<serde_json::Value>,
    /// An allocation without a program of its own (`salloc`, or the job `srun` makes
    /// outside one): its tasks hold their resources, running nothing, until the job is
    /// completed by its client, cancelled, or reaches its time limit; job steps run in it.
    /// `command` and `script` are then empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allocation: bool,
}

fn default_kill_wait() -> u64 {
    DEFAULT_KILL_WAIT_SECS
}

impl RunSpec {
    /// Runs `command` in `work_dir`, with Slurm's defaults for everything else.
    pub fn command(command: Vec<String>, work_dir: PathBuf) -> RunSpec {
        RunSpec {
            command,
            script: None,
            work_dir,
            submit_dir: None,
            submit_host: None,
            stdout: None,
            stderr: None,
            open_mode: OpenMode::Truncate,
            export: Export::All,
            env: Vec::new(),
            signal: None,
            kill_wait_secs: DEFAULT_KILL_WAIT_SECS,
            completing_groups: None,
            kubernetes: None,
            allocation: false,
        }
    }

    /// An allocation that runs nothing by itself (see [`RunSpec::allocation`]).
    pub fn allocation(work_dir: PathBuf) -> RunSpec {
        RunSpec {
            allocation: true,
            ..RunSpec::command(Vec::new(), work_dir)
        }
    }

    /// What is wrong with this spec, if anything: it must run something.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.script, self.command.first()) {
            _ if self.allocation && (self.script.is_some() || !self.command.is_empty()) => {
                Err("an allocation runs nothing by itself: give no command or script".into())
            }
            (None, None) if self.allocation && !self.work_dir.is_absolute() => Err(format!(
                "the working directory `{}` is not an absolute path",
                self.work_dir.display()
            )),
            (None, None) if self.allocation => Ok(()),
            (Some(s), _) if !s.starts_with("#!") => Err(
                "the batch script does not start with `#!` (a shebang line naming its interpreter)"
                    .into(),
            ),
            (None, None) => Err("nothing to run: give a command or a script".into()),
            (None, Some(p)) if p.is_empty() => Err("the command's program name is empty".into()),
            _ if !self.work_dir.is_absolute() => Err(format!(
                "the working directory `{}` is not an absolute path",
                self.work_dir.display()
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_values_parse_like_slurms() {
        let s = |v: &str| v.parse::<PreEndSignal>();
        assert_eq!(
            s("USR1"),
            Ok(PreEndSignal {
                signal: 10,
                before_secs: 60,
                target: SignalTarget::Group
            })
        );
        assert_eq!(
            s("SIGUSR2@90").map(|p| (p.signal, p.before_secs)),
            Ok((12, 90))
        );
        assert_eq!(
            s("B:10@120").map(|p| (p.signal, p.target)),
            Ok((10, SignalTarget::Leader))
        );
        assert_eq!(s("R:term").map(|p| p.signal), Ok(15));
        assert_eq!(s("B:USR1@5").map(|p| p.to_string()), Ok("B:USR1@5".into()));
        assert!(s("X:USR1").unwrap_err().why.contains("unknown prefix"));
        assert!(s("USR9").unwrap_err().why.contains("no signal named"));
        assert!(s("99").unwrap_err().why.contains("no signal number"));
        assert!(s("USR1@70000").unwrap_err().why.contains("above 65535"));
        assert!(s("USR1@soon").unwrap_err().why.contains("not a number"));
    }

    #[test]
    fn a_run_spec_must_run_something_from_an_absolute_directory() {
        let mut r = RunSpec::command(vec!["true".into()], "/tmp".into());
        assert_eq!(r.validate(), Ok(()));
        r.work_dir = "tmp".into();
        assert!(r.validate().unwrap_err().contains("not an absolute path"));
        r.work_dir = "/tmp".into();
        r.command.clear();
        assert!(r.validate().unwrap_err().contains("nothing to run"));
        r.script = Some("echo hi".into());
        assert!(r.validate().unwrap_err().contains("shebang"));
        r.script = Some("#!/bin/sh\necho hi\n".into());
        assert_eq!(r.validate(), Ok(()));
    }

    #[test]
    fn run_specs_round_trip_through_json_with_defaults() {
        let r: RunSpec =
            serde_json::from_str(r#"{"command":["sleep","1"],"work_dir":"/tmp"}"#).unwrap();
        assert_eq!(
            r,
            RunSpec::command(vec!["sleep".into(), "1".into()], "/tmp".into())
        );
        let back: RunSpec = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(serde_json::from_str::<RunSpec>(r#"{"work_dir":"/","cmd":[]}"#).is_err());
    }
}
