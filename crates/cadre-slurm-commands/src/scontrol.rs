//! `scontrol`: `show job|node|partition [-o] [NAME]`, `show hostnames [LIST]`,
//! `show hostlist LIST`, `update JobId=N TimeLimit=..|Nice=..`,
//! `update NodeName=X State=DRAIN Reason=..|State=RESUME`, and `hold`, `release`,
//! `requeue` of jobs. Records are Slurm 22.05's key=value layout (`cadre_slurm::show`);
//! errors and exit codes are Slurm's.
//!
//! `show hostnames` without a list reads `$SLURM_JOB_NODELIST`, as current Slurm does
//! (22.05 did not).

use super::query::{self, Opt};
use super::{api_failure, connect, ids_of, local_clock};
use cadre_client::Client;
use cadre_core::hostlist;
use cadre_core::job::{JobId, JobState};
use cadre_proto::api::{
    DrainRequest, JobList, JobUpdate, JobView, NodeList, NodeView, PartitionList, PartitionView,
};
use cadre_proto::exit;
use cadre_slurm::convert::keys;
use cadre_slurm::dependency::DepEntry;
use cadre_slurm::getopt::ArgKind;
use cadre_slurm::refusal::{Request, SlurmErrno, refusal};
use cadre_slurm::show::{ArrayShow, DepJob, ShowJob, dependency_field, format_record, job_record};
use cadre_slurm::size::format_mib;
use cadre_slurm::time::{format_limit, parse_time_limit};
use hyper::Method;
use std::collections::BTreeMap;
use std::process::ExitCode;

/// What went wrong, as `scontrol` says it; every error exits 1.
pub struct Failure(String);

impl<T: Into<String>> From<T> for Failure {
    fn from(s: T) -> Failure {
        Failure(s.into())
    }
}

type Outcome = Result<(), Failure>;

/// scontrol's options (those cadre takes), in GNU getopt's permuting order as Slurm's
/// scontrol takes them: `scontrol show job 5 -o` is one-line.
const OPTIONS: &[Opt] = &[
    Opt::new('a', "all", ArgKind::None),
    Opt::new('d', "details", ArgKind::None),
    Opt::new('h', "help", ArgKind::None),
    Opt::new('o', "oneliner", ArgKind::None),
    Opt::new('Q', "quiet", ArgKind::None),
    Opt::long("usage", ArgKind::None),
    Opt::new('v', "verbose", ArgKind::None),
    Opt::new('V', "version", ArgKind::None),
];

/// `scontrol ARGS...`.
pub fn run(argv: Vec<String>) -> ExitCode {
    let p = match query::parse_args("scontrol", argv.get(1..).unwrap_or_default(), OPTIONS) {
        Ok(p) => p,
        Err(code) => return code,
    };
    for (opt, _) in &p.opts {
        match *opt {
            "version" => {
                println!(
                    "cadre {} (Slurm-compatible scontrol)",
                    env!("CARGO_PKG_VERSION")
                );
                return ExitCode::SUCCESS;
            }
            "help" | "usage" => {
                println!("{HELP}");
                return ExitCode::SUCCESS;
            }
            _ => {}
        }
    }
    let one_line = p.has("oneliner");
    let words = p.operands;
    match scontrol(&words, one_line) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(m)) => {
            if !m.is_empty() {
                eprintln!("{m}");
            }
            ExitCode::from(exit::ERROR)
        }
    }
}

const HELP: &str = "Usage: scontrol [-o] <command> ...
  show job [ID]             a job (or every job) as key=value records
  show node [NAME]          a node (or every node)
  show partition [NAME]     a partition (or every partition)
  show hostnames [LIST]     a hostlist expanded, one name a line ($SLURM_JOB_NODELIST)
  show hostlist LIST        names compressed into a hostlist
  update JobId=ID TimeLimit=T|Nice=N
  update NodeName=NAME State=DRAIN Reason=TEXT | State=RESUME
  hold ID...  release ID...  requeue ID...
  -o, --oneliner            one record a line";

fn is(word: &str, keyword: &str, min: usize) -> bool {
    word.len() >= min && keyword.starts_with(&word.to_ascii_lowercase())
}

