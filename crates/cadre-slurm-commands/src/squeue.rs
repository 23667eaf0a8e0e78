//! `squeue`: the jobs in the queue, with Slurm's options, formats and exit codes.
//!
//! Jobs come from `GET /jobs?detail=true` (users see their own, administrators every
//! job). By default pending, running and completing jobs are shown, sorted by partition,
//! state, descending priority and descending id, as Slurm 22.05 sorts them. Finished jobs
//! (`-t all`, `-t CD`, ...) are shown for `MinJobAge` (300 s) after they ended, as Slurm
//! keeps them; cadre's store keeps them for good, but `sacct` is where they are listed.
//! The pending tasks of a job array are shown on one line (`12_[3-7]`) unless `-r`.
//!
//! Not here: the field engine ([`super::format`]).

use super::format::{self, Layout, parse_names, parse_percent};
use super::query::{self, JobRef, Opt};
use cadre_core::job::{JobState, RequeuePolicy};
use cadre_proto::api::{JobList, JobView, StepList};
use cadre_proto::exit;
use cadre_slurm::getopt::ArgKind;
use cadre_slurm::refusal::SlurmErrno;
use cadre_slurm::state;
use cadre_slurm::time::format_duration_short;
use std::ffi::OsString;
use std::process::ExitCode;

const CMD: &str = "squeue";

const OPTIONS: &[Opt] = &[
    Opt::new('A', "account", ArgKind::Required),
    Opt::new('a', "all", ArgKind::None),
    Opt::new('r', "array", ArgKind::None),
    Opt::long("array-unique", ArgKind::None),
    Opt::new('o', "format", ArgKind::Required),
    Opt::new('O', "Format", ArgKind::Required),
    Opt::long("help", ArgKind::None),
    Opt::long("hide", ArgKind::None),
    Opt::new('j', "jobs", ArgKind::OptionalOrNext),
    Opt::long("json", ArgKind::None),
    Opt::long("local", ArgKind::None),
    Opt::new('l', "long", ArgKind::None),
    Opt::long("me", ArgKind::None),
    Opt::new('n', "name", ArgKind::Required),
    Opt::long("noconvert", ArgKind::None),
    Opt::new('w', "nodelist", ArgKind::Required),
    Opt::new('h', "noheader", ArgKind::None),
    Opt::new('p', "partition", ArgKind::Required),
    Opt::new('P', "priority", ArgKind::None),
    Opt::new('q', "qos", ArgKind::Required),
    Opt::new('S', "sort", ArgKind::Required),
    // In Slurm's order, which getopt's "ambiguous" message lists them in.
    Opt::long("start", ArgKind::None),
    Opt::new('s', "steps", ArgKind::OptionalOrNext),
    Opt::new('t', "states", ArgKind::Required),
    Opt::long("usage", ArgKind::None),
    Opt::new('u', "user", ArgKind::Required),
    Opt::long("users", ArgKind::Required),
    Opt::new('v', "verbose", ArgKind::None),
    Opt::new('V', "version", ArgKind::None),
];

const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";
const START_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R";

/// What a column shows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Account,
    JobIdUnique,
    TresPerNode,
    MinCpus,
    Cpus,
    Nodes,
    EndTime,
    Dependency,
    Features,
    ArrayJobId,
    JobArrayId,
    Group,
    OverSubscribe,
    JobId,
    Name,
    Comment,
    ArrayTaskId,
    TimeLimit,
    TimeLeft,
    MinMemory,
    TimeUsed,
    ReqNodes,
    NodeList,
    PriorityNorm,
    Partition,
    Qos,
    Priority,
    Reason,
    ReasonList,
    StartTime,
    StateCompact,
    State,
    User,
    Uid,
    Reservation,
    SubmitTime,
    Nice,
    SchedNodes,
    NumTasks,
    RestartCnt,
    Requeue,
    PendingTime,
    ExitCode,
    CpusPerTask,
    TresPerJob,
}

