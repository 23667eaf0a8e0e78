//! `sacct`: accounting of jobs, from cadre's durable accounting, with Slurm's options,
//! formats and exit codes.
//!
//! Rows come from two places, as Slurm's sacct shows jobs in every state: jobs that have
//! not ended from `GET /jobs` (pending, running, completing), and ended runs from
//! `GET /usage` (one row per run; a requeued job has several, of which only the latest is
//! shown unless `-D`). The pending tasks of a job array share one line (`12_[3-7]`), as in
//! Slurm. Each job's steps follow it (`GET /steps`): its batch step (`12.batch`, the
//! script's own run on the first node) and its `srun` steps (`12.0`, `12.1`, ...); `-X`
//! leaves them out. cadre has no `.extern` step.
//!
//! Output: each field in its width (right-justified, but for JobID), followed by a space,
//! under a header and a line of dashes; a value longer than its width is cut and ends in
//! `+` (`CANCELLED+`). `-p`/`-P` print `|`-separated values, whole, without the dashes.
//!
//! The time window (`-S`, `-E`) follows sacct(1): from midnight today without `-j` or
//! `-s`, from the epoch with `-j`, and only the present (`now` to `now`) with `-s` alone.
//! A run is in the window when it ended at or after the start and began (or was submitted)
//! at or before the end.

use super::format::{self, LocalTime, TableColumn, TableStyle};
use super::query::{self, JobRef, Opt};
use cadre_core::job::{ArrayIndex, JobState};
use cadre_proto::api::{BATCH_STEP, JobList, JobView, StepList, StepView, UsageList, UsageView};
use cadre_slurm::getopt::ArgKind;
use cadre_slurm::state;
use cadre_slurm::time::format_duration;
use std::ffi::OsString;
use std::process::ExitCode;

const CMD: &str = "sacct";

const OPTIONS: &[Opt] = &[
    Opt::new('A', "accounts", ArgKind::Required),
    Opt::new('L', "allclusters", ArgKind::None),
    Opt::new('X', "allocations", ArgKind::None),
    Opt::new('a', "allusers", ArgKind::None),
    Opt::new('b', "brief", ArgKind::None),
    Opt::new('M', "clusters", ArgKind::Required),
    Opt::new('c', "completion", ArgKind::None),
    Opt::long("delimiter", ArgKind::Required),
    Opt::new('D', "duplicates", ArgKind::None),
    Opt::new('E', "endtime", ArgKind::Required),
    Opt::new('o', "format", ArgKind::Required),
    Opt::new('h', "help", ArgKind::None),
    Opt::new('e', "helpformat", ArgKind::None),
    Opt::new('j', "jobs", ArgKind::Required),
    Opt::long("json", ArgKind::None),
    Opt::long("local", ArgKind::None),
    Opt::new('l', "long", ArgKind::None),
    Opt::long("name", ArgKind::Required),
    Opt::long("noconvert", ArgKind::None),
    Opt::new('N', "nodelist", ArgKind::Required),
    Opt::new('n', "noheader", ArgKind::None),
    Opt::new('p', "parsable", ArgKind::None),
    Opt::new('P', "parsable2", ArgKind::None),
    Opt::new('r', "partition", ArgKind::Required),
    Opt::new('q', "qos", ArgKind::Required),
    Opt::new('S', "starttime", ArgKind::Required),
    Opt::new('s', "state", ArgKind::Required),
    Opt::new('T', "truncate", ArgKind::None),
    Opt::new('u', "user", ArgKind::Required),
    Opt::long("uid", ArgKind::Required),
    Opt::long("units", ArgKind::Required),
    Opt::long("usage", ArgKind::None),
    Opt::new('v', "verbose", ArgKind::None),
    Opt::new('V', "version", ArgKind::None),
];

const DEFAULT_FIELDS: &str = "jobid,jobname,partition,account,alloccpus,state,exitcode";
const BRIEF_FIELDS: &str = "jobid,state,exitcode";
const LONG_FIELDS: &str = "jobid,jobidraw,jobname,partition,ntasks,alloccpus,elapsed,state,exitcode,reqmem,reqtres,alloctres";

/// What a column shows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Account,
    AllocCpus,
    AllocNodes,
    AllocTres,
    Cluster,
    Comment,
    Constraints,
    CpuTime,
    CpuTimeRaw,
    DerivedExitCode,
    Elapsed,
    ElapsedRaw,
    Eligible,
    End,
    ExitCode,
    Gid,
    Group,
    JobId,
    JobIdRaw,
    JobName,
    Ncpus,
    NNodes,
    NodeList,
    NTasks,
    Partition,
    Priority,
    Qos,
    Reason,
    ReqCpus,
    ReqMem,
    ReqNodes,
    ReqTres,
    Restarts,
    Start,
    State,
    Submit,
    Timelimit,
    TimelimitRaw,
    Uid,
    User,
}