fn scontrol(words: &[String], one_line: bool) -> Outcome {
    let Some(cmd) = words.first() else {
        return Err("scontrol: interactive mode is not supported by cadre; give a command".into());
    };
    let rest = &words[1..];
    if is(cmd, "show", 3) {
        show(rest, one_line)
    } else if is(cmd, "update", 2) {
        update(rest)
    } else if is(cmd, "hold", 2) {
        job_action(rest, "hold")
    } else if is(cmd, "release", 3) {
        job_action(rest, "release")
    } else if is(cmd, "requeue", 3) {
        job_action(rest, "requeue")
    } else {
        Err(format!("invalid keyword: {cmd}").into())
    }
}

fn client() -> Result<Client, Failure> {
    connect().map_err(|e| Failure(format!("scontrol: error: {e}")))
}

fn show(words: &[String], one_line: bool) -> Outcome {
    let Some(entity) = words.first() else {
        return Err("too few arguments for keyword:show".into());
    };
    if words.len() > 2 {
        return Err("too many arguments for keyword:show".into());
    }
    let name = words.get(1).map(String::as_str);
    let e = entity.to_ascii_lowercase();
    if e == "hostnames" {
        show_hostnames(name)
    } else if e == "hostlist" || e == "hostlistsorted" {
        let Some(list) = name else {
            return Err("scontrol: error: host list is empty".into());
        };
        let mut names = hostlist::expand(list).map_err(|err| format!("scontrol: error: {err}"))?;
        if e == "hostlistsorted" {
            names.sort();
        }
        println!("{}", hostlist::compress(&names));
        Ok(())
    } else if is(&e, "jobs", 1) || e == "jobid" {
        show_jobs(name, one_line)
    } else if is(&e, "nodes", 1) || e == "nodename" {
        show_nodes(name, one_line)
    } else if is(&e, "partitions", 1) || e == "partitionname" {
        show_partitions(name, one_line)
    } else {
        Err(format!("invalid entity:{entity} for keyword:show ").into())
    }
}

fn show_hostnames(list: Option<&str>) -> Outcome {
    let list = match list {
        Some(l) => l.to_string(),
        None => std::env::var("SLURM_JOB_NODELIST").unwrap_or_default(),
    };
    if list.trim().is_empty() {
        return Err("scontrol: error: host list is empty".into());
    }
    let names = hostlist::expand(&list).map_err(|e| format!("scontrol: error: {e}"))?;
    for n in names {
        println!("{n}");
    }
    Ok(())
}

/// A job id as `scontrol` takes it: `12` or `12_3` (array task).
fn parse_job_id(text: &str) -> Result<(u64, Option<u32>), Failure> {
    let bad = || Failure(format!("{} for job {text}", SlurmErrno::InvalidJobId));
    let (job, task) = match text.split_once('_') {
        Some((j, t)) => (j, Some(t.parse::<u32>().map_err(|_| bad())?)),
        None => (text, None),
    };
    Ok((job.parse().map_err(|_| bad())?, task))
}

fn list_all(client: &mut Client) -> Result<Vec<JobView>, Failure> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page: JobList = client
            .get(&format!("/jobs?after={after}&limit=1000"))
            .map_err(|e| {
                Failure(format!(
                    "slurm_load_jobs error: {}",
                    cadre_cli::error_chain(&e.into())
                ))
            })?;
        let n = page.jobs.len();
        if let Some(last) = page.jobs.last() {
            after = last.id.0;
        }
        out.extend(page.jobs);
        if n < 1000 {
            return Ok(out);
        }
    }
}

fn get_job(client: &mut Client, id: u64) -> Option<JobView> {
    client.get::<JobView>(&format!("/jobs/{id}")).ok()
}

/// The jobs `ids` stand for, in Slurm's sense: a job, an array task, or a whole array.
fn jobs_of(client: &mut Client, text: &str, all: &[JobView]) -> Result<Vec<JobId>, Failure> {
    let (job, task) = parse_job_id(text)?;
    let members: Vec<&JobView> = all
        .iter()
        .filter(|j| j.array.is_some_and(|a| a.array_job.0 == job))
        .collect();
    let ids: Vec<JobId> = match task {
        Some(t) => members
            .iter()
            .filter(|j| j.array.is_some_and(|a| a.index == t))
            .map(|j| j.id)
            .collect(),
        None if !members.is_empty() => members.iter().map(|j| j.id).collect(),
        None => get_job(client, job).map(|j| vec![j.id]).unwrap_or_default(),
    };
    if ids.is_empty() {
        return Err(format!("{} for job {text}", SlurmErrno::InvalidJobId).into());
    }
    Ok(ids)
}

