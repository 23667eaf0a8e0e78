//! `scontrol show job`: a job as Slurm's key=value record, with Slurm 22.05's fields in its
//! order and line breaks (`-o` puts a record on one line).
//!
//! The request's form comes from the `slurm.*` annotations that `sbatch` records
//! ([`crate::convert::keys`]); jobs from other front ends are shown from their spec.
//! Values follow Slurm where they describe the same thing (a pending job's `NumNodes` is
//! the fewest nodes that hold its tasks, `StdOut` has `%j`, `%A`, `%a`, `%u` and `%x`
//! expanded, an array's pending tasks are one record with `ArrayTaskId=1-4%2`); fields of
//! Slurm features cadre does not have are shown with Slurm's empty values (`Licenses=(null)`,
//! `CoreSpec=*`). TRES strings are current Slurm's (`gres/gpu:2`; 22.05 printed
//! `gres:gpu:2`).

use crate::array::format_indices;
use crate::convert::keys;
use crate::dependency::{DepEntry, DepKind, parse_dependency};
use crate::size::format_mib;
use crate::time::{Clock, format_duration, format_limit, format_timestamp};
use cadre_core::job::{Dependency, DependencyKind, JobSpec, JobState, RequeuePolicy};
use cadre_core::run::RunSpec;
use cadre_proto::api::JobView;

/// Slurm's NO_VAL, which `scontrol` prints for `%a` of a job that is not one array task.
const NO_VAL: u32 = 0xffff_fffe;

/// How a job belongs to an array, as shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArrayShow {
    /// One task.
    Task { array_job: u64, index: u32 },
    /// The array's tasks that have not started, shown as one record under the array's id.
    Pending {
        array_job: u64,
        indices: Vec<u32>,
        max_running: Option<u32>,
    },
}

/// Where a dependency stands.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DepState {
    Unfulfilled,
    Fulfilled,
    Failed,
}

/// A job to show, with what the record needs beyond the job itself.
#[derive(Clone, Debug)]
pub struct ShowJob<'a> {
    /// A single job's view: with its spec (and its run spec where the controller gives it).
    pub view: &'a JobView,
    pub array: Option<ArrayShow>,
    /// The `Dependency=` value ([`dependency_field`]).
    pub dependency: String,
    pub uid: u32,
    pub group: String,
    pub gid: u32,
    /// CPUs of the largest node of the job's partition (a pending job's `NumNodes`).
    pub node_cpus: Option<u64>,
}

/// One record: lines of key=value pairs.
pub type Record = Vec<Vec<(&'static str, String)>>;

fn note<'a>(spec: &'a JobSpec, key: &str) -> Option<&'a str> {
    spec.annotations.get(key).map(String::as_str)
}

/// What a dependency needs to know of a job it names.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DepJob {
    pub state: JobState,
    /// Whether it has started (now or before).
    pub started: bool,
}

/// Where one entry stands, given the jobs it names (every task of an array it names).
/// `singleton` stays unfulfilled while its job pends: Slurm evaluates it only when it
/// schedules, and shows it unfulfilled until then.
pub fn entry_state(kind: DepKind, targets: &[DepJob]) -> DepState {
    if kind == DepKind::Singleton || targets.is_empty() {
        return DepState::Unfulfilled;
    }
    let mut result = DepState::Fulfilled;
    for j in targets {
        let s = match kind {
            DepKind::After if j.started || j.state.is_final() => DepState::Fulfilled,
            DepKind::AfterAny if j.state.is_final() => DepState::Fulfilled,
            DepKind::AfterOk if j.state == JobState::Completed => DepState::Fulfilled,
            DepKind::AfterOk if j.state.is_final() => DepState::Failed,
            DepKind::AfterNotOk if j.state == JobState::Completed => DepState::Failed,
            DepKind::AfterNotOk if j.state.is_final() => DepState::Fulfilled,
            _ => DepState::Unfulfilled,
        };
        result = match (result, s) {
            (DepState::Failed, _) | (_, DepState::Failed) => DepState::Failed,
            (DepState::Unfulfilled, _) | (_, DepState::Unfulfilled) => DepState::Unfulfilled,
            _ => DepState::Fulfilled,
        };
    }
    result
}

