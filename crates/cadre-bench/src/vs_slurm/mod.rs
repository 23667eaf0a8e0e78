//! `cadre bench vs-slurm`: the same workloads on cadre and on a real Slurm, one system after
//! the other in one run, each measured from its own records.
//!
//! The reference is the Slurm that `shared/slurm/start-slurm.sh N G C` runs on this machine
//! (its commands by full path, `reference`); cadre runs the same nodes (`cadre up
//! --cluster`, nodes named as Slurm's, emulated GPUs) with its commands as `sbatch`,
//! `squeue` and `scancel` links. The workloads (`workloads`):
//!
//! - `submit`: `sbatch --wrap true` from 8 concurrent shells (the same command line on
//!   both), and for cadre the same job through the API from 8 clients;
//! - `latency`: single-GPU jobs one after another on the idle cluster, from just before
//!   `sbatch` to the job's first instruction (it writes `date +%s%N`);
//! - `replay`: a window of the Philly trace, compressed, jobs as `sleep` (`replay`);
//! - `scale`: a backlog of pending jobs that every scheduling pass must consider (they ask
//!   for the first node, which a long job holds whole, and rank ahead of the probes by age
//!   and size), stepped up until a probe job that fits elsewhere takes more than 1 s from
//!   submission to its first instruction, or a cap.
//!
//! CPUs: cadre's agents run on this machine and never pretend hardware, so cadre's nodes
//! have this machine's cores. When the reference's nodes have more (`start-slurm.sh 4 8 64`
//! in CI), a job asks Slurm for the same share of a node: CPUs x (Slurm's CPUs per node /
//! cadre's), so that as many jobs fit a node on both. `start-slurm.sh N G C` with C =
//! this machine's cores makes the commands identical.

mod reference;
mod replay;
mod report;
mod system;
mod workloads;

use crate::api::{DataDir, cadre};
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use report::{Pair, Results, RunHeader};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use system::System;

/// The workloads, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    Submit,
    Latency,
    Replay,
    Scale,
}

#[derive(Args, Debug)]
#[command(after_long_help = AFTER_HELP)]
pub struct VsSlurmArgs {
    /// Nodes of both clusters; must be the reference's (default: the reference's count).
    #[arg(long)]
    nodes: Option<u32>,
    /// GPUs per node of both clusters (default: the reference's).
    #[arg(long)]
    gpus_per_node: Option<u32>,
    /// Every workload shrunk so that the whole run takes a few minutes.
    #[arg(long)]
    quick: bool,
    /// Run only these workloads (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Workload>,
    /// Submissions of the submit workload (default 5000; 400 with --quick).
    #[arg(long)]
    submit_jobs: Option<u32>,
    /// Jobs of the latency workload (default 200; 20 with --quick).
    #[arg(long)]
    latency_jobs: Option<u32>,
    /// Jobs of the replay's trace window (default 500; 40 with --quick).
    #[arg(long)]
    replay_jobs: Option<usize>,
    /// Seconds the window's compressed arrivals span (default 240; 15 with --quick).
    #[arg(long)]
    replay_span: Option<f64>,
    /// Largest backlog of the scale workload (default 32000; 200 with --quick).
    #[arg(long)]
    scale_cap: Option<u32>,
    /// The Philly job list (timestamp,duration,num_gpus,gpu_time,cluster).
    #[arg(
        long,
        env = "CADRE_PHILLY_TRACE",
        default_value = "../shared/traces/philly/philly.csv"
    )]
    trace: PathBuf,
    /// Print the table as Markdown (for BENCHMARKS.md).
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
    /// Print one JSON object: `submit`, `latency`, `replay`, `scale`, each with `cadre` and
    /// `slurm`.
    #[arg(long)]
    json: bool,
    /// Also write the JSON object to this file (with the table or Markdown on stdout).
    #[arg(long)]
    save_json: Option<PathBuf>,
    /// Keep cadre's data directory here (default: a temporary one, removed after).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
Needs the reference Slurm running on this machine, idle:
  bash ../shared/slurm/start-slurm.sh 16 8 2     (as root: 16 nodes, 8 GPUs, 2 CPUs each)
Its commands are used by full path (/usr/bin/sbatch, /usr/bin/squeue, /usr/bin/scontrol);
finished jobs are read from its jobcomp file. Nodes that came up `inval` are given their
GPUs and resumed. cadre runs the same nodes (cadre up --cluster, emulated GPUs) from a
temporary data directory, stopped at the end.

