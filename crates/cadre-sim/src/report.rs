//! What a replay measured: the report (JSON with stable keys, documented in
//! docs/sim-report.md) and the recorder that builds it as the replay runs.
//!
//! Definitions:
//! - wait: first start minus submit; jct: final end minus submit (ended jobs only);
//! - bounded slowdown: jct / max(run time, 10 s), at least 1;
//! - GPU utilization: allocated GPU-seconds over (cluster GPUs x makespan), makespan from
//!   the first submit to the last end; the backlogged variant counts only the time when at
//!   least one arrived job had not started yet;
//! - fragmentation: over the time when the highest-priority pending job was held back for
//!   want of resources, the mean number of GPUs that were free all the same;
//! - makespan lower bound: the larger of total GPU work over cluster GPUs and the longest
//!   job.

use crate::trace::TraceJob;
use cadre_core::cluster::Cluster;
use cadre_core::job::JobState;
use cadre_core::scheduler::{Decision, Scheduler};
use cadre_core::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Points kept for the time series (downsampled evenly by time).
const MAX_SERIES_POINTS: usize = 2000;

/// The report of one replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The policy's name (preset or file).
    pub policy: String,
    /// GPUs of the simulated cluster.
    pub gpus: u64,
    pub jobs: usize,
    /// Jobs that started at least once.
    pub started_jobs: usize,
    /// Jobs that never started (they never fit, or waited on a dependency that failed).
    pub never_started: usize,
    pub makespan_s: f64,
    pub makespan_lower_bound_s: f64,
    pub gpu_utilization: f64,
    pub gpu_utilization_backlogged: f64,
    pub mean_wait_s: f64,
    pub p50_wait_s: f64,
    pub p95_wait_s: f64,
    pub p99_wait_s: f64,
    pub max_wait_s: f64,
    pub mean_jct_s: f64,
    pub mean_bounded_slowdown: f64,
    /// Starts that placed fewer tasks of some group than its minimum: always 0.
    pub partial_gang_starts: usize,
    pub preemptions: usize,
    pub requeues: usize,
    pub timeouts: usize,
    pub accounts: Vec<AccountShare>,
    pub fragmentation: Fragmentation,
    pub cycles: CycleStats,
    pub sim_wall_s: f64,
    /// Allocated GPUs and queued jobs over time, downsampled.
    pub series: Vec<SeriesPoint>,
    /// Every started job's wait, sorted (for CDF plots).
    #[serde(skip)]
    pub waits: Vec<f64>,
    /// What happened to each replayed job, in the order of [`JobOutcome::index`] (when the
    /// replay was asked to keep it: [`crate::engine::SimOptions::outcomes`]).
    #[serde(skip)]
    pub outcomes: Vec<JobOutcome>,
}

/// What happened to one job of a replay (`cadre sim --jobs`). Times are seconds from the
/// start of the replay (the trace's, or the window's); a job that never started has no
/// start, wait or end.
#[derive(Clone, Debug, PartialEq)]
pub struct JobOutcome {
    /// The job's place among the replayed jobs, from 0: the trace's jobs in submit
    /// order (within the window, if any).
    pub index: usize,
    pub account: String,
    pub user: String,
    pub gpus: f64,
    pub submit_s: u64,
    pub duration_s: u64,
    pub time_limit_s: u64,
    /// Its first start, and its wait until then.
    pub start_s: Option<u64>,
    pub wait_s: Option<u64>,
    /// Its last start (after a requeue or a preemption, later than the first) and end.
    pub last_start_s: Option<u64>,
    pub end_s: Option<u64>,
    pub state: Option<JobState>,
}

/// One account's GPU time against its entitlement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountShare {
    pub account: String,
    pub gpu_hours: f64,
    /// Share of all GPU time used.
    pub share: f64,
    /// Normalised fair-share shares of the account.
    pub entitlement: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fragmentation {
    /// Simulated seconds during which the head job waited for resources.
    pub blocked_s: f64,
    /// Mean GPUs free during that time.
    pub mean_free_gpus_while_blocked: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CycleStats {
    pub count: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub t: u64,
    pub allocated_gpus: f64,
    pub queued: usize,
}

/// Per trace job, what happened to it.
#[derive(Clone, Debug, Default)]
struct JobRecord {
    arrived: Option<Time>,
    first_start: Option<Time>,
    last_start: Option<Time>,
    end: Option<Time>,
    state: Option<JobState>,
}

/// Builds the report while a replay runs.
pub struct Recorder<'a> {
    jobs: &'a [TraceJob],
    records: Vec<JobRecord>,
    capacity_gpus: f64,
    now: Time,
    first_submit: Option<Time>,
    allocated_gpus: f64,
    queued: usize,
    gpu_seconds: f64,
    backlog_gpu_seconds: f64,
    backlog_seconds: f64,
    blocked: bool,
    blocked_seconds: f64,
    blocked_free_gpu_seconds: f64,
    partial_gang_starts: usize,
    preemptions: usize,
    requeues: usize,
    account_gpu_seconds: BTreeMap<String, f64>,
    cycle_ms: Vec<f64>,
    series: Vec<SeriesPoint>,
}