/// `Dependency=` of a job: while it pends, its dependencies that still hold it back, with
/// their state; `(null)` when none does, and always once it has started (Slurm clears
/// them then). `targets` gives the jobs an entry names.
pub fn dependency_field(
    spec: &JobSpec,
    state: JobState,
    targets: impl Fn(&DepEntry) -> Vec<DepJob>,
) -> String {
    if state != JobState::Pending {
        return "(null)".into();
    }
    let (entries, sep) = match note(spec, keys::DEPENDENCY).map(parse_dependency) {
        Some(Ok(d)) => {
            let sep = d.separator();
            (d.entries, sep)
        }
        _ => (
            spec.dependencies
                .iter()
                .map(|d| match d {
                    Dependency::Singleton => DepEntry {
                        kind: DepKind::Singleton,
                        target: None,
                    },
                    Dependency::On { kind, job } => DepEntry {
                        kind: match kind {
                            DependencyKind::After => DepKind::After,
                            DependencyKind::AfterAny => DepKind::AfterAny,
                            DependencyKind::AfterOk => DepKind::AfterOk,
                            DependencyKind::AfterNotOk => DepKind::AfterNotOk,
                        },
                        target: Some(crate::dependency::DepTarget {
                            job: job.0,
                            task: None,
                            plus_minutes: None,
                        }),
                    },
                })
                .collect(),
            if spec.dependencies_any { '?' } else { ',' },
        ),
    };
    let shown: Vec<String> = entries
        .iter()
        .filter_map(|e| match entry_state(e.kind, &targets(e)) {
            DepState::Fulfilled => None,
            DepState::Unfulfilled => Some(format!("{e}(unfulfilled)")),
            DepState::Failed => Some(format!("{e}(failed)")),
        })
        .collect();
    if shown.is_empty() {
        "(null)".into()
    } else {
        shown.join(&sep.to_string())
    }
}

/// An output path as `scontrol` shows it: relative to the working directory, with `%A`,
/// `%a`, `%j`, `%u` and `%x` expanded (no other letters, no widths).
fn shown_path(
    pattern: &str,
    work_dir: &str,
    job: u64,
    array: Option<(u64, u32)>,
    user: &str,
    name: &str,
) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('A') => out.push_str(&array.map_or(job, |a| a.0).to_string()),
            Some('a') => out.push_str(&array.map_or(NO_VAL, |a| a.1).to_string()),
            Some('j') => out.push_str(&job.to_string()),
            Some('u') => out.push_str(user),
            Some('x') => out.push_str(name),
            _ => {
                out.push('%');
                continue;
            }
        }
        chars.next();
    }
    if out.starts_with('/') {
        out
    } else {
        format!("{}/{out}", work_dir.trim_end_matches('/'))
    }
}