/// Largest CPU count of the nodes of each partition.
fn node_cpus(nodes: &[NodeView]) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for n in nodes {
        for p in &n.partitions {
            let e = out.entry(p.clone()).or_default();
            *e = (*e).max(n.cpus);
        }
    }
    out
}

fn show_jobs(which: Option<&str>, one_line: bool) -> Outcome {
    let mut client = client()?;
    let all = list_all(&mut client)?;
    let ids: Vec<JobId> = match which {
        Some(t) => jobs_of(&mut client, t, &all).map_err(|_| {
            Failure(format!(
                "slurm_load_jobs error: {}",
                SlurmErrno::InvalidJobId
            ))
        })?,
        None => all.iter().map(|j| j.id).collect(),
    };
    if ids.is_empty() {
        println!("No jobs in the system");
        return Ok(());
    }
    let nodes: NodeList = client.get("/nodes").map_err(|e| {
        Failure(format!(
            "slurm_load_jobs error: {}",
            cadre_cli::error_chain(&e.into())
        ))
    })?;
    let cpus = node_cpus(&nodes.nodes);
    let clock = local_clock();
    let mut views: Vec<JobView> = Vec::new();
    for id in ids {
        if let Some(v) = get_job(&mut client, id.0) {
            views.push(v);
        }
    }
    // An array's tasks that never started are one record, as in Slurm.
    let mut shown: Vec<(JobView, Option<ArrayShow>)> = Vec::new();
    let mut collapsed: BTreeMap<u64, usize> = BTreeMap::new();
    for v in views {
        let Some(a) = v.array else {
            shown.push((v, None));
            continue;
        };
        let never_started =
            v.state == JobState::Pending && v.start_time.is_none() && v.requeues == 0;
        if !never_started {
            let task = ArrayShow::Task {
                array_job: a.array_job.0,
                index: a.index,
            };
            shown.push((v, Some(task)));
            continue;
        }
        match collapsed.get(&a.array_job.0) {
            Some(&i) => {
                if let Some(ArrayShow::Pending { indices, .. }) = &mut shown[i].1 {
                    indices.push(a.index);
                }
            }
            None => {
                let max_running = v
                    .spec
                    .as_ref()
                    .and_then(|s| s.annotations.get(keys::ARRAY_MAX_RUNNING))
                    .and_then(|n| n.parse().ok());
                collapsed.insert(a.array_job.0, shown.len());
                shown.push((
                    v,
                    Some(ArrayShow::Pending {
                        array_job: a.array_job.0,
                        indices: vec![a.index],
                        max_running,
                    }),
                ));
            }
        }
    }
    for (v, array) in &shown {
        let Some(spec) = &v.spec else { continue };
        let dependency = dependency_field(spec, v.state, |e| dep_targets(e, &all));
        let (uid, group, gid) = ids_of(&v.user);
        let job = ShowJob {
            view: v,
            array: array.clone(),
            dependency,
            uid,
            group,
            gid,
            node_cpus: cpus.get(&v.partition).copied(),
        };
        // Multi-line records end with their own newline: a blank line between records.
        println!("{}", format_record(&job_record(&job, &clock), one_line));
    }
    Ok(())
}

/// The jobs a dependency entry names: a job, an array task, or every task of an array.
fn dep_targets(e: &DepEntry, all: &[JobView]) -> Vec<DepJob> {
    let Some(t) = e.target else {
        return Vec::new();
    };
    let members: Vec<&JobView> = all
        .iter()
        .filter(|j| j.array.is_some_and(|a| a.array_job.0 == t.job))
        .filter(|j| {
            t.task
                .is_none_or(|task| j.array.is_some_and(|a| a.index == task))
        })
        .collect();
    let jobs: Vec<&JobView> = if members.is_empty() {
        all.iter().filter(|j| j.id.0 == t.job).collect()
    } else {
        members
    };
    jobs.iter()
        .map(|j| DepJob {
            state: j.state,
            started: j.start_time.is_some(),
        })
        .collect()
}

fn slurm_node_state(n: &NodeView) -> String {
    let base = match n.state.as_str() {
        "idle" | "drained" => "IDLE",
        "mixed" => "MIXED",
        "allocated" => "ALLOCATED",
        "draining" if n.cpus_alloc >= n.cpus => "ALLOCATED",
        "draining" => "MIXED",
        "down" => "DOWN",
        other => return other.to_ascii_uppercase(),
    };
    let mut s = base.to_string();
    if n.state == "drained" || n.state == "draining" {
        s.push_str("+DRAIN");
    }
    if !n.connected && n.state != "down" {
        s.push_str("+NOT_RESPONDING");
    }
    s
}