fn letter(c: char) -> Option<Field> {
    use Field::*;
    Some(match c {
        'a' => Account,
        'A' => JobIdUnique,
        'b' => TresPerNode,
        'c' => MinCpus,
        'C' => Cpus,
        'D' => Nodes,
        'e' => EndTime,
        'E' => Dependency,
        'f' => Features,
        'F' => ArrayJobId,
        'g' => Group,
        'h' => OverSubscribe,
        'i' => JobId,
        'j' => Name,
        'k' => Comment,
        'K' => ArrayTaskId,
        'l' => TimeLimit,
        'L' => TimeLeft,
        'm' => MinMemory,
        'M' => TimeUsed,
        'n' => ReqNodes,
        'N' => NodeList,
        'p' => PriorityNorm,
        'P' => Partition,
        'q' => Qos,
        'Q' => Priority,
        'r' => Reason,
        'R' => ReasonList,
        'S' => StartTime,
        't' => StateCompact,
        'T' => State,
        'u' => User,
        'U' => Uid,
        'v' => Reservation,
        'V' => SubmitTime,
        'y' => Nice,
        'Y' => SchedNodes,
        _ => return None,
    })
}

fn named(name: &str) -> Option<Field> {
    use Field::*;
    Some(match name {
        "account" => Account,
        "jobid" => JobIdUnique,
        "tres-per-node" => TresPerNode,
        "tres-per-job" => TresPerJob,
        "mincpus" => MinCpus,
        "numcpus" => Cpus,
        "numnodes" => Nodes,
        "endtime" => EndTime,
        "dependency" => Dependency,
        "feature" => Features,
        "arrayjobid" => ArrayJobId,
        "jobarrayid" => JobArrayId,
        "groupname" => Group,
        "oversubscribe" => OverSubscribe,
        "name" => Name,
        "comment" => Comment,
        "arraytaskid" => ArrayTaskId,
        "timelimit" => TimeLimit,
        "timeleft" => TimeLeft,
        "minmemory" => MinMemory,
        "timeused" => TimeUsed,
        "reqnodes" => ReqNodes,
        "nodelist" => NodeList,
        "priority" => PriorityNorm,
        "partition" => Partition,
        "qos" => Qos,
        "prioritylong" => Priority,
        "reason" => Reason,
        "reasonlist" => ReasonList,
        "starttime" => StartTime,
        "statecompact" => StateCompact,
        "state" => State,
        "username" => User,
        "userid" => Uid,
        "reservation" => Reservation,
        "submittime" => SubmitTime,
        "nice" => Nice,
        "schednodes" => SchedNodes,
        "numtasks" => NumTasks,
        "restartcnt" => RestartCnt,
        "requeue" => Requeue,
        "pendingtime" => PendingTime,
        "exit_code" => ExitCode,
        "cpus-per-task" => CpusPerTask,
        _ => return None,
    })
}

fn header(f: Field) -> &'static str {
    use Field::*;
    match f {
        Account => "ACCOUNT",
        JobIdUnique | JobId => "JOBID",
        TresPerNode => "TRES_PER_NODE",
        TresPerJob => "TRES_PER_JOB",
        MinCpus => "MIN_CPUS",
        Cpus => "CPUS",
        Nodes => "NODES",
        EndTime => "END_TIME",
        Dependency => "DEPENDENCY",
        Features => "FEATURES",
        ArrayJobId => "ARRAY_JOB_ID",
        JobArrayId => "JOBID",
        Group => "GROUP",
        OverSubscribe => "OVER_SUBSCRIBE",
        Name => "NAME",
        Comment => "COMMENT",
        ArrayTaskId => "ARRAY_TASK_ID",
        TimeLimit => "TIME_LIMIT",
        TimeLeft => "TIME_LEFT",
        MinMemory => "MIN_MEMORY",
        TimeUsed => "TIME",
        ReqNodes => "REQ_NODES",
        NodeList => "NODELIST",
        PriorityNorm | Priority => "PRIORITY",
        Partition => "PARTITION",
        Qos => "QOS",
        Reason => "REASON",
        ReasonList => "NODELIST(REASON)",
        StartTime => "START_TIME",
        StateCompact => "ST",
        State => "STATE",
        User => "USER",
        Uid => "UID",
        Reservation => "RESERVATION",
        SubmitTime => "SUBMIT_TIME",
        Nice => "NICE",
        SchedNodes => "SCHEDNODES",
        NumTasks => "TASKS",
        RestartCnt => "RESTART_COUNT",
        Requeue => "REQUEUE",
        PendingTime => "PENDING_TIME",
        ExitCode => "EXIT_CODE",
        CpusPerTask => "CPUS_PER_TASK",
    }
}