/// The record of one job.
pub fn job_record(job: &ShowJob, clock: &Clock) -> Record {
    let v = job.view;
    let empty_spec;
    let spec = match &v.spec {
        Some(s) => s,
        None => {
            empty_spec = JobSpec::simple(
                &v.user,
                &v.account,
                v.tasks,
                Default::default(),
                cadre_core::time::Dur(v.time_limit),
            );
            &empty_spec
        }
    };
    let run: Option<&RunSpec> = v.run.as_ref();
    let group = spec.groups.first();
    let per_task = group.map(|g| g.per_task.clone()).unwrap_or_default();
    let ts = |t: Option<u64>| {
        t.map_or_else(
            || "Unknown".to_string(),
            |t| format_timestamp(t as i64, clock),
        )
    };
    let pending = v.state == JobState::Pending;
    let (record_id, array_ids): (u64, Option<(u64, u32)>) = match &job.array {
        Some(ArrayShow::Task { array_job, index }) => (v.id.0, Some((*array_job, *index))),
        Some(ArrayShow::Pending { array_job, .. }) => (*array_job, Some((*array_job, NO_VAL))),
        None => (v.id.0, None),
    };

    let mut lines: Record = Vec::new();
    let mut first = vec![("JobId", record_id.to_string())];
    match &job.array {
        Some(ArrayShow::Task { array_job, index }) => {
            first.push(("ArrayJobId", array_job.to_string()));
            first.push(("ArrayTaskId", index.to_string()));
        }
        Some(ArrayShow::Pending {
            array_job,
            indices,
            max_running,
        }) => {
            first.push(("ArrayJobId", array_job.to_string()));
            first.push(("ArrayTaskId", format_indices(indices, *max_running)));
            if let Some(n) = max_running {
                first.push(("ArrayTaskThrottle", n.to_string()));
            }
        }
        None => {}
    }
    first.push(("JobName", v.name.clone()));
    lines.push(first);
    lines.push(vec![
        ("UserId", format!("{}({})", v.user, job.uid)),
        ("GroupId", format!("{}({})", job.group, job.gid)),
        ("MCS_label", "N/A".into()),
    ]);
    let priority = if v.held { 0 } else { v.priority.unwrap_or(0) };
    lines.push(vec![
        ("Priority", priority.to_string()),
        ("Nice", spec.nice.to_string()),
        ("Account", v.account.clone()),
        ("QOS", spec.qos.clone().unwrap_or_else(|| "(null)".into())),
    ]);
    lines.push(vec![
        ("JobState", crate::state::long(v.state).into()),
        ("Reason", v.reason.clone()),
        ("Dependency", job.dependency.clone()),
    ]);
    let exit = match v.exit_code {
        Some(c) if c < 0 => format!("0:{}", -c),
        Some(c) => format!("{c}:0"),
        None => "0:0".into(),
    };
    lines.push(vec![
        (
            "Requeue",
            u8::from(spec.requeue == RequeuePolicy::Requeue).to_string(),
        ),
        ("Restarts", v.requeues.to_string()),
        (
            "BatchFlag",
            u8::from(run.is_none_or(|r| r.script.is_some())).to_string(),
        ),
        ("Reboot", "0".into()),
        ("ExitCode", exit),
    ]);
    let now = clock.now.max(0) as u64;
    let run_time = match (v.start_time, v.end_time) {
        (Some(s), Some(e)) if !pending => e.saturating_sub(s),
        (Some(s), None) if v.state.is_active() => now.saturating_sub(s),
        _ => 0,
    };
    let limit = (v.time_limit > 0).then_some(v.time_limit);
    lines.push(vec![
        ("RunTime", format_duration(run_time)),
        ("TimeLimit", format_limit(limit)),
        (
            "TimeMin",
            note(spec, keys::TIME_MIN)
                .and_then(|m| m.parse::<u64>().ok())
                .map_or_else(|| "N/A".into(), |m| format_limit((m > 0).then_some(m * 60))),
        ),
    ]);
    let eligible = if v.held || !pending && v.start_time.is_none() {
        None
    } else {
        Some(spec.begin.map_or(v.submit_time, |b| b.0.max(v.submit_time)))
    };
    lines.push(vec![
        ("SubmitTime", ts(Some(v.submit_time))),
        ("EligibleTime", ts(eligible)),
    ]);
    lines.push(vec![(
        "AccrueTime",
        ts(if v.held { None } else { eligible }),
    )]);
    let start = v
        .start_time
        .or(if pending { v.expected_start } else { None });
    let end = v.end_time.or_else(|| start.zip(limit).map(|(s, l)| s + l));
    lines.push(vec![
        ("StartTime", ts(start)),
        ("EndTime", ts(end)),
        ("Deadline", "N/A".into()),
    ]);
    lines.push(vec![
        ("SuspendTime", "None".into()),
        ("SecsPreSuspend", "0".into()),
        ("LastSchedEval", ts(Some(v.submit_time))),
        ("Scheduler", "Main".into()),
    ]);
    let host = run
        .and_then(|r| r.submit_host.clone())
        .unwrap_or_else(|| "(null)".into());
    lines.push(vec![
        ("Partition", v.partition.clone()),
        ("AllocNode:Sid", format!("{host}:0")),
    ]);
    lines.push(vec![
        (
            "ReqNodeList",
            note(spec, "slurm.nodelist").unwrap_or("(null)").to_string(),
        ),
        (
            "ExcNodeList",
            note(spec, "slurm.exclude").unwrap_or("(null)").to_string(),
        ),
    ]);
    lines.push(vec![("NodeList", v.nodes.clone())]);
    if v.state.is_active() {
        let batch_host = v.nodes.split([',', '[']).next().unwrap_or("").to_string();
        let batch_host = match cadre_core::hostlist::expand(&v.nodes) {
            Ok(names) => names.into_iter().next().unwrap_or(batch_host),
            Err(_) => batch_host,
        };
        lines.push(vec![("BatchHost", batch_host)]);
    }

    // The request.
    let tasks = spec.tasks().max(1);
    let cpus_per_task = match note(spec, keys::CPUS_PER_TASK).and_then(|c| c.parse().ok()) {
        Some(c) => c,
        None if note(spec, keys::CPUS_PER_TRES).is_some() => 1,
        None => per_task.cpus.max(1),
    };
    let tpn: Option<u32> = note(spec, keys::NTASKS_PER_NODE)
        .and_then(|k| k.parse().ok())
        .or(group.and_then(|g| g.tasks_per_node));
    let allocated = v.allocation.as_ref().filter(|a| !a.tasks.is_empty());
    let (num_nodes, num_cpus) = match allocated {
        Some(a) if !pending => (a.nodes().len().to_string(), a.amounts().cpus.to_string()),
        _ => {
            let nodes = match note(spec, keys::NODES) {
                Some(n) => n.to_string(),
                None => match group.and_then(|g| g.nodes) {
                    Some(n) if v.spec.as_ref().is_some_and(|s| s.annotations.is_empty()) => {
                        n.to_string()
                    }
                    _ => min_nodes(tasks, cpus_per_task, tpn, job.node_cpus).to_string(),
                },
            };
            (
                nodes,
                (u64::from(tasks) * u64::from(cpus_per_task)).to_string(),
            )
        }
    };
    let threads = if note(spec, keys::HINT) == Some("nomultithread") {
        "1"
    } else {
        "*"
    };
    lines.push(vec![
        ("NumNodes", num_nodes.clone()),
        ("NumCPUs", num_cpus.clone()),
        ("NumTasks", tasks.to_string()),
        ("CPUs/Task", cpus_per_task.to_string()),
        ("ReqB:S:C:T", format!("0:0:*:{threads}")),
    ]);
    let total_mem = per_task.mem_mib * u64::from(tasks);
    let node_min = num_nodes.split('-').next().unwrap_or("1").to_string();
    let mut tres = vec![format!("cpu={num_cpus}")];
    if total_mem > 0 {
        tres.push(format!("mem={}", format_mib(total_mem)));
    }
    tres.push(format!("node={node_min}"));
    tres.push(format!("billing={num_cpus}"));
    let gpus_total = u64::from(per_task.gpus) * u64::from(tasks);
    if gpus_total > 0 {
        tres.push(format!("gres/gpu={gpus_total}"));
    }
    lines.push(vec![("TRES", tres.join(","))]);
    lines.push(vec![
        ("Socks/Node", "*".into()),
        ("NtasksPerN:B:S:C", format!("{}:0:*:*", tpn.unwrap_or(0))),
        ("CoreSpec", "*".into()),
    ]);
    let mem = match (
        note(spec, keys::MEM_PER_NODE),
        note(spec, keys::MEM_PER_CPU),
    ) {
        (Some(m), _) => ("MinMemoryNode", format_mib(m.parse().unwrap_or(0))),
        (None, Some(m)) => ("MinMemoryCPU", format_mib(m.parse().unwrap_or(0))),
        (None, None) if spec.annotations.is_empty() && per_task.mem_mib > 0 => (
            "MinMemoryCPU",
            format_mib(per_task.mem_mib.div_ceil(u64::from(per_task.cpus.max(1)))),
        ),
        (None, None) => ("MinMemoryNode", "0".into()),
    };
    lines.push(vec![
        (
            "MinCPUsNode",
            (cpus_per_task * tpn.unwrap_or(1).max(1)).to_string(),
        ),
        mem,
        ("MinTmpDiskNode", "0".into()),
    ]);
    lines.push(vec![
        (
            "Features",
            if spec.features.is_empty() {
                "(null)".into()
            } else {
                spec.features.join("&")
            },
        ),
        ("DelayBoot", "00:00:00".into()),
    ]);
    let oversubscribe = note(spec, keys::OVERSUBSCRIBE)
        .map(str::to_string)
        .unwrap_or_else(|| {
            if spec.exclusive {
                "NO".into()
            } else {
                "OK".into()
            }
        });
    lines.push(vec![
        ("OverSubscribe", oversubscribe),
        (
            "Contiguous",
            note(spec, keys::CONTIGUOUS).unwrap_or("0").to_string(),
        ),
        (
            "Licenses",
            note(spec, "slurm.licenses").unwrap_or("(null)").to_string(),
        ),
        (
            "Network",
            note(spec, "slurm.network").unwrap_or("(null)").to_string(),
        ),
    ]);
    let command = match (note(spec, keys::COMMAND), run) {
        (Some(c), _) => c.to_string(),
        (None, Some(r)) if r.script.is_none() && !r.command.is_empty() => r.command.join(" "),
        _ => "(null)".into(),
    };
    lines.push(vec![("Command", command)]);
    let work_dir = run.map_or_else(String::new, |r| r.work_dir.display().to_string());
    lines.push(vec![("WorkDir", work_dir.clone())]);
    if let Some(c) = note(spec, keys::COMMENT) {
        lines.push(vec![("Comment", c.to_string())]);
    }
    if let Some(r) = run {
        let default_out = if spec.array.is_some() {
            "slurm-%A_%a.out"
        } else {
            "slurm-%j.out"
        };
        let show = |p: &str| shown_path(p, &work_dir, record_id, array_ids, &v.user, &v.name);
        let stdout = show(r.stdout.as_deref().unwrap_or(default_out));
        let stderr = match &r.stderr {
            Some(e) => show(e),
            None => stdout.clone(),
        };
        lines.push(vec![("StdErr", stderr)]);
        lines.push(vec![(
            "StdIn",
            match note(spec, keys::INPUT) {
                Some(i) => show(i),
                None => "/dev/null".into(),
            },
        )]);
        lines.push(vec![("StdOut", stdout)]);
    }
    if let Some(s) = note(spec, keys::SWITCHES) {
        let (n, wait) = s.split_once('@').unwrap_or((s, "0"));
        lines.push(vec![(
            "Switches",
            format!("{n}@{}", format_duration(wait.parse().unwrap_or(0))),
        )]);
    }
    lines.push(vec![("Power", String::new())]);
    for (key, field) in [
        (keys::CPUS_PER_TRES, "CpusPerTres"),
        (keys::MEM_PER_TRES, "MemPerTres"),
        (keys::TRES_PER_JOB, "TresPerJob"),
        (keys::TRES_PER_NODE, "TresPerNode"),
        (keys::TRES_PER_TASK, "TresPerTask"),
    ] {
        if let Some(t) = note(spec, key) {
            lines.push(vec![(field, t.to_string())]);
        }
    }
    if spec.annotations.is_empty() && per_task.gpus > 0 {
        lines.push(vec![("TresPerTask", format!("gres/gpu:{}", per_task.gpus))]);
    }
    let mut mail = Vec::new();
    if let Some(u) = note(spec, keys::MAIL_USER) {
        mail.push(("MailUser", u.to_string()));
    }
    if let Some(t) = note(spec, keys::MAIL_TYPE) {
        if mail.is_empty() {
            mail.push(("MailUser", v.user.clone()));
        }
        mail.push(("MailType", t.to_string()));
    }
    if !mail.is_empty() {
        lines.push(mail);
    }
    lines
}