impl<'a> Recorder<'a> {
    pub fn new(cluster: &Cluster, jobs: &'a [TraceJob]) -> Recorder<'a> {
        Recorder {
            jobs,
            records: vec![JobRecord::default(); jobs.len()],
            capacity_gpus: cluster.total_gpus() as f64,
            now: Time(0),
            first_submit: None,
            allocated_gpus: 0.0,
            queued: 0,
            gpu_seconds: 0.0,
            backlog_gpu_seconds: 0.0,
            backlog_seconds: 0.0,
            blocked: false,
            blocked_seconds: 0.0,
            blocked_free_gpu_seconds: 0.0,
            partial_gang_starts: 0,
            preemptions: 0,
            requeues: 0,
            account_gpu_seconds: BTreeMap::new(),
            cycle_ms: Vec::new(),
            series: Vec::new(),
        }
    }

    pub fn now(&self) -> Time {
        self.now
    }

    /// Moves the clock, integrating what was allocated since the last move.
    pub fn advance(&mut self, to: Time) {
        if to <= self.now {
            return;
        }
        let dt = to.since(self.now).0 as f64;
        self.gpu_seconds += self.allocated_gpus * dt;
        if self.queued > 0 {
            self.backlog_seconds += dt;
            self.backlog_gpu_seconds += self.allocated_gpus * dt;
        }
        if self.blocked {
            self.blocked_seconds += dt;
            self.blocked_free_gpu_seconds +=
                (self.capacity_gpus - self.allocated_gpus).max(0.0) * dt;
        }
        self.now = to;
    }

    pub fn arrived(&mut self, index: usize, at: Time) {
        self.first_submit.get_or_insert(at);
        self.records[index].arrived = Some(at);
        self.queued += 1;
    }

    /// Records a pass and its decisions.
    pub fn pass(&mut self, sched: &Scheduler, at: Time, cycle: Duration, decisions: &[Decision]) {
        self.advance(at);
        self.cycle_ms.push(cycle.as_secs_f64() * 1e3);
        for d in decisions {
            match d {
                Decision::Start { job, allocation } => {
                    let index = (job.0 - 1) as usize;
                    let spec = &self.jobs[index].spec;
                    let partial = spec.groups.iter().enumerate().any(|(gi, g)| {
                        let n = allocation
                            .tasks
                            .iter()
                            .filter(|t| usize::from(t.group) == gi)
                            .count() as u32;
                        n < g.min_tasks() || n > g.count
                    });
                    self.partial_gang_starts += usize::from(partial);
                    let r = &mut self.records[index];
                    r.first_start.get_or_insert(at);
                    r.last_start = Some(at);
                    self.allocated_gpus += allocation.gpus();
                    self.queued = self.queued.saturating_sub(1);
                }
                Decision::Preempt { .. } => self.preemptions += 1,
                Decision::Stop { .. } | Decision::Reserve(_) => {}
            }
        }
        self.blocked = sched.head_blocked();
        self.sample();
    }

    fn sample(&mut self) {
        let point = SeriesPoint {
            t: self.now.0,
            allocated_gpus: self.allocated_gpus,
            queued: self.queued,
        };
        if self.series.last().is_some_and(|p| p.t == point.t) {
            if let Some(last) = self.series.last_mut() {
                *last = point;
            }
        } else {
            self.series.push(point);
        }
    }

    fn release(&mut self, index: usize, at: Time, gpus: f64) {
        self.advance(at);
        self.allocated_gpus = (self.allocated_gpus - gpus).max(0.0);
        if let Some(start) = self.records[index].last_start {
            let account = &self.jobs[index].spec.account;
            *self
                .account_gpu_seconds
                .entry(account.clone())
                .or_insert(0.0) += gpus * at.since(start).0 as f64;
        }
    }

    /// A running job went back to the queue.
    pub fn requeued(&mut self, index: usize, at: Time, gpus: f64) {
        self.release(index, at, gpus);
        self.requeues += 1;
        self.queued += 1;
    }

    /// A job ended for good.
    pub fn ended(&mut self, index: usize, at: Time, state: JobState, gpus: f64) {
        self.release(index, at, gpus);
        let r = &mut self.records[index];
        r.end = Some(at);
        r.state = Some(state);
        self.sample();
    }

    /// The report, once the replay is over; with `outcomes`, what happened to every job.
    pub fn finish(mut self, sched: &Scheduler, sim_wall_s: f64, outcomes: bool) -> Report {
        let first = self.first_submit.unwrap_or_default();
        let last_end = self
            .records
            .iter()
            .filter_map(|r| r.end)
            .max()
            .unwrap_or(first);
        let makespan = last_end.since(first).0 as f64;
        let mut waits: Vec<f64> = self
            .records
            .iter()
            .filter_map(|r| Some(r.first_start?.since(r.arrived?).0 as f64))
            .collect();
        waits.sort_by(f64::total_cmp);
        let (mut jct_sum, mut bsd_sum, mut ended) = (0.0, 0.0, 0usize);
        for (r, j) in self.records.iter().zip(self.jobs) {
            if let (Some(end), Some(arrived)) = (r.end, r.arrived) {
                let jct = end.since(arrived).0 as f64;
                jct_sum += jct;
                bsd_sum += (jct / (j.duration.0 as f64).max(10.0)).max(1.0);
                ended += 1;
            }
        }
        let work: f64 = self
            .jobs
            .iter()
            .map(|j| j.duration.0 as f64 * j.spec.amounts().gpu_milli as f64 / 1000.0)
            .sum();
        let longest = self.jobs.iter().map(|j| j.duration.0).max().unwrap_or(0) as f64;
        let total_gpu_s: f64 = self.account_gpu_seconds.values().sum();
        let entitlement = entitlements(sched);
        let accounts = self
            .account_gpu_seconds
            .iter()
            .map(|(account, s)| AccountShare {
                account: account.clone(),
                gpu_hours: s / 3600.0,
                share: if total_gpu_s > 0.0 {
                    s / total_gpu_s
                } else {
                    0.0
                },
                entitlement: entitlement.get(account).copied().unwrap_or(0.0),
            })
            .collect();
        let mut cycles = self.cycle_ms.clone();
        cycles.sort_by(f64::total_cmp);
        let mean = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let series = downsample(std::mem::take(&mut self.series));
        let outcomes = (self.records.iter().zip(self.jobs).enumerate())
            .filter(|_| outcomes)
            .map(|(index, (r, j))| JobOutcome {
                index,
                account: j.spec.account.clone(),
                user: j.spec.user.clone(),
                gpus: j.spec.amounts().gpu_milli as f64 / 1000.0,
                submit_s: j.submit.0,
                duration_s: j.duration.0,
                time_limit_s: j.spec.time_limit.0,
                start_s: r.first_start.map(|t| t.0),
                wait_s: r.first_start.zip(r.arrived).map(|(s, a)| s.since(a).0),
                last_start_s: r.last_start.map(|t| t.0),
                end_s: r.end.map(|t| t.0),
                state: r.state,
            })
            .collect();
        Report {
            policy: String::new(),
            gpus: self.capacity_gpus as u64,
            jobs: self.jobs.len(),
            started_jobs: self
                .records
                .iter()
                .filter(|r| r.first_start.is_some())
                .count(),
            never_started: self
                .records
                .iter()
                .filter(|r| r.first_start.is_none())
                .count(),
            makespan_s: makespan,
            makespan_lower_bound_s: (work / self.capacity_gpus.max(1.0)).max(longest),
            gpu_utilization: ratio(self.gpu_seconds, self.capacity_gpus * makespan),
            gpu_utilization_backlogged: ratio(
                self.backlog_gpu_seconds,
                self.capacity_gpus * self.backlog_seconds,
            ),
            mean_wait_s: mean(&waits),
            p50_wait_s: percentile(&waits, 50.0),
            p95_wait_s: percentile(&waits, 95.0),
            p99_wait_s: percentile(&waits, 99.0),
            max_wait_s: waits.last().copied().unwrap_or(0.0),
            mean_jct_s: ratio(jct_sum, ended as f64),
            mean_bounded_slowdown: ratio(bsd_sum, ended as f64),
            partial_gang_starts: self.partial_gang_starts,
            preemptions: self.preemptions,
            requeues: self.requeues,
            timeouts: self
                .records
                .iter()
                .filter(|r| r.state == Some(JobState::Timeout))
                .count(),
            accounts,
            fragmentation: Fragmentation {
                blocked_s: self.blocked_seconds,
                mean_free_gpus_while_blocked: ratio(
                    self.blocked_free_gpu_seconds,
                    self.blocked_seconds,
                ),
            },
            cycles: CycleStats {
                count: cycles.len(),
                mean_ms: mean(&cycles),
                p50_ms: percentile(&cycles, 50.0),
                p99_ms: percentile(&cycles, 99.0),
                max_ms: cycles.last().copied().unwrap_or(0.0),
            },
            sim_wall_s,
            series,
            waits,
            outcomes,
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The value at percentile `p` of sorted values (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Normalised shares of the accounts, from the scheduler's fair-share tree.
fn entitlements(sched: &Scheduler) -> BTreeMap<String, f64> {
    sched
        .fairshare()
        .rows(cadre_core::fairshare::FairShareAlgorithm::FairTree)
        .into_iter()
        .filter(|r| r.user.is_none())
        .map(|r| (r.account, r.norm_shares))
        .collect()
}

fn downsample(series: Vec<SeriesPoint>) -> Vec<SeriesPoint> {
    if series.len() <= MAX_SERIES_POINTS {
        return series;
    }
    let step = series.len().div_ceil(MAX_SERIES_POINTS);
    series.into_iter().step_by(step).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
    }
}
