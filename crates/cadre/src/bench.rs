//! `cadre bench scheduler`: full scheduling passes on a large cluster with a deep queue.
//!
//! The cluster starts half full of running jobs; then `--pending` jobs are queued, and each
//! timed cycle advances the clock by `--interval` seconds, ends the jobs whose (trace)
//! duration has passed, tops the queue back up to `--pending`, and runs one full pass
//! (priority, fair-share, quotas, backfill with reservations, topology-aware placement).
//! Job sizes, durations and accounts are drawn from the Philly trace (shared/traces), with a
//! seeded generator so that runs are repeatable. The first pass after queueing fills the
//! idle half of the cluster; it is reported on its own (`fill_cycle_ms`), and the cycle
//! statistics are over the steady-state cycles after it.

use crate::PolicyArgs;
use anyhow::{Context, Result, bail};
use cadre_core::cluster::Cluster;
use cadre_core::job::{JobId, JobSpec, JobState};
use cadre_core::resources::TaskResources;
use cadre_core::scheduler::{Decision, Event, Scheduler};
use cadre_core::time::{Dur, Time};
use clap::Args;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct SchedulerBenchArgs {
    /// Nodes of the flat cluster.
    #[arg(long, default_value_t = 1024)]
    nodes: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Pending jobs kept in the queue.
    #[arg(long, default_value_t = 10_000)]
    pending: u32,
    /// Timed steady-state cycles.
    #[arg(long, default_value_t = 50)]
    cycles: u32,
    /// Simulated seconds between cycles.
    #[arg(long, default_value_t = 30)]
    interval: u64,
    /// The Philly job list (timestamp,duration,num_gpus,gpu_time,cluster).
    #[arg(
        long,
        env = "CADRE_PHILLY_TRACE",
        default_value = "../shared/traces/philly/philly.csv"
    )]
    trace: PathBuf,
    /// Seed of the job generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

/// One job shape drawn from the trace.
#[derive(Clone, Debug)]
struct Sample {
    gpus: u32,
    duration: u64,
    account: String,
}

fn load_philly(path: &Path, max_gpus: u32) -> Result<Vec<Sample>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "failed to read the Philly trace {} (give its path with --trace)",
            path.display()
        )
    })?;
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        let [_, duration, gpus, _, cluster] = fields[..] else {
            bail!(
                "{}:{}: expected 5 comma-separated fields",
                path.display(),
                i + 1
            );
        };
        let duration: f64 = duration
            .parse()
            .with_context(|| format!("{}:{}: bad duration `{duration}`", path.display(), i + 1))?;
        let gpus: u32 = gpus
            .parse()
            .with_context(|| format!("{}:{}: bad num_gpus `{gpus}`", path.display(), i + 1))?;
        if gpus == 0 || gpus > max_gpus || duration < 1.0 {
            continue;
        }
        samples.push(Sample {
            gpus,
            duration: duration as u64,
            account: cluster.to_string(),
        });
    }
    if samples.is_empty() {
        bail!("{}: no usable jobs", path.display());
    }
    Ok(samples)
}