/// Every field: its name as sacct writes it, its width (negative: left-justified).
const FIELDS: &[(Field, &str, i32)] = &[
    (Field::Account, "Account", 10),
    (Field::AllocCpus, "AllocCPUS", 10),
    (Field::AllocNodes, "AllocNodes", 10),
    (Field::AllocTres, "AllocTRES", 10),
    (Field::Cluster, "Cluster", 10),
    (Field::Comment, "Comment", 14),
    (Field::Constraints, "Constraints", 19),
    (Field::CpuTime, "CPUTime", 10),
    (Field::CpuTimeRaw, "CPUTimeRAW", 10),
    (Field::DerivedExitCode, "DerivedExitCode", 15),
    (Field::Elapsed, "Elapsed", 10),
    (Field::ElapsedRaw, "ElapsedRaw", 10),
    (Field::Eligible, "Eligible", 19),
    (Field::End, "End", 19),
    (Field::ExitCode, "ExitCode", 8),
    (Field::Gid, "GID", 6),
    (Field::Group, "Group", 9),
    (Field::JobId, "JobID", -12),
    (Field::JobIdRaw, "JobIDRaw", -12),
    (Field::JobName, "JobName", 10),
    (Field::Ncpus, "NCPUS", 10),
    (Field::NNodes, "NNodes", 8),
    (Field::NodeList, "NodeList", 15),
    (Field::NTasks, "NTasks", 8),
    (Field::Partition, "Partition", 10),
    (Field::Priority, "Priority", 10),
    (Field::Qos, "QOS", 10),
    (Field::Reason, "Reason", 22),
    (Field::ReqCpus, "ReqCPUS", 8),
    (Field::ReqMem, "ReqMem", 10),
    (Field::ReqNodes, "ReqNodes", 8),
    (Field::ReqTres, "ReqTRES", 10),
    (Field::Restarts, "Restarts", 8),
    (Field::Start, "Start", 19),
    (Field::State, "State", 10),
    (Field::Submit, "Submit", 19),
    (Field::Timelimit, "Timelimit", 10),
    (Field::TimelimitRaw, "TimelimitRaw", 10),
    (Field::Uid, "UID", 6),
    (Field::User, "User", 9),
];

/// A requested column: the field, its width, and whether it is right-justified.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Column {
    pub field: Field,
    pub name: &'static str,
    pub width: usize,
    pub right: bool,
}

/// Parses `-o`: `name[%[-]width]`, comma-separated, any case. The unknown name, if any.
pub(crate) fn parse_fields(text: &str) -> Result<Vec<Column>, String> {
    let mut out = Vec::new();
    for item in text.split([',', ' ']).filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once('%') {
            Some((n, w)) => (n, Some(w)),
            None => (item, None),
        };
        let Some(&(field, canon, default)) =
            FIELDS.iter().find(|(_, n, _)| n.eq_ignore_ascii_case(name))
        else {
            return Err(name.to_owned());
        };
        let (width, right) = match width.and_then(|w| w.parse::<i32>().ok()) {
            Some(w) => (w.unsigned_abs() as usize, w > 0),
            None => (default.unsigned_abs() as usize, default > 0),
        };
        out.push(Column {
            field,
            name: canon,
            width,
            right,
        });
    }
    Ok(out)
}

/// One line of accounting.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub id: u64,
    /// A step of job `id` (`BATCH_STEP` for its batch step); `None`: the job's line.
    pub step: Option<u32>,
    pub array: Option<ArrayIndex>,
    /// Array indices this line stands for (pending tasks shown together).
    pub indices: Option<Vec<u32>>,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub submit: u64,
    pub start: Option<u64>,
    pub end: Option<u64>,
    pub cpus: u64,
    pub gpus: f64,
    pub nodes: String,
    pub node_count: u64,
    pub tasks: u32,
    pub time_limit: u64,
    pub restarts: u32,
    pub priority: u64,
    pub reason: String,
    pub mem_per_node: Option<u64>,
    pub qos: String,
    pub features: String,
}

impl Row {
    fn of_job(j: &JobView) -> Row {
        let spec = j.spec.as_ref();
        Row {
            id: j.id.0,
            step: None,
            array: j.array,
            indices: None,
            name: j.name.clone(),
            user: j.user.clone(),
            account: j.account.clone(),
            partition: j.partition.clone(),
            state: j.state,
            exit_code: j.exit_code,
            submit: j.submit_time,
            start: j.start_time,
            end: j
                .end_time
                .filter(|_| j.state.is_final())
                .or(j.state.is_final().then_some(j.submit_time)),
            cpus: j.cpus,
            gpus: j.gpus,
            nodes: j.nodes.clone(),
            node_count: query::node_count(j),
            tasks: j.tasks,
            time_limit: j.time_limit,
            restarts: j.requeues,
            priority: j.priority.unwrap_or(0),
            reason: if j.state == JobState::Pending {
                j.reason.clone()
            } else {
                "None".into()
            },
            mem_per_node: query::mem_per_node(j),
            qos: spec
                .and_then(|s| s.qos.clone())
                .unwrap_or_else(|| "normal".into()),
            features: spec.map(|s| s.features.join("&")).unwrap_or_default(),
        }
    }