/// One line of output: a job, or the pending tasks of an array shown together.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub job: JobView,
    /// The array indices this line stands for (sorted), when it stands for several.
    pub indices: Option<Vec<u32>>,
}

/// Why a finished job ended, as `%R` and `%r` say it; `None` for a clean end.
fn failure_reason(s: JobState) -> Option<&'static str> {
    match s {
        JobState::Failed => Some("NonZeroExitCode"),
        JobState::Timeout => Some("TimeLimit"),
        JobState::NodeFail => Some("NodeDown"),
        JobState::OutOfMemory => Some("OutOfMemory"),
        _ => None,
    }
}

/// One year: the end Slurm shows for a running job without a time limit.
const YEAR_SECS: u64 = 365 * 86400;

/// A field's value for a row at `now`.
pub(crate) fn value(row: &Row, f: Field, now: u64) -> String {
    use Field::*;
    let j = &row.job;
    let spec = j.spec.as_ref();
    let null = || "(null)".to_string();
    match f {
        Account => j.account.clone(),
        JobIdUnique => j.id.0.to_string(),
        JobId => match (&row.indices, j.array) {
            (Some(ix), Some(a)) => format!("{}_[{}]", a.array_job.0, format::index_ranges(ix)),
            _ => format::job_id(j.id.0, j.array),
        },
        TresPerNode => {
            query::gpus_per_node(j).map_or_else(|| "N/A".into(), |g| format!("gres:gpu:{g}"))
        }
        // cadre's GPU requests are per task or per node, never per job.
        TresPerJob => "N/A".into(),
        MinCpus => spec
            .and_then(|s| s.groups.iter().map(|g| g.per_task.cpus).max())
            .unwrap_or(1)
            .to_string(),
        Cpus => j.cpus.to_string(),
        Nodes => query::node_count(j).to_string(),
        EndTime => match (j.end_time, j.start_time.or(j.expected_start)) {
            (Some(e), _) => format::timestamp(e),
            (None, Some(s)) => format::timestamp(
                s + if j.time_limit == 0 {
                    YEAR_SECS
                } else {
                    j.time_limit
                },
            ),
            (None, None) => "N/A".into(),
        },
        Dependency => spec.map_or_else(null, query::dependency_text),
        Features => match spec.map(|s| s.features.join("&")) {
            Some(f) if !f.is_empty() => f,
            _ => null(),
        },
        ArrayJobId | JobArrayId => j.array.map_or(j.id.0, |a| a.array_job.0).to_string(),
        Group => nix::unistd::User::from_name(&j.user)
            .ok()
            .flatten()
            .and_then(|u| nix::unistd::Group::from_gid(u.gid).ok().flatten())
            .map_or_else(|| j.user.clone(), |g| g.name),
        OverSubscribe => if spec.is_some_and(|s| s.exclusive) {
            "NO"
        } else {
            "OK"
        }
        .into(),
        Name => j.name.clone(),
        Comment => spec
            .and_then(|s| s.annotations.get("slurm.comment").cloned())
            .unwrap_or_else(null),
        ArrayTaskId => match (&row.indices, j.array) {
            (Some(ix), _) => format::index_ranges(ix),
            (None, Some(a)) => a.index.to_string(),
            (None, None) => "N/A".into(),
        },
        TimeLimit => format::time_limit(j.time_limit),
        TimeLeft => match (j.state.is_active(), j.start_time, j.time_limit) {
            (true, Some(s), 0) => format_duration_short((s + YEAR_SECS).saturating_sub(now)),
            (true, Some(s), limit) => format_duration_short((s + limit).saturating_sub(now)),
            (_, _, limit) => format::time_limit(limit),
        },
        MinMemory => query::mem_per_node(j).map_or_else(|| "0".into(), format::mem_mib),
        TimeUsed => format_duration_short(time_used(j, now)),
        ReqNodes | SchedNodes => match f {
            ReqNodes => String::new(),
            _ => null(),
        },
        NodeList => j.nodes.clone(),
        PriorityNorm => format!(
            "{:.14}",
            j.priority.unwrap_or(0) as f64 / f64::from(u32::MAX)
        ),
        Partition => j.partition.clone(),
        Qos => spec
            .and_then(|s| s.qos.clone())
            .unwrap_or_else(|| "normal".into()),
        Priority => j.priority.unwrap_or(0).to_string(),
        Reason => match j.state {
            JobState::Pending => j.reason.clone(),
            s => failure_reason(s).unwrap_or("None").into(),
        },
        ReasonList => match j.state {
            JobState::Pending => format!("({})", j.reason),
            s => failure_reason(s).map_or_else(|| j.nodes.clone(), |r| format!("({r})")),
        },
        StartTime => j
            .start_time
            .or(j.expected_start)
            .map_or_else(|| "N/A".into(), format::timestamp),
        StateCompact => state::compact(j.state).into(),
        State => state::long(j.state).into(),
        User => j.user.clone(),
        Uid => query::uid_of(&j.user).map_or_else(|| j.user.clone(), |u| u.to_string()),
        Reservation => null(),
        SubmitTime => format::timestamp(j.submit_time),
        Nice => spec.map_or(0, |s| s.nice).to_string(),
        NumTasks => j.tasks.to_string(),
        RestartCnt => j.requeues.to_string(),
        Requeue => match spec.map(|s| s.requeue) {
            Some(RequeuePolicy::Never) => "0",
            _ => "1",
        }
        .into(),
        PendingTime => j
            .start_time
            .unwrap_or(now)
            .saturating_sub(j.submit_time)
            .to_string(),
        // The raw wait status, as Slurm shows it here: the code times 256, or the signal.
        ExitCode => match j.exit_code {
            Some(c) if c > 128 && c < 128 + 65 => (c - 128).to_string(),
            Some(c) => (i64::from(c) * 256).to_string(),
            None => "0".into(),
        },
        CpusPerTask => spec
            .and_then(|s| s.groups.first())
            .map_or(1, |g| g.per_task.cpus)
            .to_string(),
    }
}

