//! The `replay` workload's pure parts: which window of the Philly trace, how it is
//! compressed into jobs that `sleep`, the `sbatch` command of each (the same for both
//! systems), and the figures computed from what each system recorded.
//!
//! Given: the trace's jobs in submit order (only those that fit the cluster's GPUs), the
//! window size, the cluster's shape, a target span for the compressed arrivals and a cap on
//! durations. Decided: the window, one compression factor for arrivals and durations alike,
//! and each job's command. Must hold: both systems get the same jobs, at the same compressed
//! arrival times, with the same time limits, accounts and shapes.
//!
//! - The window: of all runs of `size` consecutive jobs, those offering at most the
//!   cluster's GPU capacity (GPU-seconds over GPUs x span, durations capped) are candidates
//!   (all of them if none is); among them the one with the most multi-node gangs, then the
//!   busiest, then the earliest. A window of the trace's busiest hours would keep both
//!   systems queueing for hours; one of idle hours would measure nothing.
//! - Durations are capped at `cap_s` trace seconds before compression, so that a job of
//!   ten days does not make the replay last hours (both systems see the same cap).
//! - The compression factor makes the window's arrival span last `target_span_s`.
//! - A job of more GPUs than a node has asks for ceil(g / G) nodes with ceil(g / nodes)
//!   GPUs on each (a 12-GPU job: 2 nodes x 6 GPUs), one task per node.
//! - Time limits: 1.5x the compressed duration in whole minutes, at least 1 (Slurm's unit).

use super::report::ReplayFigures;
use cadre_sim::report::percentile;

/// Trace duration cap: three hours of trace time.
pub const DURATION_CAP_S: u64 = 3 * 3600;

/// Users over-estimate: limits are this many times the (compressed) run time.
pub const TIME_LIMIT_FACTOR: f64 = 1.5;

/// The bound of the bounded slowdown, in (compressed, wall-clock) seconds.
pub const SLOWDOWN_BOUND_S: f64 = 10.0;

/// One job of the trace as the window selection sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceEntry {
    /// Trace seconds.
    pub submit: u64,
    /// Trace seconds.
    pub duration: u64,
    pub gpus: u32,
    pub account: String,
}

/// One job of the replay, compressed.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayJob {
    /// Position in the window (0-based).
    pub index: usize,
    /// Seconds after the replay starts.
    pub arrival_s: f64,
    pub sleep_s: f64,
    pub time_limit_min: u64,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub account: String,
}

impl ReplayJob {
    pub fn gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// The `sbatch` arguments, the same for both systems; `cpus` per task (see the module
    /// doc of `vs_slurm` on CPUs).
    pub fn sbatch_args(&self, cpus: u32) -> Vec<String> {
        vec![
            "--parsable".into(),
            "-J".into(),
            format!("replay-{}", self.index),
            "-A".into(),
            self.account.clone(),
            "-t".into(),
            self.time_limit_min.to_string(),
            "-N".into(),
            self.nodes.to_string(),
            "--ntasks-per-node=1".into(),
            "-c".into(),
            cpus.to_string(),
            format!("--gres=gpu:{}", self.gpus_per_node),
            "-o".into(),
            "/dev/null".into(),
            "--wrap".into(),
            format!("sleep {:.3}", self.sleep_s),
        ]
    }
}

/// The window and how it was compressed.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayPlan {
    pub jobs: Vec<ReplayJob>,
    /// Index of the window's first job among the trace's jobs that fit.
    pub start: usize,
    /// Trace seconds per replay second.
    pub factor: f64,
    pub trace_span_s: u64,
    /// Jobs whose duration was cut to the cap.
    pub capped: usize,
    /// Jobs of more than one node.
    pub gangs: usize,
    /// GPU-seconds offered over GPUs x span (durations capped).
    pub load: f64,
}