    fn of_run(r: &UsageView) -> Row {
        Row {
            id: r.job.0,
            step: None,
            array: r.array,
            indices: None,
            name: r.name.clone(),
            user: r.user.clone(),
            account: r.account.clone(),
            partition: r.partition.clone(),
            state: r.state,
            exit_code: r.exit_code,
            submit: r.submit_time,
            start: r.start_time,
            end: Some(r.end_time),
            cpus: r.cpus,
            gpus: r.gpus,
            node_count: cadre_core::hostlist::count(&r.nodes).map_or(0, |n| n as u64),
            nodes: r.nodes.clone(),
            tasks: 0,
            time_limit: r.time_limit,
            restarts: r.run,
            priority: 0,
            reason: "None".into(),
            mem_per_node: None,
            qos: "normal".into(),
            features: String::new(),
        }
    }

    /// A step's line, under its job's.
    fn of_step(st: &StepView, job: &Row) -> Row {
        let node_count = u64::from(st.num_nodes);
        Row {
            id: st.job.0,
            step: Some(st.step),
            array: job.array,
            indices: None,
            name: st.name.clone(),
            user: st.user.clone(),
            account: st.account.clone(),
            partition: st.partition.clone(),
            state: st.state,
            exit_code: st.exit_code,
            submit: st.start_time,
            start: Some(st.start_time),
            end: st.end_time,
            cpus: st.cpus,
            gpus: 0.0,
            nodes: st.nodes.clone(),
            node_count,
            tasks: st.ntasks,
            time_limit: 0,
            restarts: job.restarts,
            priority: 0,
            reason: "None".into(),
            mem_per_node: None,
            qos: job.qos.clone(),
            features: String::new(),
        }
    }

    fn elapsed(&self, now: u64) -> u64 {
        match (self.start, self.end) {
            (Some(s), Some(e)) => e.saturating_sub(s),
            (Some(s), None) => now.saturating_sub(s),
            _ => 0,
        }
    }
}

fn tres(cpus: u64, gpus: f64, mem: Option<u64>, nodes: u64) -> String {
    let mut parts = vec![format!("billing={cpus}"), format!("cpu={cpus}")];
    let g = format::whole_gpus(gpus);
    if g > 0 {
        parts.push(format!("gres/gpu={g}"));
    }
    if let Some(m) = mem {
        parts.push(format!("mem={}", format::mem_mib(m * nodes.max(1))));
    }
    parts.push(format!("node={}", nodes.max(1)));
    parts.join(",")
}

/// A field's value for a row at `now`.
pub(crate) fn value(r: &Row, f: Field, now: u64) -> String {
    use Field::*;
    let unknown = || "Unknown".to_string();
    let started = r.start.is_some();
    match f {
        Account => r.account.clone(),
        AllocCpus | Ncpus => if started { r.cpus } else { 0 }.to_string(),
        AllocNodes => if started { r.node_count } else { 0 }.to_string(),
        AllocTres => {
            if started {
                tres(r.cpus, r.gpus, r.mem_per_node, r.node_count)
            } else {
                String::new()
            }
        }
        ReqTres => tres(r.cpus, r.gpus, r.mem_per_node, r.node_count),
        Cluster => std::env::var("CADRE_CLUSTER_NAME").unwrap_or_else(|_| "cadre".into()),
        Comment => String::new(),
        Constraints => r.features.clone(),
        CpuTime => format_duration(r.elapsed(now) * r.cpus),
        CpuTimeRaw => (r.elapsed(now) * r.cpus).to_string(),
        DerivedExitCode => "0:0".into(),
        Elapsed => format_duration(r.elapsed(now)),
        ElapsedRaw => r.elapsed(now).to_string(),
        Eligible | Submit => format::timestamp(r.submit),
        End => r.end.map_or_else(unknown, format::timestamp),
        Start => r.start.map_or_else(unknown, format::timestamp),
        ExitCode => super::squeue::exit_code_text(r.exit_code),
        Gid => nix::unistd::User::from_name(&r.user)
            .ok()
            .flatten()
            .map_or_else(String::new, |u| u.gid.to_string()),
        Group => nix::unistd::User::from_name(&r.user)
            .ok()
            .flatten()
            .and_then(|u| nix::unistd::Group::from_gid(u.gid).ok().flatten())
            .map_or_else(String::new, |g| g.name),
        JobId => match (&r.indices, r.array) {
            (Some(ix), Some(a)) => format!("{}_[{}]", a.array_job.0, format::index_ranges(ix)),
            _ => format!("{}{}", format::job_id(r.id, r.array), step_suffix(r.step)),
        },
        JobIdRaw => format!("{}{}", r.id, step_suffix(r.step)),
        JobName => r.name.clone(),
        NNodes => r.node_count.to_string(),
        NodeList => {
            if r.nodes.is_empty() {
                "None assigned".into()
            } else {
                r.nodes.clone()
            }
        }
        NTasks => {
            if r.tasks > 0 {
                r.tasks.to_string()
            } else {
                String::new()
            }
        }
        Partition => r.partition.clone(),
        Priority => r.priority.to_string(),
        Qos => r.qos.clone(),
        Reason => r.reason.clone(),
        ReqCpus => r.cpus.to_string(),
        ReqMem => r.mem_per_node.map_or_else(|| "0".into(), format::mem_mib),
        ReqNodes => r.node_count.to_string(),
        Restarts => r.restarts.to_string(),
        State => match r.state {
            JobState::Cancelled => format!("CANCELLED by {}", query::uid_of(&r.user).unwrap_or(0)),
            s => state::long(s).to_string(),
        },
        Timelimit => {
            if r.time_limit == 0 {
                "UNLIMITED".into()
            } else {
                format_duration(r.time_limit)
            }
        }
        TimelimitRaw => {
            if r.time_limit == 0 {
                "UNLIMITED".into()
            } else {
                (r.time_limit / 60).to_string()
            }
        }
        Uid => query::uid_of(&r.user).map_or_else(String::new, |u| u.to_string()),
        User => r.user.clone(),
    }
}