/// An exit status as Slurm writes it: `code:signal`.
pub(crate) fn exit_code_text(code: Option<i32>) -> String {
    match code {
        // cadre records a death by signal N as 128 + N, as shells report it.
        Some(c) if c > 128 && c < 128 + 65 => format!("0:{}", c - 128),
        Some(c) => format!("{c}:0"),
        None => "0:0".into(),
    }
}

fn time_used(j: &JobView, now: u64) -> u64 {
    match (j.start_time, j.end_time) {
        (Some(s), Some(e)) => e.saturating_sub(s),
        (Some(s), None) if j.state.is_active() => now.saturating_sub(s),
        _ => 0,
    }
}

/// `squeue -s`: the running steps (batch steps included), in Slurm's default step layout.
fn list_steps(sel: &Selection, header: bool) -> ExitCode {
    let mut client = match query::connect() {
        Ok(c) => c,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    let list: StepList = match client.get("/steps?running=true") {
        Ok(l) => l,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e.into())),
    };
    let now = query::now();
    if header {
        println!(
            "{:>15} {:>8} {:>9} {:>8} {:>9} NODELIST",
            "STEPID", "NAME", "PARTITION", "USER", "TIME"
        );
    }
    let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
    let cut = |s: &str, n: usize| s.chars().take(n).collect::<String>();
    for st in &list.steps {
        if !(any(&sel.users, &st.user)
            && any(&sel.partitions, &st.partition)
            && any(&sel.names, &st.name)
            && (sel.jobs.is_empty() || sel.jobs.iter().any(|j| j.id == st.job.0)))
        {
            continue;
        }
        let id = if st.step == cadre_proto::api::BATCH_STEP {
            format!("{}.batch", st.job)
        } else {
            format!("{}.{}", st.job, st.step)
        };
        println!(
            "{:>15} {:>8} {:>9} {:>8} {:>9} {}",
            cut(&id, 15),
            cut(&st.name, 8),
            cut(&st.partition, 9),
            cut(&st.user, 8),
            format_duration_short(now.saturating_sub(st.start_time)),
            st.nodes
        );
    }
    ExitCode::SUCCESS
}

/// What to show, from the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selection {
    pub states: Option<Vec<JobState>>,
    pub users: Vec<String>,
    pub accounts: Vec<String>,
    pub partitions: Vec<String>,
    pub names: Vec<String>,
    pub qos: Vec<String>,
    pub jobs: Vec<JobRef>,
    pub nodes: Vec<String>,
}