Workloads (both systems, one after the other):
  submit   sbatch --wrap true from 8 shells; cadre also through the API (submit_per_s)
  latency  1-GPU jobs one after another, submit to first instruction (p50_ms, p99_ms)
  replay   a Philly window, arrivals and durations compressed by one factor, jobs as
           sleep (gpu_utilization, mean_wait_s, p95_wait_s, makespan_s,
           mean_bounded_slowdown, partial_gang_starts)
  scale    pending backlog stepped up while a probe starts in under 1 s (max_pending)

Exit codes: 0 measured; 1 an error (the reference not running, a job that did not run ...).";

/// The sizes of one run.
#[derive(Clone, Debug)]
pub struct Sizes {
    submit_jobs: u32,
    submit_shells: u32,
    latency_jobs: u32,
    replay_jobs: usize,
    replay_span_s: f64,
    scale_steps: Vec<u32>,
    scale_probes: usize,
}

impl Sizes {
    fn of(args: &VsSlurmArgs) -> Sizes {
        let q = args.quick;
        let cap = args.scale_cap.unwrap_or(if q { 200 } else { 32_000 });
        let base: &[u32] = if q {
            &[0, 100, 200]
        } else {
            &[0, 500, 1000, 2000, 4000, 8000, 16_000, 32_000]
        };
        let mut steps: Vec<u32> = base.iter().copied().filter(|&s| s < cap).collect();
        steps.push(cap);
        Sizes {
            submit_jobs: args.submit_jobs.unwrap_or(if q { 400 } else { 5000 }),
            submit_shells: 8,
            latency_jobs: args.latency_jobs.unwrap_or(if q { 20 } else { 200 }),
            replay_jobs: args.replay_jobs.unwrap_or(if q { 40 } else { 500 }),
            replay_span_s: args.replay_span.unwrap_or(if q { 15.0 } else { 240.0 }),
            scale_steps: steps,
            scale_probes: if q { 3 } else { 5 },
        }
    }
}

/// cadre's cluster for the run, brought down when dropped.
struct CadreCluster {
    dir: DataDir,
    bin: PathBuf,
}

impl CadreCluster {
    fn start(
        data_dir: &Option<PathBuf>,
        nodes: &[String],
        gpus: u32,
        cpus: u32,
        mem_mib: u64,
    ) -> Result<CadreCluster> {
        let dir = DataDir::new(data_dir)?;
        let toml = cluster_toml(nodes, gpus, cpus, mem_mib);
        let file = dir.path().join("bench-cluster.toml");
        std::fs::write(&file, toml)?;
        let bin = dir.path().join("bin");
        let status = cadre()?
            .arg("install-aliases")
            .arg(&bin)
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("`cadre install-aliases {}` failed", bin.display());
        }
        let status = cadre()?
            .args(["up", "--detach", "--cluster"])
            .arg(&file)
            .arg("--gpus-per-node")
            .arg(gpus.to_string())
            .arg("--data-dir")
            .arg(dir.path())
            .env_remove("CADRE_SERVER")
            .stdout(Stdio::null())
            .status()
            .context("failed to start cadre up")?;
        if !status.success() {
            bail!(
                "`cadre up --detach` failed ({status}); see {}",
                dir.path().join("cadre.log").display()
            );
        }
        Ok(CadreCluster { dir, bin })
    }
}

impl Drop for CadreCluster {
    fn drop(&mut self) {
        if let Ok(mut cmd) = cadre() {
            let _ = cmd
                .args(["down", "--data-dir"])
                .arg(self.dir.path())
                .stdout(Stdio::null())
                .status();
        }
    }
}

/// The feature of the first node, which the scale workload's backlog asks for.
pub const BUSY_FEATURE: &str = "bench_busy";

