//! `scancel`: cancel or signal jobs, with Slurm's options, messages and exit codes.
//!
//! Jobs are named by id (`12`), array task (`12_3`) or whole array (`12`, the array's id),
//! and/or chosen by filters (`-u`, `-n`, `-t`, `-p`, `-A`, `-q`, `-w`, `--me`); with both,
//! only the named jobs that pass every filter are acted on. Without `-s` a job is
//! cancelled (`DELETE /jobs/{id}`: pending ones end at once, running ones get SIGTERM,
//! then SIGKILL after the kill wait); with `-s SIG` its tasks get the signal
//! (`POST /jobs/{id}/cancel`). `-b`, `-f`, `--ctld`, `-H` are accepted: cadre signals a
//! job's tasks, which are its batch script.
//!
//! Errors, one line each on stderr as `scancel: error: Kill job error on job id N: why`,
//! and exit code 1: an unknown id (`Invalid job id specified`), a job that has ended
//! (`Job/step already completing or completed`, not reported with `-Q`), a job of another
//! user (`Access/permission denied`). This is current Slurm's behaviour; Slurm 22.05 said
//! nothing about unknown or ended jobs unless `-v` and exited 0.

use super::query::{self, JobRef, Opt};
use cadre_core::job::JobState;
use cadre_proto::api::{CancelRequest, JobList, JobView};
use cadre_proto::exit;
use cadre_slurm::getopt::ArgKind;
use cadre_slurm::refusal::{Request, SlurmErrno, refusal};
use cadre_slurm::state;
use hyper::Method;
use std::ffi::OsString;
use std::process::ExitCode;

const CMD: &str = "scancel";

const OPTIONS: &[Opt] = &[
    Opt::new('A', "account", ArgKind::Required),
    Opt::new('b', "batch", ArgKind::None),
    Opt::new('M', "clusters", ArgKind::Required),
    Opt::long("ctld", ArgKind::None),
    Opt::new('f', "full", ArgKind::None),
    Opt::long("help", ArgKind::None),
    Opt::new('H', "hurry", ArgKind::None),
    Opt::new('i', "interactive", ArgKind::None),
    Opt::new('n', "jobname", ArgKind::Required),
    Opt::long("name", ArgKind::Required),
    Opt::long("me", ArgKind::None),
    Opt::new('w', "nodelist", ArgKind::Required),
    Opt::new('p', "partition", ArgKind::Required),
    Opt::new('q', "qos", ArgKind::Required),
    Opt::new('Q', "quiet", ArgKind::None),
    Opt::new('R', "reservation", ArgKind::Required),
    Opt::long("sibling", ArgKind::Required),
    Opt::new('s', "signal", ArgKind::Required),
    Opt::new('t', "state", ArgKind::Required),
    Opt::long("usage", ArgKind::None),
    Opt::new('u', "user", ArgKind::Required),
    Opt::new('v', "verbose", ArgKind::None),
    Opt::new('V', "version", ArgKind::None),
    Opt::long("wckey", ArgKind::Required),
];

/// A signal by name (`USR1`, `SIGUSR1`, any case) or number.
pub(crate) fn parse_signal(text: &str) -> Option<i32> {
    if let Ok(n) = text.parse::<i32>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let name = text.to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    Some(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ABRT" => 6,
        "KILL" => 9,
        "USR1" => 10,
        "SEGV" => 11,
        "USR2" => 12,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        "CHLD" => 17,
        "CONT" => 18,
        "STOP" => 19,
        "TSTP" => 20,
        "TTIN" => 21,
        "TTOU" => 22,
        "URG" => 23,
        "XCPU" => 24,
        "XFSZ" => 25,
        "VTALRM" => 26,
        "PROF" => 27,
        "WINCH" => 28,
        _ => return None,
    })
}