/// The lines sacct prints.
pub(crate) fn render(
    cols: &[Column],
    rows: &[Row],
    style: &TableStyle,
    header: bool,
    now: u64,
) -> Vec<String> {
    let heads: Vec<TableColumn> = cols
        .iter()
        .map(|c| TableColumn {
            name: c.name,
            width: c.width,
            right: c.right,
        })
        .collect();
    let values: Vec<Vec<String>> = rows
        .iter()
        .map(|r| cols.iter().map(|c| value(r, c.field, now)).collect())
        .collect();
    format::table(&heads, &values, style, header)
}

/// What to show, from the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selection {
    pub users: Vec<String>,
    pub accounts: Vec<String>,
    pub partitions: Vec<String>,
    pub names: Vec<String>,
    pub states: Vec<JobState>,
    /// Whether `-s` was given (it may name only states no cadre job is in).
    pub states_given: bool,
    pub jobs: Vec<JobRef>,
    pub nodes: Vec<String>,
    pub start: u64,
    pub end: u64,
    pub duplicates: bool,
    /// `-X`: jobs only, no steps.
    pub allocations: bool,
}

impl Selection {
    fn keeps(&self, r: &Row) -> bool {
        let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        let in_window =
            r.end.is_none_or(|e| e >= self.start) && r.start.unwrap_or(r.submit) <= self.end;
        let job_ok = self.jobs.is_empty()
            || self.jobs.iter().any(|j| match (j.index, r.array) {
                (None, Some(a)) => r.id == j.id || a.array_job.0 == j.id,
                (None, None) => r.id == j.id,
                (Some(ix), Some(a)) => a.array_job.0 == j.id && a.index == ix,
                (Some(_), None) => false,
            });
        let on_nodes = self.nodes.is_empty()
            || cadre_core::hostlist::expand(&r.nodes)
                .unwrap_or_default()
                .iter()
                .any(|n| self.nodes.contains(n));
        in_window
            && job_ok
            && on_nodes
            && any(&self.users, &r.user)
            && any(&self.accounts, &r.account)
            && any(&self.partitions, &r.partition)
            && any(&self.names, &r.name)
            && (!self.states_given || self.states.contains(&r.state))
    }
}

/// `.batch`, `.N`, or nothing for a job's own line.
fn step_suffix(step: Option<u32>) -> String {
    match step {
        None => String::new(),
        Some(BATCH_STEP) => ".batch".into(),
        Some(n) => format!(".{n}"),
    }
}

/// Puts each job's steps after its line (batch step first, then by number), unless
/// `allocations` (`-X`); with `-s`, only steps in those states.
pub(crate) fn with_steps(rows: Vec<Row>, steps: &[StepView], sel: &Selection) -> Vec<Row> {
    if sel.allocations || steps.is_empty() {
        return rows;
    }
    let mut out = Vec::with_capacity(rows.len() + steps.len());
    for r in rows {
        let mine: Vec<Row> = if r.indices.is_none() && r.step.is_none() {
            let mut m: Vec<&StepView> = steps.iter().filter(|s| s.job.0 == r.id).collect();
            m.sort_by_key(|s| (s.step != BATCH_STEP, s.step));
            m.into_iter()
                .map(|s| Row::of_step(s, &r))
                .filter(|s| !sel.states_given || sel.states.contains(&s.state))
                .collect()
        } else {
            Vec::new()
        };
        out.push(r);
        out.extend(mine);
    }
    out
}