impl Selection {
    fn shows(&self, j: &JobView, now: u64) -> bool {
        let states_ok = match &self.states {
            Some(states) => {
                states.contains(&j.state)
                    && (!j.state.is_final()
                        || j.end_time
                            .is_some_and(|e| now.saturating_sub(e) <= query::MIN_JOB_AGE_SECS))
            }
            None => matches!(
                j.state,
                JobState::Pending | JobState::Running | JobState::Preempting
            ),
        };
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
        states_ok
            && any(&self.users, &j.user)
            && any(&self.accounts, &j.account)
            && any(&self.partitions, &j.partition)
            && any(&self.names, &j.name)
            && any(&self.qos, &qos)
            && (self.jobs.is_empty() || self.jobs.iter().any(|r| r.matches(j)))
            && on_nodes
    }
}

/// The rows to print: selected, arrays' pending tasks together unless `one_per_task`,
/// sorted as Slurm sorts them.
pub(crate) fn rows(jobs: Vec<JobView>, sel: &Selection, one_per_task: bool, now: u64) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for j in jobs.into_iter().filter(|j| sel.shows(j, now)) {
        if !one_per_task
            && j.state == JobState::Pending
            && let Some(a) = j.array
            && let Some(row) = rows.iter_mut().find(|r| {
                r.job.state == JobState::Pending
                    && r.job.array.is_some_and(|b| b.array_job == a.array_job)
                    && r.job.reason == j.reason
            })
        {
            let first = row.job.array.map_or(0, |b| b.index);
            let ix = row.indices.get_or_insert_with(|| vec![first]);
            ix.push(a.index);
            ix.sort_unstable();
            continue;
        }
        rows.push(Row {
            job: j,
            indices: None,
        });
    }
    for r in &mut rows {
        if r.indices.as_ref().is_some_and(|ix| ix.len() < 2) {
            r.indices = None;
        }
    }
    rows.sort_by(|a, b| {
        let (x, y) = (&a.job, &b.job);
        x.partition
            .cmp(&y.partition)
            .then(state::rank(x.state).cmp(&state::rank(y.state)))
            .then(y.priority.cmp(&x.priority))
            .then(y.id.cmp(&x.id))
    });
    rows
}

/// `-S`: sorts by the listed fields (`P,-p`, `i`), each ascending or (`-`) descending.
fn sort_rows(rows: &mut [Row], keys: &str, now: u64) {
    for key in keys.split(',').rev().filter(|k| !k.is_empty()) {
        let (desc, letter_) = match key.strip_prefix('-') {
            Some(k) => (true, k),
            None => (false, key.trim_start_matches('+')),
        };
        let Some(f) = letter_.chars().next().and_then(letter) else {
            continue;
        };
        let numeric = |r: &Row| -> Option<u64> {
            let j = &r.job;
            Some(match f {
                Field::JobId | Field::JobIdUnique => j.id.0,
                Field::PriorityNorm | Field::Priority => j.priority.unwrap_or(0),
                Field::StateCompact | Field::State => state::rank(j.state) as u64,
                Field::StartTime => j.start_time.or(j.expected_start).unwrap_or(u64::MAX),
                Field::SubmitTime => j.submit_time,
                Field::TimeUsed => time_used(j, now),
                Field::Nodes => query::node_count(j),
                Field::Cpus => j.cpus,
                Field::TimeLimit => j.time_limit,
                _ => return None,
            })
        };
        rows.sort_by(|a, b| {
            let o = match (numeric(a), numeric(b)) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => value(a, f, now).cmp(&value(b, f, now)),
            };
            if desc { o.reverse() } else { o }
        });
    }
}

/// The lines squeue prints for `rows`.
pub(crate) fn render(layout: &Layout<Field>, rows: &[Row], header: bool, now: u64) -> Vec<String> {
    let mut out = Vec::with_capacity(rows.len() + 1);
    if header {
        out.push(layout.render(|f| self::header(f).to_string()));
    }
    for r in rows {
        out.push(layout.render(|f| value(r, f, now)));
    }
    out
}