/// Which jobs to act on, from the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selection {
    pub refs: Vec<(String, JobRef)>,
    pub users: Vec<String>,
    pub names: Vec<String>,
    pub states: Vec<JobState>,
    /// Whether `-t` was given (SUSPENDED selects nothing: cadre does not suspend jobs).
    pub states_given: bool,
    pub partitions: Vec<String>,
    pub accounts: Vec<String>,
    pub qos: Vec<String>,
    pub nodes: Vec<String>,
}

impl Selection {
    fn has_filters(&self) -> bool {
        !(self.users.is_empty()
            && self.names.is_empty()
            && !self.states_given
            && self.partitions.is_empty()
            && self.accounts.is_empty()
            && self.qos.is_empty()
            && self.nodes.is_empty())
    }

    fn passes(&self, j: &JobView) -> bool {
        let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        let qos = j
            .spec
            .as_ref()
            .and_then(|s| s.qos.clone())
            .unwrap_or_else(|| "normal".into());
        let on_nodes = self.nodes.is_empty()
            || cadre_core::hostlist::expand(&j.nodes)
                .unwrap_or_default()
                .iter()
                .any(|n| self.nodes.contains(n));
        any(&self.users, &j.user)
            && any(&self.names, &j.name)
            && any(&self.partitions, &j.partition)
            && any(&self.accounts, &j.account)
            && any(&self.qos, &qos)
            && (!self.states_given || self.states.contains(&j.state))
            && on_nodes
    }
}

/// What to do for each job: (how the user named it, its id) in order; and the ids the user
/// named that match no job that has not ended.
pub(crate) fn targets(active: &[JobView], sel: &Selection) -> (Vec<(String, u64)>, Vec<String>) {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut missing = Vec::new();
    if sel.refs.is_empty() {
        for j in active.iter().filter(|j| sel.passes(j)) {
            out.push((super::format::job_id(j.id.0, j.array), j.id.0));
        }
        return (out, missing);
    }
    for (text, r) in &sel.refs {
        let matched: Vec<&JobView> = active.iter().filter(|j| r.matches(j)).collect();
        if matched.is_empty() {
            missing.push(text.clone());
        }
        for j in matched.into_iter().filter(|j| sel.passes(j)) {
            if !out.iter().any(|(_, id)| *id == j.id.0) {
                out.push((super::format::job_id(j.id.0, j.array), j.id.0));
            }
        }
    }
    (out, missing)
}

fn usage() -> ExitCode {
    println!(
        "Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]\n               [-p partition] [-Q] [-q qos] [-R reservation] [-s signal | integer]\n               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]\n               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey] [--me]\n               [job_id[_array_id][.step_id]]"
    );
    ExitCode::SUCCESS
}

/// Why a job or step could not be cancelled: Slurm's error, or cadre's message where
/// Slurm has no words for it.
enum KillError {
    Slurm(SlurmErrno),
    Other(String),
}

impl KillError {
    /// The refusal `e` in Slurm's words ([`cadre_slurm::refusal`]), by the API's reason.
    fn of(e: &anyhow::Error) -> KillError {
        match super::api_failure(e).and_then(|f| refusal(f.reason, Request::Cancel, None).errno) {
            Some(errno) => KillError::Slurm(errno),
            None => KillError::Other(cadre_cli::error_chain(e)),
        }
    }
}

impl std::fmt::Display for KillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KillError::Slurm(errno) => errno.fmt(f),
            KillError::Other(m) => f.write_str(m),
        }
    }
}

/// Prints a failed cancellation as Slurm does; whether it counts as an error (`-Q` keeps
/// quiet about jobs and steps already over).
fn report_kill_error(text: &str, why: &KillError, quiet: bool) -> bool {
    if quiet && matches!(why, KillError::Slurm(SlurmErrno::AlreadyDone)) {
        return true;
    }
    eprintln!("{CMD}: error: Kill job error on job id {text}: {why}");
    false
}