/// cadre's cluster: the reference's node names, this machine's cores and memory, `gpus`
/// emulated GPUs, the first node with [`BUSY_FEATURE`], one default partition `gpu`.
fn cluster_toml(nodes: &[String], gpus: u32, cpus: u32, mem_mib: u64) -> String {
    let first = nodes.first().map_or("gpu001", String::as_str);
    let mut s = format!(
        "version = 1\nname = \"bench\"\n\n[[shape]]\nname = \"bench\"\ncores = {cpus}\n\
         memory = {mem_mib}\nnuma = 1\ngpus = {gpus}\ngpu_model = \"emulated\"\n\
         gpu_memory = \"80G\"\n\n[[nodes]]\nnames = \"{first}\"\nshape = \"bench\"\n\
         features = [\"{BUSY_FEATURE}\"]\n"
    );
    if nodes.len() > 1 {
        s.push_str(&format!(
            "\n[[nodes]]\nnames = \"{}\"\nshape = \"bench\"\n",
            cadre_core::hostlist::compress(&nodes[1..])
        ));
    }
    s.push_str("\n[[partition]]\nname = \"gpu\"\nnodes = \"ALL\"\ndefault = true\n");
    s
}

pub fn run(args: &VsSlurmArgs) -> Result<ExitCode> {
    let sizes = Sizes::of(args);
    let only = |w: Workload| args.only.is_empty() || args.only.contains(&w);
    // This machine, as cadre's agents see it.
    let found = cadre_agent::discovery::discover(&cadre_agent::discovery::DiscoveryOptions {
        emulate_gpus: args.gpus_per_node.unwrap_or(8),
        ..Default::default()
    })
    .context("failed to discover this machine's hardware")?;
    let machine = found.shape.capacity();
    let machine_cpus = u32::try_from(machine.cpus).unwrap_or(u32::MAX);
    let refr = reference::connect(args.gpus_per_node, machine_cpus)?;
    let nodes = refr.nodes.len() as u32;
    if let Some(want) = args.nodes
        && want != nodes
    {
        bail!(
            "--nodes {want}: the reference Slurm has {nodes} nodes; both systems run the same \
             nodes: restart the reference: {}",
            reference::start_hint(want, refr.gpus_per_node, machine_cpus)
        );
    }
    let cadre_cpus = machine_cpus.min(refr.cpus_per_node).max(1);
    if refr.cpus_per_node % cadre_cpus != 0 {
        bail!(
            "the reference's nodes have {} CPUs, cadre's (this machine's cores) {cadre_cpus}: \
             a job cannot ask both for the same share of a node; {}",
            refr.cpus_per_node,
            reference::start_hint(nodes, refr.gpus_per_node, machine_cpus)
        );
    }
    let slurm_cpus_per_job = refr.cpus_per_node / cadre_cpus;
    let gpus = refr.gpus_per_node;
    let cluster_gpus = u64::from(nodes) * u64::from(gpus);

    // The replay's plan first: a missing trace fails before anything starts.
    let plan = if only(Workload::Replay) {
        Some(workloads::replay_plan(
            &args.trace,
            &sizes,
            gpus,
            cluster_gpus,
        )?)
    } else {
        None
    };

    let work = tempfile::Builder::new()
        .prefix("cadre-vs-slurm")
        .tempdir()?;
    for side in ["cadre", "slurm"] {
        std::fs::create_dir_all(work.path().join(side))?;
    }
    eprintln!(
        "starting cadre: {nodes} nodes x {gpus} emulated GPUs, {cadre_cpus} CPUs each (cadre up)"
    );
    let cluster = CadreCluster::start(
        &args.data_dir,
        &refr.nodes,
        gpus,
        cadre_cpus,
        machine.mem_mib,
    )?;
    let cadre_sys = System::cadre(
        cluster.bin.clone(),
        cluster.dir.path(),
        work.path().join("cadre"),
        1,
    );
    let slurm_sys = System::slurm(
        work.path().join("slurm"),
        slurm_cpus_per_job,
        refr.jobcomp.clone(),
    );
    let systems = [&cadre_sys, &slurm_sys];

    let mut results = Results::default();
    let mut notes = Vec::new();
    if only(Workload::Submit) {
        let (c, s) = (
            workloads::submit(&cadre_sys, &sizes, Some(cluster.dir.path()))?,
            workloads::submit(&slurm_sys, &sizes, None)?,
        );
        notes.push(format!(
            "submit: {} x `sbatch --wrap true` from {} shells on each; cadre also {} API \
             submissions from {} clients",
            sizes.submit_jobs, sizes.submit_shells, sizes.submit_jobs, sizes.submit_shells
        ));
        results.submit = Some(Pair { cadre: c, slurm: s });
    }
    if only(Workload::Latency) {
        let mut figs = Vec::new();
        for sys in systems {
            figs.push(workloads::latency(sys, &sizes)?);
        }
        let s = figs.pop().unwrap_or_default();
        let c = figs.pop().unwrap_or_default();
        notes.push(format!(
            "latency: {} single-GPU jobs one after another, `sbatch` to the job's first \
             instruction",
            sizes.latency_jobs
        ));
        results.latency = Some(Pair { cadre: c, slurm: s });
    }
    if let Some(plan) = &plan {
        let mut figs = Vec::new();
        for sys in systems {
            figs.push(workloads::replay(sys, plan, cluster_gpus)?);
        }
        let s = figs.pop().unwrap_or_default();
        let c = figs.pop().unwrap_or_default();
        notes.push(format!(
            "replay: {} Philly jobs (from job {} of those fitting {cluster_gpus} GPUs; {} \
             multi-node gangs; {} durations cut to 3 h), {:.1} trace hours compressed {:.0}x \
             into {:.0} s of arrivals",
            plan.jobs.len(),
            plan.start,
            plan.gangs,
            plan.capped,
            plan.trace_span_s as f64 / 3600.0,
            plan.factor,
            plan.trace_span_s as f64 / plan.factor
        ));
        results.replay = Some(Pair { cadre: c, slurm: s });
    }
    if only(Workload::Scale) {
        if nodes < 2 {
            bail!("the scale workload needs at least 2 nodes (a busy one and one for the probes)");
        }
        let c = workloads::scale(
            &cadre_sys,
            &sizes,
            gpus,
            Some(cluster.dir.path()),
            &refr.nodes[0],
        )?;
        let s = workloads::scale(&slurm_sys, &sizes, gpus, None, &refr.nodes[0])?;
        notes.push(format!(
            "scale: backlog steps {:?}, median of {} probes per step",
            sizes.scale_steps, sizes.scale_probes
        ));
        results.scale = Some(Pair { cadre: c, slurm: s });
    }
    drop(cluster);

    let header = RunHeader {
        slurm_version: refr.version.clone(),
        nodes,
        gpus_per_node: gpus,
        cadre_cpus_per_node: cadre_cpus,
        slurm_cpus_per_node: refr.cpus_per_node,
        quick: args.quick,
        notes,
    };
    if let Some(path) = &args.save_json {
        std::fs::write(path, report::render_json(&results)? + "\n")
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    if args.json {
        println!("{}", report::render_json(&results)?);
    } else if args.markdown {
        print!("{}", report::render_markdown(&header, &results));
    } else {
        print!("{}", report::render_table(&header, &results));
    }
    Ok(ExitCode::SUCCESS)
}

/// The data directory's socket, for API clients.
fn target_of(dir: &Path) -> cadre_client::Target {
    cadre_client::Target::of_data_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cadre_cluster_names_nodes_as_the_reference_and_marks_the_first_busy() {
        let nodes: Vec<String> = (1..=4).map(|i| format!("gpu{i:03}")).collect();
        let text = cluster_toml(&nodes, 8, 2, 20_000);
        let cluster = cadre_core::config::load_cluster(&text, "bench.toml").unwrap();
        assert_eq!(cluster.nodes.len(), 4);
        assert_eq!(cluster.nodes[0].name, "gpu001");
        assert_eq!(cluster.nodes[0].features, [BUSY_FEATURE]);
        assert!(cluster.nodes[1].features.is_empty());
        assert_eq!(cluster.total_gpus(), 32);
        let cap = cluster.shape(cluster.node_id("gpu004").unwrap()).capacity();
        assert_eq!((cap.cpus, cap.mem_mib), (2, 20_000));
    }

    #[test]
    fn quick_sizes_are_small_and_the_cap_is_the_last_step() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: VsSlurmArgs,
        }
        let full = Sizes::of(&Cli::parse_from(["x"]).args);
        assert_eq!(full.submit_jobs, 5000);
        assert_eq!(full.latency_jobs, 200);
        assert_eq!(full.replay_jobs, 500);
        assert_eq!(full.scale_steps.last(), Some(&32_000));
        let quick = Sizes::of(&Cli::parse_from(["x", "--quick", "--scale-cap", "150"]).args);
        assert_eq!(quick.scale_steps, [0, 100, 150]);
        assert!(quick.submit_jobs <= 400 && quick.replay_jobs <= 40);
    }
}