fn json(rows: &[Row], now: u64) -> serde_json::Value {
    let jobs: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let j = &r.job;
            serde_json::json!({
                "job_id": j.id.0,
                "array_job_id": j.array.map_or(0, |a| a.array_job.0),
                "array_task_id": j.array.map(|a| a.index),
                "name": j.name,
                "user_name": j.user,
                "account": j.account,
                "partition": j.partition,
                "job_state": state::long(j.state),
                "state_reason": value(r, Field::Reason, now),
                "nodes": j.nodes,
                "node_count": query::node_count(j),
                "cpus": j.cpus,
                "tasks": j.tasks,
                "time_limit": j.time_limit / 60,
                "submit_time": j.submit_time,
                "start_time": j.start_time.or(j.expected_start).unwrap_or(0),
                "end_time": j.end_time.unwrap_or(0),
                "priority": j.priority.unwrap_or(0),
                "exit_code": j.exit_code,
                "restart_cnt": j.requeues,
            })
        })
        .collect();
    serde_json::json!({ "jobs": jobs })
}

fn usage() -> ExitCode {
    println!(
        "Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]\n              [-n name] [-o format] [--only-job-state] [-p partitions]\n              [--qos qos] [--reservation reservation] [--sort fields] [--start]\n              [--step step_id] [-t states] [-u user_name] [--usage]\n              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]\n              [--json] [--yaml] [-ahjlrsv]"
    );
    ExitCode::SUCCESS
}