fn node_record(n: &NodeView) -> Vec<Vec<(&'static str, String)>> {
    let features = if n.features.is_empty() {
        "(null)".to_string()
    } else {
        n.features.join(",")
    };
    let gres = match (n.gpus, &n.gpu_model) {
        (0, _) => "(null)".to_string(),
        (g, Some(m)) => format!("gpu:{m}:{g}"),
        (g, None) => format!("gpu:{g}"),
    };
    let mut alloc = Vec::new();
    if n.cpus_alloc > 0 {
        alloc.push(format!("cpu={}", n.cpus_alloc));
    }
    if n.memory_alloc_mib > 0 {
        alloc.push(format!("mem={}", format_mib(n.memory_alloc_mib)));
    }
    if n.gpus_alloc > 0.0 {
        alloc.push(format!("gres/gpu={}", n.gpus_alloc));
    }
    let mut cfg = vec![
        format!("cpu={}", n.cpus),
        format!("mem={}", format_mib(n.memory_mib)),
        format!("billing={}", n.cpus),
    ];
    if n.gpus > 0 {
        cfg.push(format!("gres/gpu={}", n.gpus));
    }
    let mut lines = vec![
        vec![("NodeName", n.name.clone())],
        vec![
            ("CPUAlloc", n.cpus_alloc.to_string()),
            ("CPUEfctv", n.cpus.to_string()),
            ("CPUTot", n.cpus.to_string()),
        ],
        vec![("AvailableFeatures", features.clone())],
        vec![("ActiveFeatures", features)],
        vec![("Gres", gres)],
        vec![
            ("RealMemory", n.memory_mib.to_string()),
            ("AllocMem", n.memory_alloc_mib.to_string()),
        ],
        vec![("State", slurm_node_state(n))],
        vec![("Partitions", n.partitions.join(","))],
        vec![("CfgTRES", cfg.join(","))],
        vec![("AllocTRES", alloc.join(","))],
    ];
    if let Some(r) = &n.reason {
        lines.push(vec![("Reason", r.clone())]);
    }
    lines
}

fn show_nodes(which: Option<&str>, one_line: bool) -> Outcome {
    let mut client = client()?;
    let list: NodeList = client.get("/nodes").map_err(|e| {
        Failure(format!(
            "slurm_load_node error: {}",
            cadre_cli::error_chain(&e.into())
        ))
    })?;
    let nodes: Vec<&NodeView> = match which {
        Some(name) => {
            let wanted = hostlist::expand(name).map_err(|e| format!("scontrol: error: {e}"))?;
            let found: Vec<&NodeView> = list
                .nodes
                .iter()
                .filter(|n| wanted.contains(&n.name))
                .collect();
            if found.is_empty() {
                return Err(format!("Node {name} not found").into());
            }
            found
        }
        None => list.nodes.iter().collect(),
    };
    for n in nodes {
        println!("{}", format_record(&node_record(n), one_line));
    }
    Ok(())
}

fn partition_record(p: &PartitionView, cpus: u64) -> Vec<Vec<(&'static str, String)>> {
    let time = |t: Option<u64>, none: &str| match t {
        Some(0) | None => none.to_string(),
        Some(s) => format_limit(Some(s)),
    };
    vec![
        vec![("PartitionName", p.name.clone())],
        vec![
            ("AllowGroups", "ALL".into()),
            ("AllowAccounts", "ALL".into()),
            ("AllowQos", "ALL".into()),
        ],
        vec![
            ("AllocNodes", "ALL".into()),
            ("Default", if p.default { "YES" } else { "NO" }.into()),
            ("QoS", "N/A".into()),
        ],
        vec![
            ("DefaultTime", time(p.default_time, "NONE")),
            ("DisableRootJobs", "NO".into()),
            ("ExclusiveUser", "NO".into()),
            ("GraceTime", "0".into()),
            ("Hidden", "NO".into()),
        ],
        vec![
            ("MaxNodes", "UNLIMITED".into()),
            ("MaxTime", time(p.max_time, "UNLIMITED")),
            ("MinNodes", "0".into()),
            ("LLN", "NO".into()),
            ("MaxCPUsPerNode", "UNLIMITED".into()),
        ],
        vec![("Nodes", p.nodes.clone())],
        vec![
            ("PriorityJobFactor", "1".into()),
            ("PriorityTier", p.priority_tier.to_string()),
            ("RootOnly", "NO".into()),
            ("ReqResv", "NO".into()),
            ("OverSubscribe", "NO".into()),
        ],
        vec![
            ("OverTimeLimit", "NONE".into()),
            ("PreemptMode", "OFF".into()),
        ],
        vec![
            ("State", if p.up { "UP" } else { "DOWN" }.into()),
            ("TotalCPUs", cpus.to_string()),
            ("TotalNodes", p.node_count.to_string()),
            ("SelectTypeParameters", "NONE".into()),
        ],
        vec![("JobDefaults", "(null)".into())],
        vec![
            ("DefMemPerNode", "UNLIMITED".into()),
            ("MaxMemPerNode", "UNLIMITED".into()),
        ],
        vec![(
            "TRES",
            format!(
                "cpu={cpus},node={},billing={cpus}{}",
                p.node_count,
                if p.gpus > 0 {
                    format!(",gres/gpu={}", p.gpus)
                } else {
                    String::new()
                }
            ),
        )],
    ]
}