/// The start of the window of `size` jobs (see the module doc).
pub fn select_window(
    jobs: &[TraceEntry],
    size: usize,
    gpus_per_node: u32,
    cluster_gpus: u64,
) -> usize {
    if jobs.len() <= size || size == 0 {
        return 0;
    }
    let n = jobs.len();
    // Prefix sums of gangs and capped GPU-seconds.
    let mut gangs = vec![0usize; n + 1];
    let mut work = vec![0f64; n + 1];
    for (i, j) in jobs.iter().enumerate() {
        gangs[i + 1] = gangs[i] + usize::from(j.gpus > gpus_per_node);
        work[i + 1] = work[i] + j.duration.min(DURATION_CAP_S) as f64 * f64::from(j.gpus);
    }
    let load = |s: usize| {
        let span = jobs[s + size - 1]
            .submit
            .saturating_sub(jobs[s].submit)
            .max(1) as f64;
        (work[s + size] - work[s]) / (cluster_gpus.max(1) as f64 * span)
    };
    let starts = 0..=n - size;
    let any_fit = starts.clone().any(|s| load(s) <= 1.0);
    let mut best: Option<(usize, f64, usize)> = None;
    for s in starts {
        let l = load(s);
        if any_fit && l > 1.0 {
            continue;
        }
        let g = gangs[s + size] - gangs[s];
        // Without a window within capacity, the least loaded one.
        let key_load = if any_fit { l } else { -l };
        let better = match best {
            None => true,
            Some((bg, bl, _)) => g > bg || (g == bg && key_load > bl),
        };
        if better {
            best = Some((g, key_load, s));
        }
    }
    best.map_or(0, |(_, _, s)| s)
}

/// The compressed jobs of the window starting at `start`.
pub fn plan(
    jobs: &[TraceEntry],
    start: usize,
    size: usize,
    gpus_per_node: u32,
    cluster_gpus: u64,
    target_span_s: f64,
) -> ReplayPlan {
    let window = &jobs[start.min(jobs.len())..(start + size).min(jobs.len())];
    let first = window.first().map_or(0, |j| j.submit);
    let span = window.last().map_or(0, |j| j.submit - first);
    let factor = (span as f64 / target_span_s.max(1e-3)).max(1.0);
    let mut capped = 0;
    let mut work = 0.0;
    let out: Vec<ReplayJob> = window
        .iter()
        .enumerate()
        .map(|(index, j)| {
            capped += usize::from(j.duration > DURATION_CAP_S);
            let duration = j.duration.min(DURATION_CAP_S);
            work += duration as f64 * f64::from(j.gpus);
            let sleep_s = (duration as f64 / factor).max(0.001);
            let limit_s = sleep_s * TIME_LIMIT_FACTOR;
            let (nodes, gpus_per_node) = if j.gpus <= gpus_per_node {
                (1, j.gpus)
            } else {
                let nodes = j.gpus.div_ceil(gpus_per_node);
                (nodes, j.gpus.div_ceil(nodes))
            };
            ReplayJob {
                index,
                arrival_s: (j.submit - first) as f64 / factor,
                sleep_s,
                time_limit_min: ((limit_s / 60.0).ceil() as u64).max(1),
                nodes,
                gpus_per_node,
                account: j.account.clone(),
            }
        })
        .collect();
    ReplayPlan {
        gangs: out.iter().filter(|j| j.nodes > 1).count(),
        jobs: out,
        start,
        factor,
        trace_span_s: span,
        capped,
        load: work / (cluster_gpus.max(1) as f64 * span.max(1) as f64),
    }
}

/// What a system recorded of one job's run, in seconds (any origin; only differences are
/// used).
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub submit: f64,
    pub start: f64,
    pub end: f64,
    /// Nodes the run was given.
    pub nodes: u32,
    /// GPUs the run was given, where the system records them.
    pub gpus: Option<f64>,
}