/// A job spec for a trace sample: whole-node tasks for multi-node jobs.
fn spec_for(s: &Sample, gpus_per_node: u32, user: u32, now: Time) -> JobSpec {
    let g = gpus_per_node.max(1);
    let (tasks, per_task_gpus) = if s.gpus > g {
        (s.gpus.div_ceil(g), g)
    } else {
        (1, s.gpus)
    };
    let per_task = TaskResources {
        cpus: 8 * per_task_gpus,
        mem_mib: 32 * 1024 * u64::from(per_task_gpus),
        gpus: per_task_gpus,
        ..TaskResources::default()
    };
    // Users over-estimate: a limit of 1.5x the run time, in whole minutes.
    let limit = Dur((s.duration * 3 / 2).div_ceil(60).max(1) * 60);
    let mut spec = JobSpec::simple(
        &format!("{}-u{user}", s.account),
        &s.account,
        tasks,
        per_task,
        limit,
    );
    spec.name = format!("philly-{}g", s.gpus);
    spec.submit_time = now;
    if tasks > 1 {
        spec.groups[0].tasks_per_node = Some(1);
    }
    spec
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[derive(Serialize)]
struct Report {
    nodes: u32,
    gpus: u64,
    pending: u32,
    cycles: u32,
    cycle_ms_p50: f64,
    cycle_ms_p99: f64,
    cycle_ms_max: f64,
    fill_cycle_ms: f64,
    fill_cycle_started: usize,
    event_us_p50: f64,
    event_us_p99: f64,
    started: f64,
    running: usize,
    gpu_utilization: f64,
    rss_mib: f64,
    bytes_per_pending_job: f64,
}

/// The bench's world: the scheduler and the jobs' real end times.
struct World {
    sched: Scheduler,
    samples: Vec<Sample>,
    rng: StdRng,
    next_id: u64,
    gpus_per_node: u32,
    /// Running jobs by actual end time.
    ends: BTreeMap<(Time, JobId), ()>,
    durations: BTreeMap<JobId, u64>,
    event_us: Vec<f64>,
}

impl World {
    fn submit(&mut self, now: Time) -> Result<()> {
        let s = self.samples[self.rng.random_range(0..self.samples.len())].clone();
        let user = self.rng.random_range(0..4);
        let id = JobId(self.next_id);
        self.next_id += 1;
        let spec = spec_for(&s, self.gpus_per_node, user, now);
        let t = Instant::now();
        self.sched.handle(
            Event::Submit {
                id,
                spec: Box::new(spec),
            },
            now,
        )?;
        self.event_us.push(t.elapsed().as_secs_f64() * 1e6);
        self.durations.insert(id, s.duration);
        Ok(())
    }

    fn apply(&mut self, decisions: &[Decision], now: Time) -> usize {
        let mut started = 0;
        for d in decisions {
            if let Decision::Start { job, .. } = d {
                started += 1;
                let dur = self.durations.get(job).copied().unwrap_or(60);
                self.ends.insert((now + Dur(dur), *job), ());
            }
        }
        started
    }

    fn end_due(&mut self, now: Time) -> Result<()> {
        while let Some((&(end, id), _)) = self.ends.first_key_value() {
            if end > now {
                break;
            }
            self.ends.pop_first();
            self.durations.remove(&id);
            let t = Instant::now();
            self.sched.handle(
                Event::Ended {
                    id,
                    outcome: JobState::Completed,
                },
                end,
            )?;
            self.event_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(())
    }

    fn allocated_gpus(&self) -> f64 {
        self.sched
            .jobs()
            .filter_map(|j| j.allocation.as_ref())
            .map(|a| a.gpus())
            .sum()
    }
}

pub fn run_scheduler(args: &SchedulerBenchArgs) -> Result<ExitCode> {
    let cluster = Cluster::flat_gpu(args.nodes, args.gpus_per_node);
    let total_gpus = cluster.total_gpus();
    let samples = load_philly(&args.trace, total_gpus.min(u64::from(u32::MAX)) as u32)?;
    let policy = args.policy.load()?;
    let mut world = World {
        sched: Scheduler::new(cluster, policy)?,
        samples,
        rng: StdRng::seed_from_u64(args.seed),
        next_id: 1,
        gpus_per_node: args.gpus_per_node,
        ends: BTreeMap::new(),
        durations: BTreeMap::new(),
        event_us: Vec::new(),
    };
    let mut now = Time(0);

    // Half full of running jobs.
    while world.allocated_gpus() < total_gpus as f64 / 2.0 {
        for _ in 0..16 {
            world.submit(now)?;
        }
        let decisions = world.sched.schedule(now);
        world.apply(&decisions, now);
        if world.sched.pending_count() > 256 {
            break;
        }
    }
    // Whatever did not start while filling stays queued; top the queue up to --pending.
    let rss_before = rss_kib("VmRSS:");
    while (world.sched.pending_count() as u32) < args.pending {
        world.submit(now)?;
    }
    let rss_after = rss_kib("VmRSS:");
    world.event_us.clear();

    now = now + Dur(args.interval);
    let t = Instant::now();
    let decisions = world.sched.schedule(now);
    let fill_cycle_ms = t.elapsed().as_secs_f64() * 1e3;
    let fill_cycle_started = world.apply(&decisions, now);

    let mut cycle_ms = Vec::with_capacity(args.cycles as usize);
    let mut started = 0usize;
    for _ in 0..args.cycles {
        now = now + Dur(args.interval);
        world.end_due(now)?;
        while (world.sched.pending_count() as u32) < args.pending {
            world.submit(now)?;
        }
        let t = Instant::now();
        let decisions = world.sched.schedule(now);
        cycle_ms.push(t.elapsed().as_secs_f64() * 1e3);
        started += world.apply(&decisions, now);
    }
    cycle_ms.sort_by(f64::total_cmp);
    let mut event_us = world.event_us.clone();
    event_us.sort_by(f64::total_cmp);
    let report = Report {
        nodes: args.nodes,
        gpus: total_gpus,
        pending: args.pending,
        cycles: args.cycles,
        cycle_ms_p50: percentile(&cycle_ms, 50.0),
        cycle_ms_p99: percentile(&cycle_ms, 99.0),
        cycle_ms_max: cycle_ms.last().copied().unwrap_or(0.0),
        fill_cycle_ms,
        fill_cycle_started,
        event_us_p50: percentile(&event_us, 50.0),
        event_us_p99: percentile(&event_us, 99.0),
        started: started as f64 / f64::from(args.cycles.max(1)),
        running: world.sched.active_count(),
        gpu_utilization: world.allocated_gpus() / total_gpus.max(1) as f64,
        rss_mib: rss_kib("VmHWM:") as f64 / 1024.0,
        bytes_per_pending_job: rss_after.saturating_sub(rss_before) as f64 * 1024.0
            / f64::from(args.pending.max(1)),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "scheduler bench: {} nodes, {} GPUs, {} pending, {} cycles every {} s",
            report.nodes, report.gpus, report.pending, report.cycles, args.interval
        );
        println!(
            "  cycle ms       p50 {:.2}  p99 {:.2}  max {:.2}",
            report.cycle_ms_p50, report.cycle_ms_p99, report.cycle_ms_max
        );
        println!(
            "  fill cycle ms  {:.2} ({} jobs started)",
            report.fill_cycle_ms, report.fill_cycle_started
        );
        println!(
            "  event us       p50 {:.2}  p99 {:.2}",
            report.event_us_p50, report.event_us_p99
        );
        println!(
            "  started/cycle  {:.1}; running {}; GPU utilization {:.3}",
            report.started, report.running, report.gpu_utilization
        );
        println!(
            "  rss MiB        {:.1}; bytes per pending job {:.0}",
            report.rss_mib, report.bytes_per_pending_job
        );
    }
    Ok(ExitCode::SUCCESS)
}