fn show_partitions(which: Option<&str>, one_line: bool) -> Outcome {
    let mut client = client()?;
    let list: PartitionList = client.get("/partitions").map_err(|e| {
        Failure(format!(
            "slurm_load_partitions error: {}",
            cadre_cli::error_chain(&e.into())
        ))
    })?;
    let nodes: NodeList = client.get("/nodes").map_err(|e| {
        Failure(format!(
            "slurm_load_node error: {}",
            cadre_cli::error_chain(&e.into())
        ))
    })?;
    let parts: Vec<&PartitionView> = list
        .partitions
        .iter()
        .filter(|p| which.is_none_or(|w| p.name == w))
        .collect();
    if parts.is_empty() {
        return Err(format!("Partition {} not found", which.unwrap_or("")).into());
    }
    for p in parts {
        let cpus: u64 = nodes
            .nodes
            .iter()
            .filter(|n| n.partitions.contains(&p.name))
            .map(|n| n.cpus)
            .sum();
        println!("{}", format_record(&partition_record(p, cpus), one_line));
    }
    Ok(())
}

/// `Key=Value` pairs of `update`, keys in lower case.
fn pairs(words: &[String]) -> Result<Vec<(String, String)>, Failure> {
    words
        .iter()
        .map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                .ok_or_else(|| Failure(format!("Invalid input: {w}\nRequest aborted")))
        })
        .collect()
}

/// A refusal of `request` as `what error: ...`, in Slurm's words where Slurm has words for
/// its reason ([`cadre_slurm::refusal`]), else in the controller's.
fn api_error(e: &anyhow::Error, what: &str, request: Request) -> Failure {
    match api_failure(e) {
        Some(f) => match refusal(f.reason, request, None).errno {
            Some(errno) => Failure(format!("{what} error: {errno}")),
            None => Failure(format!("{what} error: {}", f.message)),
        },
        None => Failure(format!("{what} error: {}", cadre_cli::error_chain(e))),
    }
}

/// Slurm's error for the refusal `e` of `request`, if it is one and Slurm has one.
fn slurm_errno(e: &anyhow::Error, request: Request) -> Option<SlurmErrno> {
    refusal(api_failure(e)?.reason, request, None).errno
}

