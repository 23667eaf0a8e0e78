//! `cadre plan`: one scheduling pass over a job list, shown in full; and the cluster summary
//! of `cadre cluster`.

use crate::ClusterArgs;
use anyhow::{Context, Result, bail};
use cadre_cli::PolicyArgs;
use cadre_core::cluster::{Cluster, NodeId};
use cadre_core::hostlist;
use cadre_core::job::{JobId, JobSpec};
use cadre_core::scheduler::{Decision, Event, Scheduler};
use cadre_core::time::Time;
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Jobs, one JSON job spec per line (`-` reads standard input). Job ids are the line
    /// numbers of the non-empty lines, from 1.
    #[arg(long)]
    jobs: PathBuf,
    /// The time of the pass, in seconds (jobs submitted later are not yet in the queue).
    #[arg(long, default_value_t = 0)]
    now: u64,
    /// Also list, for each pending job, why each node cannot take it.
    #[arg(long)]
    why_not: bool,
    /// Print decisions and jobs as one JSON document.
    #[arg(long)]
    json: bool,
}

/// A node group of the summary: nodes of one shape and state.
#[derive(Serialize)]
pub struct ClusterSummary {
    name: String,
    nodes: usize,
    gpus: u64,
    cores: u64,
    partitions: Vec<PartitionSummary>,
    shapes: Vec<ShapeSummary>,
    leaf_switches: usize,
    switches: usize,
    blocks: usize,
    states: BTreeMap<String, usize>,
    /// The files a slurm.conf description was read from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// What a slurm.conf had that does not do in cadre what it does in Slurm.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Serialize)]
struct PartitionSummary {
    name: String,
    nodes: String,
    default: bool,
    priority_tier: u32,
}

#[derive(Serialize)]
struct ShapeSummary {
    name: String,
    nodes: String,
    cores: u32,
    mem_mib: u64,
    numa_domains: usize,
    gpus: usize,
    gpu_models: Vec<String>,
    nics: usize,
}

fn names(cluster: &Cluster, ids: impl IntoIterator<Item = NodeId>) -> String {
    let names: Vec<&str> = ids
        .into_iter()
        .map(|n| cluster.node(n).name.as_str())
        .collect();
    hostlist::compress(&names)
}

pub fn cluster_summary(cluster: &Cluster) -> ClusterSummary {
    let mut states = BTreeMap::new();
    for i in 0..cluster.nodes.len() as u32 {
        *states
            .entry(cluster.node_state(NodeId(i)).to_string())
            .or_insert(0) += 1;
    }
    let shapes = cluster
        .shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let ids = (0..cluster.nodes.len() as u32)
                .map(NodeId)
                .filter(|&n| cluster.node(n).shape.0 as usize == i);
            let mut models: Vec<String> = s.gpus.iter().map(|g| g.model.clone()).collect();
            models.dedup();
            ShapeSummary {
                name: s.name.clone(),
                nodes: names(cluster, ids),
                cores: s.cores,
                mem_mib: s.mem_mib,
                numa_domains: s.numa.len(),
                gpus: s.gpus.len(),
                gpu_models: models,
                nics: s.nics.len(),
            }
        })
        .collect();
    ClusterSummary {
        name: cluster.name.clone(),
        nodes: cluster.nodes.len(),
        gpus: cluster.total_gpus(),
        cores: cluster
            .nodes
            .iter()
            .map(|n| u64::from(cluster.shapes[n.shape.0 as usize].cores))
            .sum(),
        partitions: cluster
            .partitions
            .iter()
            .map(|p| PartitionSummary {
                name: p.name.clone(),
                nodes: names(cluster, p.nodes.iter().copied()),
                default: p.default,
                priority_tier: p.priority_tier,
            })
            .collect(),
        shapes,
        leaf_switches: cluster.switches.iter().filter(|s| s.level == 0).count(),
        switches: cluster.switches.len(),
        blocks: cluster.blocks.len(),
        states,
        read: Vec::new(),
        notes: Vec::new(),
    }
}

pub fn render_cluster_summary(s: &ClusterSummary) -> String {
    let mut out = format!(
        "cluster {}: {} nodes, {} GPUs, {} cores; {} switches ({} leaves), {} blocks\n",
        s.name, s.nodes, s.gpus, s.cores, s.switches, s.leaf_switches, s.blocks
    );
    for sh in &s.shapes {
        out += &format!(
            "shape {}: {} | {} cores, {} MiB, {} NUMA, {} GPUs {:?}, {} NICs\n",
            sh.name,
            sh.nodes,
            sh.cores,
            sh.mem_mib,
            sh.numa_domains,
            sh.gpus,
            sh.gpu_models,
            sh.nics
        );
    }
    for p in &s.partitions {
        let default = if p.default { " (default)" } else { "" };
        out += &format!(
            "partition {}{default}: {} tier {}\n",
            p.name, p.nodes, p.priority_tier
        );
    }
    let states: Vec<String> = s.states.iter().map(|(k, v)| format!("{v} {k}")).collect();
    out += &format!("states: {}\n", states.join(", "));
    if !s.read.is_empty() {
        out += &format!("read: {}\n", s.read.join(", "));
    }
    for note in &s.notes {
        out += &format!("note: {note}\n");
    }
    out
}