/// The replay's figures from the records, one per job of the plan (`None`: no record).
///
/// - wait: start minus submit, both as the system recorded them;
/// - makespan: first submit to last end;
/// - GPU utilization: GPU-seconds of the runs (GPUs given, else asked) over the cluster's
///   GPUs x makespan; work utilization: the same with the jobs' own `sleep` as the run
///   time;
/// - bounded slowdown: (end - submit) / max(end - start, [`SLOWDOWN_BOUND_S`]), at least 1;
/// - a partial gang start: a run given fewer nodes or GPUs than its job asked.
pub fn figures(
    jobs: &[ReplayJob],
    records: &[Option<RunRecord>],
    cluster_gpus: u64,
) -> ReplayFigures {
    let mut waits = Vec::new();
    let mut slowdowns = Vec::new();
    let mut gpu_seconds = 0.0;
    let mut work = 0.0;
    let mut partial = 0;
    let mut first_submit = f64::INFINITY;
    let mut last_end = f64::NEG_INFINITY;
    let mut missing = 0;
    for (job, rec) in jobs.iter().zip(records) {
        let Some(r) = rec else {
            missing += 1;
            continue;
        };
        let run = (r.end - r.start).max(0.0);
        let wait = (r.start - r.submit).max(0.0);
        waits.push(wait);
        slowdowns.push(((wait + run) / run.max(SLOWDOWN_BOUND_S)).max(1.0));
        let gpus = r.gpus.unwrap_or(f64::from(job.gpus()));
        gpu_seconds += gpus * run;
        work += f64::from(job.gpus()) * job.sleep_s;
        if r.nodes < job.nodes || gpus + 1e-9 < f64::from(job.gpus()) {
            partial += 1;
        }
        first_submit = first_submit.min(r.submit);
        last_end = last_end.max(r.end);
    }
    missing += jobs.len().saturating_sub(records.len());
    let makespan = if last_end >= first_submit {
        last_end - first_submit
    } else {
        0.0
    };
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let mut sorted = waits.clone();
    sorted.sort_by(f64::total_cmp);
    let capacity = cluster_gpus.max(1) as f64 * makespan;
    let share = |x: f64| if capacity > 0.0 { x / capacity } else { 0.0 };
    ReplayFigures {
        gpu_utilization: share(gpu_seconds),
        work_utilization: share(work),
        mean_wait_s: mean(&waits),
        p95_wait_s: percentile(&sorted, 95.0),
        makespan_s: makespan,
        mean_bounded_slowdown: mean(&slowdowns),
        partial_gang_starts: partial,
        jobs: jobs.len(),
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(submit: u64, duration: u64, gpus: u32) -> TraceEntry {
        TraceEntry {
            submit,
            duration,
            gpus,
            account: "vc1".into(),
        }
    }

    #[test]
    fn the_window_has_the_most_gangs_within_capacity() {
        // 16 GPUs. Jobs every 100 s; a gang of 16 at 3 and at 5; a huge load at 8-9.
        let mut jobs: Vec<TraceEntry> = (0..12).map(|i| entry(i * 100, 50, 1)).collect();
        jobs[3].gpus = 16;
        jobs[5].gpus = 16;
        jobs[8].duration = 100_000;
        jobs[8].gpus = 16;
        // Windows of 4: [2..6) and [3..7) hold both gangs; [5..9) and later hold the
        // overload (capped at 3 h: 10,800 s x 16 GPUs over 300 s is far above capacity).
        let s = select_window(&jobs, 4, 8, 16);
        assert!(s == 2 || s == 3, "{s}");
        // Both have 2 gangs and the same load: the earlier one.
        assert_eq!(s, 2);
    }

    #[test]
    fn without_a_window_within_capacity_the_least_loaded_is_chosen() {
        let jobs: Vec<TraceEntry> = (0..6)
            .map(|i| entry(i * 10, if i < 3 { 100_000 } else { 5_000 }, 8))
            .collect();
        assert_eq!(select_window(&jobs, 3, 8, 8), 3);
    }

    #[test]
    fn a_short_trace_is_one_window() {
        let jobs = vec![entry(0, 10, 1), entry(5, 10, 1)];
        assert_eq!(select_window(&jobs, 10, 8, 16), 0);
    }

    #[test]
    fn compression_keeps_arrivals_and_durations_in_proportion() {
        let jobs = vec![
            entry(1000, 600, 1),
            entry(1600, 60_000, 12),
            entry(4600, 3600, 64),
        ];
        let p = plan(&jobs, 0, 3, 8, 128, 60.0);
        // Span 3,600 s in 60 s: a factor of 60.
        assert_eq!(p.factor, 60.0);
        assert_eq!(p.trace_span_s, 3600);
        assert_eq!(p.jobs[1].arrival_s, 10.0);
        assert_eq!(p.jobs[2].arrival_s, 60.0);
        assert_eq!(p.jobs[0].sleep_s, 10.0);
        // 60,000 s is capped at 3 h: 10,800 / 60 = 180 s; limit 270 s = 5 min.
        assert_eq!(p.capped, 1);
        assert_eq!(p.jobs[1].sleep_s, 180.0);
        assert_eq!(p.jobs[1].time_limit_min, 5);
        assert_eq!(p.jobs[0].time_limit_min, 1);
        // 12 GPUs: 2 nodes x 6; 64: 8 x 8.
        assert_eq!((p.jobs[1].nodes, p.jobs[1].gpus_per_node), (2, 6));
        assert_eq!((p.jobs[2].nodes, p.jobs[2].gpus_per_node), (8, 8));
        assert_eq!(p.gangs, 2);
        let args = p.jobs[1].sbatch_args(1).join(" ");
        assert_eq!(
            args,
            "--parsable -J replay-1 -A vc1 -t 5 -N 2 --ntasks-per-node=1 -c 1 --gres=gpu:6 -o /dev/null --wrap sleep 180.000"
        );
    }

    #[test]
    fn compression_never_stretches() {
        let jobs = vec![entry(0, 10, 1), entry(10, 10, 1)];
        assert_eq!(plan(&jobs, 0, 2, 8, 8, 600.0).factor, 1.0);
    }

    fn job(nodes: u32, gpus_per_node: u32) -> ReplayJob {
        ReplayJob {
            index: 0,
            arrival_s: 0.0,
            sleep_s: 1.0,
            time_limit_min: 1,
            nodes,
            gpus_per_node,
            account: "a".into(),
        }
    }

    fn rec(submit: f64, start: f64, end: f64, nodes: u32) -> Option<RunRecord> {
        Some(RunRecord {
            submit,
            start,
            end,
            nodes,
            gpus: None,
        })
    }

    #[test]
    fn figures_from_records() {
        // 16 GPUs; times from 100.
        let jobs = vec![job(1, 8), job(2, 8), job(1, 1)];
        let records = vec![
            rec(100.0, 100.0, 120.0, 1), // wait 0, run 20: slowdown 1
            rec(100.0, 120.0, 140.0, 2), // wait 20, run 20: slowdown 2
            rec(110.0, 115.0, 117.0, 1), // wait 5, run 2: 7 / 10 -> 1
        ];
        let f = figures(&jobs, &records, 16);
        assert_eq!(f.makespan_s, 40.0);
        // 8x20 + 16x20 + 1x2 = 482 GPU-s over 16 x 40.
        assert!((f.gpu_utilization - 482.0 / 640.0).abs() < 1e-9);
        // Each job sleeps 1 s: 8 + 16 + 1 GPU-s of work.
        assert!((f.work_utilization - 25.0 / 640.0).abs() < 1e-9);
        assert!((f.mean_wait_s - 25.0 / 3.0).abs() < 1e-9);
        assert_eq!(f.p95_wait_s, 20.0);
        assert!((f.mean_bounded_slowdown - 4.0 / 3.0).abs() < 1e-9);
        assert_eq!(f.partial_gang_starts, 0);
        assert_eq!(f.missing, 0);
    }

    #[test]
    fn a_gang_given_fewer_nodes_or_gpus_is_a_partial_start_and_a_missing_record_counts() {
        let jobs = vec![job(2, 8), job(1, 4), job(1, 1)];
        let mut short_of_gpus = rec(0.0, 0.0, 10.0, 1);
        if let Some(r) = short_of_gpus.as_mut() {
            r.gpus = Some(2.0);
        }
        let records = vec![rec(0.0, 1.0, 10.0, 1), short_of_gpus, None];
        let f = figures(&jobs, &records, 16);
        assert_eq!(f.partial_gang_starts, 2);
        assert_eq!(f.missing, 1);
        assert_eq!(f.jobs, 3);
    }

    #[test]
    fn no_records_no_figures() {
        let f = figures(&[job(1, 1)], &[None], 8);
        assert_eq!(f.makespan_s, 0.0);
        assert_eq!(f.gpu_utilization, 0.0);
        assert_eq!(f.missing, 1);
    }
}