/// The fewest nodes that hold `tasks` tasks of `cpus` CPUs each, at most `tpn` per node,
/// on nodes of `node_cpus` CPUs.
pub fn min_nodes(tasks: u32, cpus: u32, tpn: Option<u32>, node_cpus: Option<u64>) -> u32 {
    let by_tpn = tpn.map_or(1, |k| tasks.div_ceil(k.max(1)));
    let by_cpus = match node_cpus {
        Some(nc) if nc > 0 => {
            let per_node = (nc / u64::from(cpus.max(1))).max(1);
            u64::from(tasks).div_ceil(per_node) as u32
        }
        _ => 1,
    };
    by_tpn.max(by_cpus).max(1)
}

/// A record as `scontrol` prints it: one line with `-o`, else its lines indented.
pub fn format_record(record: &Record, one_line: bool) -> String {
    let line = |l: &Vec<(&'static str, String)>| {
        l.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if one_line {
        record.iter().map(line).collect::<Vec<_>>().join(" ")
    } else {
        let mut out = String::new();
        for (i, l) in record.iter().enumerate() {
            if i > 0 {
                out.push_str("   ");
            }
            out.push_str(&line(l));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{Literal, ScriptSource, SubmitContext, build_job};
    use crate::options::{BatchOptions, Opt};
    use cadre_core::job::JobId;

    const CLOCK: Clock = Clock {
        now: 1_795_269_697,
        utc_offset: 0,
    };

    fn view_of(args: &[(Opt, Option<&str>)]) -> JobView {
        let mut o = BatchOptions::default();
        for (opt, v) in args {
            o.set(*opt, *v, &CLOCK).unwrap();
        }
        let ctx = SubmitContext {
            user: "root".into(),
            default_account: "root".into(),
            cwd: "/tmp/sb".into(),
            env: vec![],
            submit_host: Some("localhost".into()),
            clock: CLOCK,
            max_array_size: 1001,
        };
        let j = build_job(
            &o,
            "#!/bin/sh\ntrue\n",
            &ScriptSource::Wrap,
            &[],
            &ctx,
            &Literal,
        )
        .unwrap();
        let s = j.submissions.into_iter().next().unwrap();
        JobView {
            id: JobId(7),
            name: s.spec.name.clone(),
            user: "root".into(),
            account: s.spec.account.clone(),
            partition: "gpu".into(),
            state: JobState::Pending,
            reason: "JobHeldUser".into(),
            submit_time: CLOCK.now as u64,
            start_time: None,
            end_time: None,
            time_limit: s.spec.time_limit.0,
            nodes: String::new(),
            tasks: s.spec.tasks(),
            gpus: 0.0,
            exit_code: None,
            requeues: 0,
            expected_start: None,
            priority: Some(0),
            held: true,
            array: None,
            cpus: u64::from(s.spec.tasks()),
            spec: Some(s.spec),
            allocation: None,
            run: Some(s.run),
        }
    }

    fn fields(args: &[(Opt, Option<&str>)]) -> std::collections::BTreeMap<&'static str, String> {
        let v = view_of(args);
        let job = ShowJob {
            view: &v,
            array: None,
            dependency: dependency_field(v.spec.as_ref().unwrap(), v.state, |_| {
                vec![DepJob {
                    state: JobState::Pending,
                    started: false,
                }]
            }),
            uid: 0,
            group: "root".into(),
            gid: 0,
            node_cpus: Some(64),
        };
        job_record(&job, &CLOCK).into_iter().flatten().collect()
    }

    #[test]
    fn a_held_wrap_job_reads_like_slurms() {
        let f = fields(&[]);
        assert_eq!(f["JobId"], "7");
        assert_eq!(f["JobName"], "wrap");
        assert_eq!(f["JobState"], "PENDING");
        assert_eq!(f["Reason"], "JobHeldUser");
        assert_eq!(f["Dependency"], "(null)");
        assert_eq!(f["TimeLimit"], "UNLIMITED");
        assert_eq!(f["TimeMin"], "N/A");
        assert_eq!(f["NumNodes"], "1");
        assert_eq!(f["NumCPUs"], "1");
        assert_eq!(f["CPUs/Task"], "1");
        assert_eq!(f["MinMemoryNode"], "0");
        assert_eq!(f["StdOut"], "/tmp/sb/slurm-7.out");
        assert_eq!(f["StdErr"], "/tmp/sb/slurm-7.out");
        assert_eq!(f["StdIn"], "/dev/null");
        assert_eq!(f["Command"], "(null)");
        assert_eq!(f["EligibleTime"], "Unknown");
        assert_eq!(f["SubmitTime"], "2026-11-21T14:01:37");
    }

    #[test]
    fn request_forms_show_back() {
        let f = fields(&[
            (Opt::Nodes, Some("2")),
            (Opt::Ntasks, Some("4")),
            (Opt::CpusPerTask, Some("3")),
        ]);
        assert_eq!(
            (
                f["NumNodes"].as_str(),
                f["NumCPUs"].as_str(),
                f["NumTasks"].as_str()
            ),
            ("2-2", "12", "4")
        );
        assert_eq!(f["MinCPUsNode"], "3");
        let f = fields(&[(Opt::Ntasks, Some("100"))]);
        assert_eq!(f["NumNodes"], "2");
        let f = fields(&[(Opt::Ntasks, Some("4")), (Opt::CpusPerTask, Some("40"))]);
        assert_eq!(f["NumNodes"], "4");
        let f = fields(&[(Opt::MemPerCpu, Some("1536"))]);
        assert_eq!(f["MinMemoryCPU"], "1.50G");
        let f = fields(&[(Opt::GpusPerNode, Some("2")), (Opt::CpusPerGpu, Some("4"))]);
        assert_eq!(f["TresPerNode"], "gres/gpu:2");
        assert_eq!(f["CpusPerTres"], "gres/gpu:4");
        assert_eq!(f["CPUs/Task"], "1");
        let f = fields(&[(Opt::Time, Some("1-1:60:15")), (Opt::TimeMin, Some("30"))]);
        assert_eq!(
            (f["TimeLimit"].as_str(), f["TimeMin"].as_str()),
            ("1-02:01:00", "00:30:00")
        );
        let f = fields(&[
            (Opt::Output, Some("out-%x-%u-%N-%5j-%%-%j.txt")),
            (Opt::JobName, Some("n")),
        ]);
        assert_eq!(f["StdOut"], "/tmp/sb/out-n-root-%N-%5j-%%-7.txt");
        let f = fields(&[(Opt::Constraint, Some("a100,ib")), (Opt::Exclusive, None)]);
        assert_eq!(
            (f["Features"].as_str(), f["OverSubscribe"].as_str()),
            ("a100&ib", "NO")
        );
        let f = fields(&[(Opt::Switches, Some("1@1:00"))]);
        assert_eq!(f["Switches"], "1@00:01:00");
        let f = fields(&[(Opt::Dependency, Some("afterok:1:2,afterany:3"))]);
        assert_eq!(
            f["Dependency"],
            "afterok:1(unfulfilled),afterok:2(unfulfilled),afterany:3(unfulfilled)"
        );
    }

    #[test]
    fn pending_array_tasks_collapse_into_one_record() {
        let v = view_of(&[(Opt::Array, Some("1-4%2"))]);
        let job = ShowJob {
            view: &v,
            array: Some(ArrayShow::Pending {
                array_job: 5,
                indices: vec![1, 2, 3, 4],
                max_running: Some(2),
            }),
            dependency: "(null)".into(),
            uid: 0,
            group: "root".into(),
            gid: 0,
            node_cpus: Some(64),
        };
        let text = format_record(&job_record(&job, &CLOCK), true);
        assert!(
            text.starts_with(
                "JobId=5 ArrayJobId=5 ArrayTaskId=1-4%2 ArrayTaskThrottle=2 JobName=wrap "
            ),
            "{text}"
        );
        assert!(
            text.contains("StdOut=/tmp/sb/slurm-5_4294967294.out"),
            "{text}"
        );
    }

    /// Regression (comparison with Slurm, 42-dependency-singleton): a held job's
    /// `singleton` showed `(null)` where Slurm shows `singleton(unfulfilled)`.
    #[test]
    fn singleton_shows_unfulfilled_while_its_job_pends() {
        let f = fields(&[(Opt::Dependency, Some("singleton"))]);
        assert_eq!(f["Dependency"], "singleton(unfulfilled)");
        let v = view_of(&[(Opt::Dependency, Some("singleton"))]);
        let spec = v.spec.as_ref().unwrap();
        assert_eq!(
            dependency_field(spec, JobState::Running, |_| vec![]),
            "(null)"
        );
    }

    #[test]
    fn dependency_entries_leave_once_fulfilled_and_say_when_they_failed() {
        let v = view_of(&[(Opt::Dependency, Some("afterok:1,afterany:2"))]);
        let spec = v.spec.as_ref().unwrap();
        let done = |state| DepJob {
            state,
            started: true,
        };
        let shown = dependency_field(spec, JobState::Pending, |e| match e.target.map(|t| t.job) {
            Some(1) => vec![done(JobState::Failed)],
            _ => vec![done(JobState::Completed)],
        });
        assert_eq!(shown, "afterok:1(failed)");
        let shown = dependency_field(spec, JobState::Pending, |_| vec![done(JobState::Completed)]);
        assert_eq!(shown, "(null)");
    }

    #[test]
    fn records_print_on_lines_or_one_line() {
        let r: Record = vec![
            vec![("JobId", "1".into()), ("JobName", "x".into())],
            vec![("UserId", "u(1)".into())],
        ];
        assert_eq!(format_record(&r, true), "JobId=1 JobName=x UserId=u(1)");
        assert_eq!(
            format_record(&r, false),
            "JobId=1 JobName=x\n   UserId=u(1)\n"
        );
    }
}