/// The jobs of a job file, each with its id and line number.
fn read_jobs(path: &PathBuf) -> Result<Vec<(JobId, usize, JobSpec)>> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("failed to read jobs from standard input")?;
        s
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("failed to read jobs file {}", path.display()))?
    };
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let spec: JobSpec = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a valid job spec", path.display(), i + 1))?;
        jobs.push((JobId(jobs.len() as u64 + 1), i + 1, spec));
    }
    if jobs.is_empty() {
        bail!("{}: no jobs", path.display());
    }
    Ok(jobs)
}

#[derive(Serialize)]
struct JobRow {
    job: JobId,
    name: String,
    user: String,
    account: String,
    state: String,
    reason: String,
    priority: u64,
    nodes: String,
    expected_start: Option<Time>,
    why_not: Vec<(String, String)>,
}

pub fn run(args: &PlanArgs) -> Result<ExitCode> {
    let cluster = args.cluster.load()?;
    let policy = args.policy.load()?;
    let jobs = read_jobs(&args.jobs)?;
    let mut sched = Scheduler::new(cluster, policy)?;
    let now = Time(args.now);
    for (id, line, spec) in jobs.iter().filter(|(_, _, s)| s.submit_time <= now) {
        let submit = Event::Submit {
            id: *id,
            spec: Box::new(spec.clone()),
        };
        sched
            .handle(submit, spec.submit_time)
            .with_context(|| format!("{}:{line}", args.jobs.display()))?;
    }
    let decisions = sched.schedule(now);
    let rows: Vec<JobRow> = sched
        .jobs()
        .map(|job| {
            let explained = sched.explain(job.id, now, args.why_not);
            JobRow {
                job: job.id,
                name: job.spec.name.clone(),
                user: job.spec.user.clone(),
                account: job.spec.account.clone(),
                state: job.state.to_string(),
                reason: explained
                    .as_ref()
                    .map(|e| e.reason.to_string())
                    .unwrap_or_default(),
                priority: sched.priority(job),
                nodes: job
                    .allocation
                    .as_ref()
                    .map(|a| names(sched.cluster(), a.nodes()))
                    .unwrap_or_default(),
                expected_start: sched.expected_start(job.id),
                why_not: explained
                    .map(|e| e.nodes.into_iter().map(|n| (n.node, n.why)).collect())
                    .unwrap_or_default(),
            }
        })
        .collect();
    if args.json {
        #[derive(Serialize)]
        struct Out<'a> {
            decisions: &'a [Decision],
            jobs: &'a [JobRow],
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&Out {
                decisions: &decisions,
                jobs: &rows
            })?
        );
        return Ok(ExitCode::SUCCESS);
    }
    for d in &decisions {
        println!("{}", describe(sched.cluster(), d));
    }
    println!(
        "{:>6} {:<12} {:<10} {:<10} {:<10} {:<16} {:>9} NODELIST",
        "JOBID", "NAME", "USER", "ACCOUNT", "STATE", "REASON", "PRIORITY"
    );
    for r in &rows {
        let nodes = if r.nodes.is_empty() {
            format!("({})", r.reason)
        } else {
            r.nodes.clone()
        };
        println!(
            "{:>6} {:<12} {:<10} {:<10} {:<10} {:<16} {:>9} {nodes}",
            r.job.0, r.name, r.user, r.account, r.state, r.reason, r.priority
        );
        for (node, why) in &r.why_not {
            println!("{:>8}{node}: {why}", "");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per decision, for people.
fn describe(cluster: &Cluster, d: &Decision) -> String {
    match d {
        Decision::Start { job, allocation } => {
            let per_node: Vec<String> = allocation
                .amounts_by_node()
                .iter()
                .map(|(n, a)| {
                    let gpus: Vec<String> = allocation
                        .tasks
                        .iter()
                        .filter(|t| t.node == *n)
                        .flat_map(|t| t.gpus.iter().map(|g| g.to_string()))
                        .collect();
                    let gpus = match gpus.is_empty() {
                        true => String::new(),
                        false => format!(" gpus={}", gpus.join(",")),
                    };
                    format!("{}[cpus={}{gpus}]", cluster.node(*n).name, a.cpus)
                })
                .collect();
            format!(
                "start   job {job}: {} task(s) on {}",
                allocation.tasks.len(),
                per_node.join(" ")
            )
        }
        Decision::Preempt {
            victim,
            by,
            mode,
            grace,
        } => {
            format!("preempt job {victim} for job {by} ({mode:?}, grace {grace})")
        }
        Decision::Stop { job, why, .. } => format!("stop    job {job}: {why:?}"),
        Decision::Reserve(r) => {
            let nodes = names(cluster, r.nodes.iter().map(|(n, _)| *n));
            format!(
                "reserve job {}: from {} to {} on {nodes}",
                r.job, r.start, r.end
            )
        }
    }
}