/// `scancel [OPTIONS] [job_id[_array_id][.step_id]]...`.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let p = match query::begin(CMD, args, OPTIONS, usage) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let env = query::env_var;
    let verbose = p.has("verbose");
    let quiet = p.has("quiet");
    let signal = match p.value("signal") {
        None => None,
        Some(s) => match parse_signal(s) {
            Some(n) => Some(n),
            None => {
                eprintln!("Unknown job signal: {s}");
                return ExitCode::from(exit::ERROR);
            }
        },
    };
    let mut sel = Selection::default();
    // `job.step`: that step only (a `batch` step stands for its job).
    let mut steps: Vec<(String, JobRef, u32)> = Vec::new();
    for text in p.operands.iter().flat_map(|o| query::list(o)) {
        let step = text
            .split_once('.')
            .and_then(|(_, s)| s.parse::<u32>().ok());
        match (JobRef::parse(&text), step) {
            (Some(r), Some(n)) => steps.push((text, r, n)),
            (Some(r), None) => sel.refs.push((text, r)),
            (None, _) => return query::fail(CMD, format!("Invalid job id {text}")),
        }
    }
    let pick = |opt: &str, var: &str| -> Vec<String> {
        p.value(opt)
            .map(str::to_owned)
            .or_else(|| env(var))
            .map(|v| query::list(&v))
            .unwrap_or_default()
    };
    sel.names = pick("jobname", "SCANCEL_NAME");
    sel.names
        .extend(p.value("name").map(query::list).unwrap_or_default());
    sel.partitions = pick("partition", "SCANCEL_PARTITION");
    sel.accounts = pick("account", "SCANCEL_ACCOUNT");
    sel.qos = pick("qos", "SCANCEL_QOS");
    if let Some(u) = p
        .value("user")
        .map(str::to_owned)
        .or_else(|| env("SCANCEL_USER"))
    {
        match query::user_name(&u) {
            Some(name) => sel.users.push(name),
            None => return query::fail(CMD, format!("Invalid user name: {u}")),
        }
    }
    if p.has("me") {
        sel.users.push(query::current_user());
    }
    if let Some(t) = p
        .value("state")
        .map(str::to_owned)
        .or_else(|| env("SCANCEL_STATE"))
    {
        for s in query::list(&t) {
            match state::parse(&s) {
                Some(st @ (JobState::Pending | JobState::Running)) => sel.states.push(st),
                // cadre does not suspend jobs: no job is SUSPENDED.
                _ if s.eq_ignore_ascii_case("SUSPENDED") || s.eq_ignore_ascii_case("S") => {}
                _ => {
                    eprintln!("Invalid job state specified: {s}");
                    eprintln!("Valid job states are PENDING, RUNNING, and SUSPENDED");
                    return ExitCode::from(exit::ERROR);
                }
            }
        }
    }
    if let Some(w) = p.value("nodelist") {
        match cadre_core::hostlist::expand(w) {
            Ok(n) => sel.nodes = n,
            Err(e) => return query::fail(CMD, format!("Invalid node list: {e}")),
        }
    }
    if sel.refs.is_empty() && steps.is_empty() && !sel.has_filters() {
        return query::fail(CMD, "No job identification provided");
    }

    let mut client = match query::connect() {
        Ok(c) => c,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    let active: JobList = match client.get("/jobs?detail=true&state=PENDING,RUNNING,PREEMPTING") {
        Ok(l) => l,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e.into())),
    };
    let mut rc = ExitCode::SUCCESS;
    for (text, r, step) in steps {
        let job = active.jobs.iter().find(|j| r.matches(j)).map(|j| j.id);
        let result = match job {
            Some(id) => {
                if verbose {
                    eprintln!("{CMD}: Terminating step {text}");
                }
                client
                    .send::<_, serde_json::Value>(
                        Method::POST,
                        &format!("/jobs/{id}/steps/{step}/cancel"),
                        Some(&CancelRequest { signal }),
                    )
                    .map_err(|e| KillError::of(&e.into()))
            }
            None => Err(KillError::Slurm(SlurmErrno::InvalidJobId)),
        };
        if let Err(why) = result
            && !report_kill_error(&text, &why, quiet)
        {
            rc = ExitCode::from(Request::Cancel.exit_code(None));
        }
    }
    if sel.refs.is_empty() && !sel.has_filters() {
        return rc;
    }
    let (todo, missing) = targets(&active.jobs, &sel);
    for text in missing {
        // Not among the jobs that have not ended: an ended job, or none at all.
        let known = JobRef::parse(&text)
            .filter(|r| r.index.is_none())
            .is_some_and(|r| client.get::<JobView>(&format!("/jobs/{}", r.id)).is_ok());
        let why = KillError::Slurm(if known {
            SlurmErrno::AlreadyDone
        } else {
            SlurmErrno::InvalidJobId
        });
        if !report_kill_error(&text, &why, quiet) {
            rc = ExitCode::from(Request::Cancel.exit_code(None));
        }
    }
    for (text, id) in todo {
        if verbose {
            match signal {
                Some(s) => eprintln!("{CMD}: Signal {s} to job {text}"),
                None => eprintln!("{CMD}: Terminating job {text}"),
            }
        }
        let result = match signal {
            None => {
                client.send::<(), serde_json::Value>(Method::DELETE, &format!("/jobs/{id}"), None)
            }
            Some(s) => client.send::<_, serde_json::Value>(
                Method::POST,
                &format!("/jobs/{id}/cancel"),
                Some(&CancelRequest { signal: Some(s) }),
            ),
        };
        if let Err(why) = result.map_err(|e| KillError::of(&e.into()))
            && !report_kill_error(&text, &why, quiet)
        {
            rc = ExitCode::from(Request::Cancel.exit_code(None));
        }
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::squeue::tests::job;
    use cadre_core::job::{ArrayIndex, JobId};

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("USR1"), Some(10));
        assert_eq!(parse_signal("sigterm"), Some(15));
        assert_eq!(parse_signal("SIGUSR2"), Some(12));
        assert_eq!(parse_signal("9"), Some(9));
        assert_eq!(parse_signal("FOO"), None);
        assert_eq!(parse_signal("0"), None);
    }

    #[test]
    fn ids_name_jobs_array_tasks_and_whole_arrays() {
        let mut active: Vec<JobView> = (0..3)
            .map(|i| {
                let mut j = job(50 + i, JobState::Pending);
                j.array = Some(ArrayIndex {
                    array_job: JobId(50),
                    index: i as u32,
                    max_running: None,
                });
                j
            })
            .collect();
        active.push(job(60, JobState::Running));
        let sel = |texts: &[&str]| Selection {
            refs: texts
                .iter()
                .map(|t| (t.to_string(), JobRef::parse(t).unwrap()))
                .collect(),
            ..Selection::default()
        };
        let (t, missing) = targets(&active, &sel(&["50_1", "60", "99"]));
        assert_eq!(t, vec![("50_1".into(), 51), ("60".into(), 60)]);
        assert_eq!(missing, vec!["99".to_string()]);
        let (t, _) = targets(&active, &sel(&["50"]));
        assert_eq!(t.iter().map(|x| x.1).collect::<Vec<_>>(), vec![50, 51, 52]);
    }

    #[test]
    fn filters_alone_or_with_ids() {
        let active = vec![job(1, JobState::Pending), job(2, JobState::Running)];
        let pending = Selection {
            states: vec![JobState::Pending],
            states_given: true,
            ..Selection::default()
        };
        assert_eq!(targets(&active, &pending).0, vec![("1".into(), 1)]);
        let both = Selection {
            refs: vec![("2".into(), JobRef::parse("2").unwrap())],
            ..pending
        };
        assert!(targets(&active, &both).0.is_empty());
        let other_user = Selection {
            users: vec!["bob".into()],
            ..Selection::default()
        };
        assert!(targets(&active, &other_user).0.is_empty());
    }
}