/// The rows to print: jobs that have not ended, ended runs (the latest per job unless
/// `duplicates`), and ended jobs that never ran (cancelled while pending: they have no
/// run), selected, in job order, arrays' pending tasks together.
pub(crate) fn rows(jobs: &[JobView], runs: &[UsageView], sel: &Selection) -> Vec<Row> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut all: Vec<Row> = Vec::new();
    let active: BTreeSet<u64> = jobs
        .iter()
        .filter(|j| !j.state.is_final())
        .map(|j| j.id.0)
        .collect();
    let ran: BTreeSet<u64> = runs.iter().map(|r| r.job.0).collect();
    let mut latest: BTreeMap<u64, &UsageView> = BTreeMap::new();
    for r in runs {
        if sel.duplicates {
            all.push(Row::of_run(r));
        } else if !active.contains(&r.job.0) {
            let e = latest.entry(r.job.0).or_insert(r);
            if r.run >= e.run {
                *e = r;
            }
        }
    }
    all.extend(latest.values().map(|r| Row::of_run(r)));
    all.extend(
        jobs.iter()
            .filter(|j| !j.state.is_final() || !ran.contains(&j.id.0))
            .map(Row::of_job),
    );
    all.retain(|r| sel.keeps(r));
    all.sort_by_key(|r| (r.id, r.restarts));
    let mut out: Vec<Row> = Vec::with_capacity(all.len());
    for r in all {
        if r.state == JobState::Pending
            && let Some(a) = r.array
            && let Some(prev) = out.iter_mut().find(|p| {
                p.state == JobState::Pending && p.array.is_some_and(|b| b.array_job == a.array_job)
            })
        {
            let first = prev.array.map_or(0, |b| b.index);
            let ix = prev.indices.get_or_insert_with(|| vec![first]);
            ix.push(a.index);
            ix.sort_unstable();
            continue;
        }
        out.push(r);
    }
    out
}

/// Parses a time as sacct takes it (`-S`, `-E`), in local time, relative to `now`:
/// `HH:MM[:SS][AM|PM]`, `MMDD[YY][-HH:MM[:SS]]`, `MM.DD[.YY][-HH:MM[:SS]]`,
/// `MM/DD[/YY][-HH:MM[:SS]]`, `YYYY-MM-DD[THH:MM[:SS]]`, `today`, `midnight`, `noon`,
/// `fika`, `teatime`, `now[{+|-}count[seconds|minutes|hours|days|weeks]]`, or seconds since
/// the epoch.
pub(crate) fn parse_time(text: &str, now: u64) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let today: LocalTime = format::local_time(now)?;
    let at =
        |h: u32, m: u32, s: u32| format::from_local(today.year, today.month, today.day, h, m, s);
    match t.as_str() {
        "today" | "midnight" => return at(0, 0, 0),
        "noon" => return at(12, 0, 0),
        "fika" => return at(15, 0, 0),
        "teatime" => return at(16, 0, 0),
        "now" => return Some(now),
        _ => {}
    }
    if let Some(rest) = t.strip_prefix("now") {
        let (sign, rest) = match rest.chars().next()? {
            '+' => (1i64, &rest[1..]),
            '-' => (-1i64, &rest[1..]),
            _ => return None,
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let n: i64 = digits.parse().ok()?;
        let unit = match &rest[digits.len()..] {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86400,
            "w" | "week" | "weeks" => 7 * 86400,
            _ => return None,
        };
        return u64::try_from(now as i64 + sign * n * unit).ok();
    }
    let clock = |s: &str| -> Option<(u32, u32, u32)> {
        let (s, pm) = if let Some(x) = s.strip_suffix("pm") {
            (x, Some(true))
        } else if let Some(x) = s.strip_suffix("am") {
            (x, Some(false))
        } else {
            (s, None)
        };
        let parts: Vec<u32> = s
            .split(':')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        let (mut h, m, sec) = match parts.as_slice() {
            [h, m] => (*h, *m, 0),
            [h, m, s] => (*h, *m, *s),
            _ => return None,
        };
        match pm {
            Some(true) if h < 12 => h += 12,
            Some(false) if h == 12 => h = 0,
            _ => {}
        }
        (h < 24 && m < 60 && sec < 61).then_some((h, m, sec))
    };
    if t.contains(':') && !t.contains(['-', '/', '.', 't']) {
        let (h, m, s) = clock(&t)?;
        return at(h, m, s);
    }
    if let Some((date, time)) = t
        .split_once('t')
        .filter(|_| t.len() >= 10 && t.as_bytes()[4] == b'-')
    {
        let d: Vec<u32> = date
            .split('-')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        let (h, m, s) = clock(time)?;
        return format::from_local(*d.first()? as i32, *d.get(1)?, *d.get(2)?, h, m, s);
    }
    if t.len() == 10 && t.as_bytes().get(4) == Some(&b'-') {
        let d: Vec<u32> = t
            .split('-')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        return format::from_local(*d.first()? as i32, *d.get(1)?, *d.get(2)?, 0, 0, 0);
    }
    let (date, time) = match t.split_once('-') {
        Some((d, tm)) => (d, Some(tm)),
        None => (t.as_str(), None),
    };
    let (h, m, s) = match time {
        Some(tm) => clock(tm)?,
        None => (0, 0, 0),
    };
    let fields: Vec<&str> = if date.contains('/') {
        date.split('/').collect()
    } else if date.contains('.') {
        date.split('.').collect()
    } else if date.chars().all(|c| c.is_ascii_digit()) && (date.len() == 4 || date.len() == 6) {
        vec![&date[0..2], &date[2..4]]
            .into_iter()
            .chain((date.len() == 6).then(|| &date[4..6]))
            .collect()
    } else if date.chars().all(|c| c.is_ascii_digit()) && time.is_none() {
        return date.parse().ok();
    } else {
        return None;
    };
    let month: u32 = fields.first()?.parse().ok()?;
    let day: u32 = fields.get(1)?.parse().ok()?;
    let year = match fields.get(2) {
        Some(y) => {
            let y: i32 = y.parse().ok()?;
            if y < 100 { 2000 + y } else { y }
        }
        None => today.year,
    };
    format::from_local(year, month, day, h, m, s)
}