/// `squeue [OPTIONS]`.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let p = match query::begin(CMD, args, OPTIONS, usage) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let env = query::env_var;
    let mut sel = Selection::default();
    let start = p.has("start");
    match p
        .value("states")
        .map(str::to_owned)
        .or_else(|| env("SQUEUE_STATES"))
    {
        Some(s) if s.eq_ignore_ascii_case("all") => sel.states = Some(state::ALL.to_vec()),
        Some(s) => {
            let mut states = Vec::new();
            for name in query::list(&s) {
                match state::parse(&name) {
                    Some(st) => states.push(st),
                    None if state::is_other(&name) => {}
                    None => {
                        eprintln!("{CMD}: error: Invalid job state specified: {name}");
                        eprintln!(
                            "{CMD}: error: Valid job states include: PENDING,RUNNING,SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,PREEMPTED,BOOT_FAIL,DEADLINE,OUT_OF_MEMORY,COMPLETING,CONFIGURING,RESIZING,RESV_DEL_HOLD,REQUEUED,REQUEUE_FED,REQUEUE_HOLD,REVOKED,SIGNALING,SPECIAL_EXIT,STAGE_OUT,STOPPED\n"
                        );
                        return ExitCode::from(exit::ERROR);
                    }
                }
            }
            sel.states = Some(states);
        }
        None if start => sel.states = Some(vec![JobState::Pending]),
        None => {}
    }
    let mut users: Vec<String> = p
        .values("user")
        .iter()
        .chain(p.values("users").iter())
        .flat_map(|u| query::list(u))
        .collect();
    if users.is_empty()
        && let Some(u) = env("SQUEUE_USERS")
    {
        users = query::list(&u);
    }
    for u in users {
        match query::user_name(&u) {
            Some(name) => sel.users.push(name),
            None => {
                eprintln!("{CMD}: error: Invalid user: {u}\n");
                // Nobody of that name has jobs: the filter keeps its place.
                sel.users.push(format!("\0{u}"));
            }
        }
    }
    if p.has("me") {
        sel.users.push(query::current_user());
    }
    sel.accounts = p
        .value("account")
        .map(str::to_owned)
        .or_else(|| env("SQUEUE_ACCOUNT"))
        .map(|a| query::list(&a))
        .unwrap_or_default();
    sel.partitions = p
        .value("partition")
        .map(str::to_owned)
        .or_else(|| env("SQUEUE_PARTITION"))
        .map(|a| query::list(&a))
        .unwrap_or_default();
    sel.names = p
        .value("name")
        .map(str::to_owned)
        .or_else(|| env("SQUEUE_NAMES"))
        .map(|a| query::list(&a))
        .unwrap_or_default();
    sel.qos = p.value("qos").map(query::list).unwrap_or_default();
    if let Some(w) = p.value("nodelist") {
        match cadre_core::hostlist::expand(w) {
            Ok(n) => sel.nodes = n,
            Err(e) => return query::fail(CMD, format!("Invalid node list: {e}")),
        }
    }
    let job_args: Vec<String> = p
        .values("jobs")
        .iter()
        .flat_map(|j| query::list(j))
        .chain(p.operands.iter().flat_map(|o| query::list(o)))
        .collect();
    for text in &job_args {
        match JobRef::parse(text) {
            Some(r) => sel.jobs.push(r),
            None => return query::fail(CMD, format!("Invalid job id: {text}")),
        }
    }
    let long = p.has("long");
    if p.has("steps") {
        return list_steps(&sel, !p.has("noheader"));
    }
    let fmt_o = p
        .value("format")
        .map(str::to_owned)
        .or_else(|| env("SQUEUE_FORMAT"));
    let fmt_big_o = p
        .value("Format")
        .map(str::to_owned)
        .or_else(|| env("SQUEUE_FORMAT2"));
    let layout = if let Some(f) = fmt_o.filter(|_| p.value("Format").is_none()) {
        let (l, bad) = parse_percent(&f, letter);
        for c in bad {
            eprintln!("{CMD}: error: Invalid job format specification: {c}");
        }
        l
    } else if let Some(f) = fmt_big_o {
        let (l, bad) = parse_names(&f, named);
        for n in bad {
            eprintln!("{CMD}: error: Invalid job format specification: {n}");
        }
        l
    } else {
        let f = if start {
            START_FORMAT
        } else if long {
            LONG_FORMAT
        } else {
            DEFAULT_FORMAT
        };
        parse_percent(f, letter).0
    };

    let mut client = match query::connect() {
        Ok(c) => c,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    let path = match &sel.states {
        Some(_) => "/jobs?detail=true".to_owned(),
        None => "/jobs?detail=true&state=PENDING,RUNNING,PREEMPTING".to_owned(),
    };
    let list: JobList = match client.get(&path) {
        Ok(l) => l,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e.into())),
    };
    if let [one] = sel.jobs.as_slice()
        && !list.jobs.iter().any(|j| one.matches(j))
    {
        eprintln!("slurm_load_jobs error: {}", SlurmErrno::InvalidJobId);
        return ExitCode::from(exit::ERROR);
    }
    let now = query::now();
    let mut rows = rows(
        list.jobs,
        &sel,
        p.has("array") || p.has("array-unique"),
        now,
    );
    if let Some(keys) = p
        .value("sort")
        .map(str::to_owned)
        .or_else(|| env("SQUEUE_SORT"))
    {
        sort_rows(&mut rows, &keys, now);
    } else if start {
        sort_rows(&mut rows, "S", now);
    }
    if p.has("json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&rows, now)).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    if long && !p.has("noheader") {
        println!("{}", format::ctime(now));
    }
    for line in render(&layout, &rows, !p.has("noheader"), now) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cadre_core::job::{ArrayIndex, JobId, JobSpec};
    use cadre_core::resources::TaskResources;
    use cadre_core::time::Dur;

    pub(crate) fn job(id: u64, state: JobState) -> JobView {
        let mut spec = JobSpec::simple(
            "alice",
            "physics",
            2,
            TaskResources {
                cpus: 4,
                gpus: 1,
                ..TaskResources::default()
            },
            Dur(5400),
        );
        spec.name = "train-resnet50".into();
        JobView {
            id: JobId(id),
            name: spec.name.clone(),
            user: "alice".into(),
            account: "physics".into(),
            partition: "gpu".into(),
            state,
            reason: if state == JobState::Pending {
                "Resources".into()
            } else {
                "None".into()
            },
            submit_time: 1_000,
            start_time: (state != JobState::Pending).then_some(2_000),
            end_time: state.is_final().then_some(2_100),
            time_limit: 5400,
            nodes: if state == JobState::Pending {
                String::new()
            } else {
                "node[001-002]".into()
            },
            tasks: 2,
            gpus: 2.0,
            exit_code: state
                .is_final()
                .then_some(if state == JobState::Failed { 3 } else { 0 }),
            requeues: 0,
            expected_start: None,
            priority: Some(1000 + id),
            held: false,
            array: None,
            cpus: 8,
            spec: Some(spec),
            allocation: None,
            run: None,
        }
    }

    fn lines(fmt: &str, rows: &[Row], now: u64) -> String {
        let (l, bad) = parse_percent(fmt, letter);
        assert!(bad.is_empty());
        framed(render(&l, rows, true, now))
    }

    /// Lines framed by `>` and `|`, so that snapshots keep leading and trailing blanks.
    pub(crate) fn framed(lines: Vec<String>) -> String {
        lines
            .iter()
            .map(|l| format!(">{l}|"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_default_format_has_slurms_widths_and_state_codes() {
        let mut jobs = vec![
            job(7, JobState::Running),
            job(8, JobState::Pending),
            job(9, JobState::Pending),
        ];
        jobs[0].start_time = Some(2_000);
        jobs[2].reason = "Priority".into();
        let sel = Selection::default();
        let rows = rows(jobs, &sel, false, 2_065);
        insta::assert_snapshot!(lines(DEFAULT_FORMAT, &rows, 2_065));
    }

    #[test]
    fn the_long_format_and_finished_jobs_reasons() {
        let jobs = vec![
            job(3, JobState::Failed),
            job(4, JobState::Completed),
            job(5, JobState::Timeout),
        ];
        let sel = Selection {
            states: Some(state::ALL.to_vec()),
            ..Selection::default()
        };
        let rows = rows(jobs, &sel, false, 2_200);
        insta::assert_snapshot!(lines(LONG_FORMAT, &rows, 2_200));
        // Finished jobs are shown for MinJobAge after their end, then no more.
        let later = rows_after(2_100 + query::MIN_JOB_AGE_SECS + 1);
        assert!(later.is_empty());
    }

    fn rows_after(now: u64) -> Vec<Row> {
        let sel = Selection {
            states: Some(state::ALL.to_vec()),
            ..Selection::default()
        };
        rows(vec![job(3, JobState::Failed)], &sel, false, now)
    }

    #[test]
    fn pending_array_tasks_share_a_line_unless_asked_one_per_task() {
        let jobs: Vec<JobView> = (0..6)
            .map(|i| {
                let mut j = job(20 + i, JobState::Pending);
                j.array = Some(ArrayIndex {
                    array_job: JobId(20),
                    index: i as u32,
                    max_running: None,
                });
                j.priority = Some(5);
                j
            })
            .collect();
        let sel = Selection::default();
        let together = rows(jobs.clone(), &sel, false, 1_000);
        insta::assert_snapshot!(lines("%.18i|%A|%F|%K|%t", &together, 1_000));
        let apart = rows(jobs, &sel, true, 1_000);
        assert_eq!(apart.len(), 6);
        assert_eq!(value(&apart[0], Field::JobId, 0), "20_5");
        assert_eq!(value(&apart[5], Field::JobId, 0), "20_0");
    }

    #[test]
    fn named_fields_and_the_start_format() {
        let mut j = job(11, JobState::Pending);
        j.expected_start = Some(format::from_local(2026, 11, 21, 14, 0, 0).unwrap());
        let rows = rows(vec![j], &Selection::default(), false, 1_000);
        let (l, _) = parse_names(
            "jobid:.6,name:5,tres-per-node,numcpus:.4,minmemory:4",
            named,
        );
        insta::assert_snapshot!(framed(render(&l, &rows, true, 1_000)));
        insta::assert_snapshot!(lines(START_FORMAT, &rows, 1_000));
    }

    #[test]
    fn filters_select_by_user_state_job_and_array() {
        let mut a = job(30, JobState::Pending);
        a.array = Some(ArrayIndex {
            array_job: JobId(29),
            index: 1,
            max_running: None,
        });
        let b = job(31, JobState::Running);
        let mut sel = Selection {
            jobs: vec![JobRef::parse("29").unwrap()],
            ..Selection::default()
        };
        assert_eq!(rows(vec![a.clone(), b.clone()], &sel, true, 0).len(), 1);
        sel.jobs = vec![JobRef::parse("29_2").unwrap()];
        assert!(rows(vec![a.clone(), b.clone()], &sel, true, 0).is_empty());
        sel.jobs.clear();
        sel.states = Some(vec![JobState::Running]);
        let r = rows(vec![a, b], &sel, true, 0);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].job.id, JobId(31));
    }

    #[test]
    fn exit_codes_are_code_colon_signal() {
        assert_eq!(exit_code_text(Some(0)), "0:0");
        assert_eq!(exit_code_text(Some(3)), "3:0");
        assert_eq!(exit_code_text(Some(137)), "0:9");
    }
}
