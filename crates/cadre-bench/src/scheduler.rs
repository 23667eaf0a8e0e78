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
//!
//! Each pass is timed twice: by the wall clock, and by the CPU time of the thread that runs
//! it (`CLOCK_THREAD_CPUTIME_ID`). On a shared machine the wall clock also counts the time
//! the thread waited for a core; the CPU time does not, and is the figure to compare builds
//! with when the machine is noisy.

use anyhow::{Context, Result, bail};
use cadre_cli::PolicyArgs;
use cadre_core::cluster::Cluster;
use cadre_core::job::{JobId, JobState};
use cadre_core::scheduler::{Decision, Event, Scheduler};
use cadre_core::time::{Dur, Time};
use cadre_sim::report::percentile;
use cadre_sim::trace::{self, ImportOptions, TraceFormat, TraceJob};
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

/// The Philly jobs that fit the cluster, as the simulator's importer makes them (multi-node
/// gangs of whole-node tasks); users over-estimate, with limits of 1.5x the run time.
fn load_philly(path: &Path, gpus_per_node: u32, cluster_gpus: u64) -> Result<Vec<TraceJob>> {
    let opts = ImportOptions {
        gpus_per_node,
        time_limit_factor: 1.5,
    };
    let mut jobs =
        trace::import_file(path, Some(TraceFormat::Philly), &opts).with_context(|| {
            format!(
                "reading the Philly trace {} (give its path with --trace)",
                path.display()
            )
        })?;
    jobs.retain(|j| j.spec.amounts().gpus_ceil() <= cluster_gpus);
    if jobs.is_empty() {
        bail!("{}: no job fits the cluster", path.display());
    }
    Ok(jobs)
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

#[derive(Serialize)]
struct Report {
    nodes: u32,
    gpus: u64,
    pending: u32,
    cycles: u32,
    cycle_ms_p50: f64,
    cycle_ms_p99: f64,
    cycle_ms_max: f64,
    cycle_cpu_ms_p50: f64,
    cycle_cpu_ms_p99: f64,
    fill_cycle_ms: f64,
    fill_cycle_cpu_ms: f64,
    fill_cycle_started: usize,
    event_us_p50: f64,
    event_us_p99: f64,
    started: f64,
    running: usize,
    gpu_utilization: f64,
    rss_mib: f64,
    bytes_per_pending_job: f64,
}

/// The CPU time this thread has used, in milliseconds.
fn thread_cpu_ms() -> f64 {
    use nix::time::{ClockId, clock_gettime};
    // Linux always has this clock; were it missing, every CPU figure would read 0.
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 * 1e3 + t.tv_nsec() as f64 / 1e6)
        .unwrap_or(0.0)
}

/// Runs one pass; returns its decisions, wall-clock and thread-CPU milliseconds.
fn timed_pass(sched: &mut Scheduler, now: Time) -> (Vec<Decision>, f64, f64) {
    let (t, cpu) = (Instant::now(), thread_cpu_ms());
    let decisions = sched.schedule(now);
    let cpu_ms = thread_cpu_ms() - cpu;
    (decisions, t.elapsed().as_secs_f64() * 1e3, cpu_ms)
}

/// The bench's world: the scheduler and the jobs' real end times.
struct World {
    sched: Scheduler,
    samples: Vec<TraceJob>,
    rng: StdRng,
    next_id: u64,
    /// Running jobs by actual end time.
    ends: BTreeMap<(Time, JobId), ()>,
    durations: BTreeMap<JobId, u64>,
    event_us: Vec<f64>,
}

impl World {
    fn submit(&mut self, now: Time) -> Result<()> {
        let s = &self.samples[self.rng.random_range(0..self.samples.len())];
        let (mut spec, duration) = (s.spec.clone(), s.duration);
        // Four users per account, so that fair-share ranks users as well as accounts.
        spec.user = format!("{}-u{}", spec.account, self.rng.random_range(0..4));
        spec.submit_time = now;
        let id = JobId(self.next_id);
        self.next_id += 1;
        let t = Instant::now();
        self.sched.handle(
            Event::Submit {
                id,
                spec: Box::new(spec),
            },
            now,
        )?;
        self.event_us.push(t.elapsed().as_secs_f64() * 1e6);
        self.durations.insert(id, duration.0);
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
    let samples = load_philly(&args.trace, args.gpus_per_node, total_gpus)?;
    let policy = args.policy.load()?;
    let mut world = World {
        sched: Scheduler::new(cluster, policy)?,
        samples,
        rng: StdRng::seed_from_u64(args.seed),
        next_id: 1,
        ends: BTreeMap::new(),
        durations: BTreeMap::new(),
        event_us: Vec::new(),
    };
    let mut now = Time(0);

    // Half full of running jobs (counted as they start: nothing ends meanwhile, and summing
    // every job's allocation at each round made this quadratic in the jobs).
    let mut allocated = 0.0;
    while allocated < total_gpus as f64 / 2.0 {
        for _ in 0..16 {
            world.submit(now)?;
        }
        let decisions = world.sched.schedule(now);
        world.apply(&decisions, now);
        allocated += decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Start { allocation, .. } => Some(allocation.gpus()),
                _ => None,
            })
            .sum::<f64>();
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
    let (decisions, fill_cycle_ms, fill_cycle_cpu_ms) = timed_pass(&mut world.sched, now);
    let fill_cycle_started = world.apply(&decisions, now);

    let mut cycle_ms = Vec::with_capacity(args.cycles as usize);
    let mut cycle_cpu_ms = Vec::with_capacity(args.cycles as usize);
    let mut started = 0usize;
    for _ in 0..args.cycles {
        now = now + Dur(args.interval);
        world.end_due(now)?;
        while (world.sched.pending_count() as u32) < args.pending {
            world.submit(now)?;
        }
        let (decisions, wall, cpu) = timed_pass(&mut world.sched, now);
        cycle_ms.push(wall);
        cycle_cpu_ms.push(cpu);
        started += world.apply(&decisions, now);
    }
    cycle_ms.sort_by(f64::total_cmp);
    cycle_cpu_ms.sort_by(f64::total_cmp);
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
        cycle_cpu_ms_p50: percentile(&cycle_cpu_ms, 50.0),
        cycle_cpu_ms_p99: percentile(&cycle_cpu_ms, 99.0),
        fill_cycle_ms,
        fill_cycle_cpu_ms,
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
            "  cycle CPU ms   p50 {:.2}  p99 {:.2}  (this thread's CPU time)",
            report.cycle_cpu_ms_p50, report.cycle_cpu_ms_p99
        );
        println!(
            "  fill cycle ms  {:.2}, CPU {:.2} ({} jobs started)",
            report.fill_cycle_ms, report.fill_cycle_cpu_ms, report.fill_cycle_started
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