fn json(rows: &[Row], now: u64) -> serde_json::Value {
    let jobs: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "job_id": r.id,
                "array": {
                    "job_id": r.array.map_or(0, |a| a.array_job.0),
                    "task_id": r.array.map(|a| a.index),
                },
                "name": r.name,
                "user": r.user,
                "account": r.account,
                "partition": r.partition,
                "state": { "current": state::long(r.state), "reason": r.reason },
                "exit_code": { "return_code": r.exit_code.unwrap_or(0) },
                "nodes": r.nodes,
                "time": {
                    "submission": r.submit,
                    "start": r.start.unwrap_or(0),
                    "end": r.end.unwrap_or(0),
                    "elapsed": r.elapsed(now),
                    "limit": r.time_limit / 60,
                },
                "tres": { "allocated": value(r, Field::AllocTres, now) },
            })
        })
        .collect();
    serde_json::json!({ "jobs": jobs })
}

fn helpformat() -> ExitCode {
    for chunk in FIELDS.chunks(4) {
        let line: String = chunk.iter().map(|(_, n, _)| format!("{n:<20}")).collect();
        println!("{}", line.trim_end());
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    println!(
        "Usage: sacct [-A accounts] [-a] [-b] [-D] [-E time] [-e] [-j jobs] [-l] [-n] [-N nodes]\n             [-o fields] [-p|-P] [-r partitions] [-S time] [-s states] [-u users] [-X]\n             [--delimiter c] [--name names] [--json]"
    );
    ExitCode::SUCCESS
}

/// `sacct [OPTIONS]`.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let p = match query::begin(CMD, args, OPTIONS, usage) {
        Ok(p) => p,
        Err(code) => return code,
    };
    if p.has("helpformat") {
        return helpformat();
    }
    let now = query::now();
    let mut sel = Selection {
        accounts: p
            .values("accounts")
            .iter()
            .flat_map(|a| query::list(a))
            .collect(),
        partitions: p
            .values("partition")
            .iter()
            .flat_map(|a| query::list(a))
            .collect(),
        names: p
            .values("name")
            .iter()
            .flat_map(|a| query::list(a))
            .collect(),
        duplicates: p.has("duplicates"),
        allocations: p.has("allocations"),
        ..Selection::default()
    };
    for text in p.values("jobs").iter().flat_map(|j| query::list(j)) {
        match JobRef::parse(&text) {
            Some(r) => sel.jobs.push(r),
            None => return query::fail(CMD, format!("Invalid job id: {text}")),
        }
    }
    for s in p.values("state").iter().flat_map(|s| query::list(s)) {
        match state::parse(&s) {
            Some(st) => sel.states.push(st),
            // A state cadre's jobs are never in selects nothing.
            None if state::is_other(&s) => {}
            None => return query::fail(CMD, format!("Invalid state: {s}")),
        }
    }
    if let Some(n) = p.value("nodelist") {
        match cadre_core::hostlist::expand(n) {
            Ok(names) => sel.nodes = names,
            Err(e) => return query::fail(CMD, format!("Invalid node list: {e}")),
        }
    }
    let users: Vec<String> = p
        .values("user")
        .iter()
        .chain(p.values("uid").iter())
        .flat_map(|u| query::list(u))
        .collect();
    for u in users {
        match query::user_name(&u) {
            Some(name) => sel.users.push(name),
            None => return query::fail(CMD, format!("Invalid user id: {u}")),
        }
    }
    let me = query::current_user();
    if sel.users.is_empty() && !p.has("allusers") && me != "root" {
        sel.users.push(me);
    }
    let has_jobs = !sel.jobs.is_empty();
    sel.states_given = p.has("state");
    let has_states = sel.states_given;
    let time = |name: &str| -> Result<Option<u64>, ExitCode> {
        match p.value(name) {
            None => Ok(None),
            Some(t) => parse_time(t, now)
                .map(Some)
                .ok_or_else(|| query::fail(CMD, format!("Invalid time specification: {t}"))),
        }
    };
    let (start, end) = match (time("starttime"), time("endtime")) {
        (Ok(s), Ok(e)) => (s, e),
        (Err(c), _) | (_, Err(c)) => return c,
    };
    sel.start = start.unwrap_or(if has_jobs {
        0
    } else if has_states {
        now
    } else {
        parse_time("midnight", now).unwrap_or(0)
    });
    sel.end = end.unwrap_or(if has_states {
        start.unwrap_or(now)
    } else {
        now
    });

    let fields = if let Some(f) = p.value("format") {
        f.to_owned()
    } else if p.has("brief") {
        BRIEF_FIELDS.into()
    } else if p.has("long") {
        LONG_FIELDS.into()
    } else {
        query::env_var("SACCT_FORMAT").unwrap_or_else(|| DEFAULT_FIELDS.into())
    };
    let cols = match parse_fields(&fields) {
        Ok(c) => c,
        Err(name) => return query::fail(CMD, format!("Invalid field requested: \"{name}\"")),
    };
    let delimiter = p.value("delimiter").unwrap_or("|").to_owned();
    let style = if p.has("parsable2") {
        TableStyle::Parsable {
            delimiter,
            trailing: false,
        }
    } else if p.has("parsable") {
        TableStyle::Parsable {
            delimiter,
            trailing: true,
        }
    } else {
        TableStyle::Table
    };

    let mut client = match query::connect() {
        Ok(c) => c,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    let mut usage_path = format!("/usage?since={}", sel.start);
    if let [one] = sel.users.as_slice() {
        usage_path.push_str(&format!("&user={one}"));
    }
    let fetched: anyhow::Result<(JobList, UsageList)> = (|| {
        Ok((
            client.get("/jobs?detail=true&state=PENDING,RUNNING,PREEMPTING,CANCELLED")?,
            client.get(&usage_path)?,
        ))
    })();
    let (jobs, runs) = match fetched {
        Ok(x) => x,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    let rows = rows(&jobs.jobs, &runs.runs, &sel);
    let mut steps: Vec<StepView> = Vec::new();
    if !sel.allocations {
        let ids: Vec<String> = rows
            .iter()
            .filter(|r| r.start.is_some())
            .map(|r| r.id.to_string())
            .collect();
        for chunk in ids.chunks(200) {
            match client.get::<StepList>(&format!("/steps?job={}", chunk.join(","))) {
                Ok(l) => steps.extend(l.steps),
                Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e.into())),
            }
        }
    }
    let rows = with_steps(rows, &steps, &sel);
    if p.has("json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&rows, now)).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    for line in render(&cols, &rows, &style, !p.has("noheader"), now) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::squeue::tests::{framed, job};
    use cadre_core::job::JobId;

    fn run_of(id: u64, state: JobState, run: u32) -> UsageView {
        UsageView {
            job: JobId(id),
            run,
            name: "preprocess-imagenet".into(),
            user: "alice".into(),
            account: "physics".into(),
            partition: "gpu".into(),
            submit_time: 1_000,
            start_time: Some(2_000),
            end_time: 2_065,
            state,
            exit_code: Some(if state == JobState::Failed { 2 } else { 0 }),
            gpus: 2.0,
            cpus: 16,
            nodes: "node[001-002]".into(),
            gpu_seconds: 130.0,
            array: None,
            time_limit: 3600,
        }
    }

    fn all() -> Selection {
        Selection {
            end: u64::MAX,
            ..Selection::default()
        }
    }

    fn sample() -> Vec<Row> {
        let mut never_ran = job(14, JobState::Cancelled);
        never_ran.start_time = None;
        let jobs = vec![
            job(12, JobState::Running),
            job(13, JobState::Pending),
            never_ran,
        ];
        let runs = vec![
            run_of(10, JobState::Completed, 0),
            run_of(11, JobState::Failed, 0),
            run_of(11, JobState::Cancelled, 1),
            run_of(12, JobState::NodeFail, 0),
        ];
        rows(&jobs, &runs, &all())
    }

    #[test]
    fn the_default_table_cuts_long_values_with_a_plus() {
        let cols = parse_fields(DEFAULT_FIELDS).unwrap();
        insta::assert_snapshot!(framed(render(
            &cols,
            &sample(),
            &TableStyle::Table,
            true,
            3_000
        )));
    }

    #[test]
    fn parsable_output_as_submitit_reads_it() {
        let cols = parse_fields("JobID,State,NodeList,Elapsed,Start,AllocTRES").unwrap();
        let style = TableStyle::Parsable {
            delimiter: "|".into(),
            trailing: false,
        };
        let lines = render(&cols, &sample(), &style, true, 3_000);
        assert_eq!(lines[0], "JobID|State|NodeList|Elapsed|Start|AllocTRES");
        assert!(lines[1].starts_with("10|COMPLETED|node[001-002]|00:01:05|"));
        assert!(lines[2].starts_with("11|CANCELLED by "), "{}", lines[2]);
        assert!(
            lines[3].starts_with("12|RUNNING|node[001-002]|00:16:40|"),
            "{}",
            lines[3]
        );
        assert!(
            lines[3].ends_with("|billing=8,cpu=8,gres/gpu=2,node=2"),
            "{}",
            lines[3]
        );
        assert_eq!(lines[4], "13|PENDING|None assigned|00:00:00|Unknown|");
        assert!(lines[5].starts_with("14|CANCELLED by "), "{}", lines[5]);
        assert!(lines[5].ends_with("|00:00:00|Unknown|"), "{}", lines[5]);
        let with_trailing = TableStyle::Parsable {
            delimiter: "|".into(),
            trailing: true,
        };
        assert!(render(&cols, &sample(), &with_trailing, false, 3_000)[0].ends_with('|'));
    }

    #[test]
    fn widths_and_justification_can_be_set_per_field() {
        let cols = parse_fields("jobid%5,jobname%-25,state%4").unwrap();
        insta::assert_snapshot!(framed(render(
            &cols,
            &sample()[..1],
            &TableStyle::Table,
            true,
            0
        )));
        assert_eq!(parse_fields("jobid,bogus"), Err("bogus".into()));
    }

    #[test]
    fn duplicates_show_every_run_and_arrays_share_a_line() {
        let sel = Selection {
            duplicates: true,
            ..all()
        };
        let runs = vec![
            run_of(11, JobState::Failed, 0),
            run_of(11, JobState::Completed, 1),
        ];
        assert_eq!(rows(&[], &runs, &sel).len(), 2);
        assert_eq!(rows(&[], &runs, &all()).len(), 1);
        let tasks: Vec<JobView> = (0..4)
            .map(|i| {
                let mut j = job(40 + i, JobState::Pending);
                j.array = Some(ArrayIndex {
                    array_job: JobId(40),
                    index: i as u32,
                    max_running: None,
                });
                j
            })
            .collect();
        let r = rows(&tasks, &[], &all());
        assert_eq!(r.len(), 1);
        assert_eq!(value(&r[0], Field::JobId, 0), "40_[0-3]");
    }

    #[test]
    fn the_time_window_selects_runs() {
        let runs = vec![run_of(10, JobState::Completed, 0)];
        let mut sel = all();
        sel.start = 2_066;
        assert!(rows(&[], &runs, &sel).is_empty());
        sel.start = 2_065;
        assert_eq!(rows(&[], &runs, &sel).len(), 1);
        sel.end = 1_999;
        assert!(rows(&[], &runs, &sel).is_empty());
    }

    #[test]
    fn times_parse_in_sacct_formats() {
        let now = format::from_local(2026, 11, 21, 13, 57, 54).unwrap();
        let at = |y, mo, d, h, mi, s| format::from_local(y, mo, d, h, mi, s);
        assert_eq!(parse_time("midnight", now), at(2026, 11, 21, 0, 0, 0));
        assert_eq!(parse_time("teatime", now), at(2026, 11, 21, 16, 0, 0));
        assert_eq!(parse_time("now-1hour", now), Some(now - 3600));
        assert_eq!(parse_time("now+30", now), Some(now + 30));
        assert_eq!(parse_time("2026-11-20", now), at(2026, 11, 20, 0, 0, 0));
        assert_eq!(
            parse_time("2026-11-20T08:30", now),
            at(2026, 11, 20, 8, 30, 0)
        );
        assert_eq!(parse_time("08:30:05", now), at(2026, 11, 21, 8, 30, 5));
        assert_eq!(parse_time("2:15pm", now), at(2026, 11, 21, 14, 15, 0));
        assert_eq!(parse_time("1120", now), at(2026, 11, 20, 0, 0, 0));
        assert_eq!(
            parse_time("11/20/25-10:00", now),
            at(2025, 11, 20, 10, 0, 0)
        );
        assert_eq!(parse_time("11.20", now), at(2026, 11, 20, 0, 0, 0));
        assert_eq!(parse_time("bogus", now), None);
    }
}