fn update(words: &[String]) -> Outcome {
    let kv = pairs(words)?;
    let Some((key, target)) = kv.first().cloned() else {
        return Err("too few arguments for keyword:update".into());
    };
    let mut client = client()?;
    match key.as_str() {
        "jobid" | "job" => {
            let all = list_all(&mut client)?;
            let ids = jobs_of(&mut client, &target, &all)?;
            let mut upd = JobUpdate::default();
            for (k, v) in &kv[1..] {
                match k.as_str() {
                    "timelimit" => {
                        upd.time_limit = Some(time_limit_value(v, &ids, &all)?);
                    }
                    "nice" => {
                        upd.nice = Some(v.parse().map_err(|_| {
                            Failure(format!("Invalid nice value: {v}\nRequest aborted"))
                        })?);
                    }
                    _ => {
                        return Err(format!(
                            "Update of this parameter is not supported: {k}={v}\nRequest aborted"
                        )
                        .into());
                    }
                }
            }
            for id in ids {
                client
                    .send::<_, serde_json::Value>(Method::PATCH, &format!("/jobs/{id}"), Some(&upd))
                    .map_err(|e| {
                        api_error(
                            &e.into(),
                            "slurm_update",
                            Request::ChangeJob { ended: false },
                        )
                    })?;
            }
            Ok(())
        }
        "nodename" | "node" => {
            let names = hostlist::expand(&target).map_err(|e| format!("scontrol: error: {e}"))?;
            let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
            let state = get("state").unwrap_or_default().to_ascii_uppercase();
            for (k, v) in &kv[1..] {
                if !matches!(k.as_str(), "state" | "reason") {
                    return Err(format!(
                        "Update of this parameter is not supported: {k}={v}\nRequest aborted"
                    )
                    .into());
                }
            }
            for name in names {
                let path = format!("/nodes/{name}");
                let result = match state.as_str() {
                    "DRAIN" | "DOWN" => {
                        let Some(reason) = get("reason") else {
                            return Err("You must specify a reason when DOWNING or DRAINING a node. Request denied".into());
                        };
                        client.send::<_, serde_json::Value>(
                            Method::POST,
                            &format!("{path}/drain"),
                            Some(&DrainRequest { reason }),
                        )
                    }
                    "RESUME" | "IDLE" | "UNDRAIN" => client.send::<(), serde_json::Value>(
                        Method::POST,
                        &format!("{path}/resume"),
                        None,
                    ),
                    "" => {
                        return Err(
                            "scontrol: error: no State given; cadre updates only a node's state"
                                .into(),
                        );
                    }
                    other => {
                        return Err(format!(
                            "scontrol: error: invalid node state specified: {other} (cadre takes DRAIN, DOWN and RESUME)"
                        )
                        .into());
                    }
                };
                result.map_err(anyhow::Error::from).map_err(|e| {
                    match slurm_errno(&e, Request::ChangeNode) {
                        Some(errno @ SlurmErrno::InvalidNodeName) => {
                            Failure(format!("{errno}: {name}"))
                        }
                        _ => api_error(&e, "slurm_update", Request::ChangeNode),
                    }
                })?;
            }
            Ok(())
        }
        _ => Err(format!(
            "scontrol: error: cadre updates jobs (JobId=) and nodes (NodeName=), not {key}"
        )
        .into()),
    }
}

/// `TimeLimit=` of an update: a limit, or `+T`/`-T` relative to the current one.
pub fn time_limit_value(v: &str, ids: &[JobId], all: &[JobView]) -> Result<u64, Failure> {
    let invalid = || Failure("scontrol: error: Invalid TimeLimit value".into());
    let (sign, text) = match v.as_bytes().first() {
        Some(b'+') => (1, &v[1..]),
        Some(b'-') if v != "-1" => (-1, &v[1..]),
        _ => (0, v),
    };
    let secs = parse_time_limit(text).map_err(|_| invalid())?.secs();
    if sign == 0 {
        return Ok(secs.unwrap_or(0));
    }
    let delta = secs.ok_or_else(invalid)?;
    let current = ids
        .first()
        .and_then(|id| all.iter().find(|j| j.id == *id))
        .map_or(0, |j| j.time_limit);
    Ok(if sign > 0 {
        current + delta
    } else {
        current.saturating_sub(delta).max(60)
    })
}

fn job_action(words: &[String], action: &str) -> Outcome {
    if words.is_empty() {
        return Err(format!("too few arguments for keyword:{action}").into());
    }
    let mut client = client()?;
    let all = list_all(&mut client)?;
    let mut failed = None;
    for text in words
        .iter()
        .flat_map(|w| w.split(','))
        .filter(|t| !t.is_empty())
    {
        let ids = match jobs_of(&mut client, text, &all) {
            Ok(ids) => ids,
            Err(e) => {
                failed = Some(e);
                continue;
            }
        };
        for id in ids {
            if let Err(e) = client.send::<(), serde_json::Value>(
                Method::POST,
                &format!("/jobs/{id}/{action}"),
                None,
            ) {
                let e = anyhow::Error::from(e);
                let ended = all.iter().any(|j| j.id == id && j.state.is_final());
                let request = Request::ChangeJob { ended };
                let f = match slurm_errno(&e, request) {
                    Some(errno @ SlurmErrno::JobFinished) => {
                        Failure(format!("{errno} for job {text}"))
                    }
                    _ => api_error(&e, &format!("slurm_{action}"), request),
                };
                eprintln!("{}", f.0);
                failed = Some(Failure(String::new()));
            }
        }
    }
    match failed {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
