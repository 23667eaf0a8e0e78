//! The end of a burst: once work has stopped arriving at a partition, the job that would
//! end its backlog last goes first (the policy's `[backfill] drain_longest_first`).
//!
//! While work keeps arriving, the order of the queue does not decide when the GPUs fall
//! idle: there is always more to run. Once it stops, it does: a job started last ends last,
//! and a long job that the order keeps for the end (the small-work order keeps large work
//! for the end) leaves the GPUs idle around it while it runs alone. So when a partition's
//! arrival rate is low, a pending job whose time limit is at least the time the rest of the
//! backlog needs (the other pending jobs' and the running jobs' remaining work, by time
//! limits, over the capacity the arrivals leave) is marked as a starving job is: considered
//! first in its partition, with a reservation of its own (see `keep_oldest_starving`);
//! of several such jobs, the one with the longest limit.
//! Longest-first at the end of a schedule is the classic rule for finishing it soonest.
//!
//! Work is GPUs times time limit, in GPU thousandths times seconds: a pending job's GPUs
//! are those it asks for, a running job's those it holds (an exclusive job holds every GPU
//! of its nodes, CPU-only or not). Pending CPU-only jobs, pending jobs without a time limit
//! and partitions without GPUs are left alone, and a running job without a limit keeps its
//! partition's backlog from ever looking drained. Capacity is the partition's up nodes';
//! partitions that share nodes are each reckoned as if alone.
//!
//! The rate is an exponential average of the work submitted over [`RATE_WINDOW`], its time
//! limits counted at the share of them that the jobs that ended by themselves ran (users
//! over-estimate; over the whole cluster and the scheduler's life). It is known only a
//! window after the scheduler's first event: a controller that has just restarted does not
//! take its restored queue for the end of a burst (jobs restored are not arrivals).

use crate::cluster::PartitionId;
use crate::time::{Dur, Time};
use std::collections::BTreeMap;

/// How long the arrival rate is averaged over (the time constant of its decay).
pub(super) const RATE_WINDOW: Dur = Dur::days(1);

/// A partition is quiet while work arrives at under this share of its capacity (0.05 and
/// 0.1 were measured; see docs/simulator.md, experiment 7).
pub(super) const QUIET_SHARE: f64 = 0.1;

/// The work submitted to each partition, averaged over [`RATE_WINDOW`].
#[derive(Clone, Debug, Default)]
pub(super) struct Arrivals {
    /// The first event the scheduler saw: before then, arrivals are unknown.
    watched_since: Option<Time>,
    /// Per partition: the decayed sum of the work submitted, as of a time.
    decayed: BTreeMap<PartitionId, (f64, Time)>,
    /// The work of the jobs that ended, by their run times and by their time limits.
    ran: (f64, f64),
}

impl Arrivals {
    /// Notes that the scheduler handles an event at `now`.
    pub(super) fn watch(&mut self, now: Time) {
        self.watched_since.get_or_insert(now);
    }

    /// Counts in a job of `gpu_milli` and `limit` submitted to `partition` at `now`.
    pub(super) fn add(&mut self, partition: PartitionId, gpu_milli: u64, limit: Dur, now: Time) {
        let e = self.decayed.entry(partition).or_insert((0.0, now));
        *e = (
            decay(e.0, e.1, now) + work(gpu_milli, limit) as f64,
            now.max(e.1),
        );
    }

    /// Counts in a job of `gpu_milli` that ended by itself after running `ran` of its
    /// `limit` (over the whole cluster and the scheduler's life).
    pub(super) fn ran(&mut self, gpu_milli: u64, ran: Dur, limit: Dur) {
        self.ran.0 += work(gpu_milli, Dur(ran.0.min(limit.0))) as f64;
        self.ran.1 += work(gpu_milli, limit) as f64;
    }

    /// The work arriving at `partition` per second around `now`, once a whole window has
    /// been watched: by time limits, times the share of their limits that the jobs that
    /// ended ran (users over-estimate; 1 until a job has ended).
    pub(super) fn rate(&self, partition: PartitionId, now: Time) -> Option<f64> {
        let since = self.watched_since?;
        if now.since(since) < RATE_WINDOW {
            return None;
        }
        let (sum, at) = self.decayed.get(&partition).copied().unwrap_or((0.0, now));
        let share = match self.ran {
            (ran, limits) if limits > 0.0 => ran / limits,
            _ => 1.0,
        };
        Some(decay(sum, at, now) / RATE_WINDOW.0 as f64 * share)
    }
}

/// `sum`, as of `at`, decayed to `now`.
fn decay(sum: f64, at: Time, now: Time) -> f64 {
    sum * (-(now.since(at).0 as f64) / RATE_WINDOW.0 as f64).exp()
}

/// The work of a job: its GPUs (in thousandths) times its time limit in seconds, exact
/// (sums of it do not depend on their order); 0 for a job without a time limit, whose end
/// is unknown.
pub(super) fn work(gpu_milli: u64, limit: Dur) -> u128 {
    u128::from(gpu_milli) * u128::from(limit.0)
}

/// What the drain test reads of a quiet partition.
#[derive(Copy, Clone, Debug)]
pub(super) struct Quiet {
    /// The capacity the arrivals leave for the backlog, per second.
    pub(super) spare: f64,
    /// The running jobs' remaining work by their time limits, the GPUs they hold times
    /// what is left (the pass's `running_left`: the kept sums, `backlog::running_left`, or
    /// in the reference scheduler the active jobs added up afresh); a job without a limit
    /// runs for ever: `u128::MAX`, the backlog's end is then unknown, and no job is marked.
    pub(super) running: u128,
    /// The eligible pending jobs' work.
    pub(super) pending: u128,
}

impl Quiet {
    pub(super) fn new(spare: f64) -> Quiet {
        Quiet {
            spare,
            running: 0,
            pending: 0,
        }
    }

    /// Whether a pending job of `own` work and a time limit of `limit` is one the backlog
    /// waits on: the rest of it would drain before the job ends, even started now.
    pub(super) fn ends_backlog(&self, own: u128, limit: Dur) -> bool {
        let rest = self
            .pending
            .saturating_sub(own)
            .saturating_add(self.running);
        own > 0 && limit.0 as f64 * self.spare >= rest as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_unknown_for_a_window_then_decays() {
        let p = PartitionId(0);
        let mut a = Arrivals::default();
        a.watch(Time(0));
        a.add(p, 1000, Dur(86_400), Time(0));
        assert_eq!(a.rate(p, Time(1000)), None, "not yet a window watched");
        let day = a.rate(p, Time(86_400)).unwrap();
        assert!((day - 1000.0 / std::f64::consts::E).abs() < 1e-6, "{day}");
        let two = a.rate(p, Time(2 * 86_400)).unwrap();
        assert!(two < day / 2.0, "{two} decays");
        assert_eq!(a.rate(PartitionId(1), Time(86_400)), Some(0.0));
    }

    #[test]
    fn a_job_ends_the_backlog_when_the_rest_drains_sooner() {
        let long = work(1000, Dur::hours(4));
        // 8 GPUs spare; the rest: an hour of running and an hour of pending work on them.
        let q = Quiet {
            spare: 8000.0,
            running: work(8000, Dur::hours(1)),
            pending: long + work(8000, Dur::hours(1)),
        };
        assert!(q.ends_backlog(long, Dur::hours(4)));
        assert!(!q.ends_backlog(work(1000, Dur::hours(1)), Dur::hours(1)));
        assert!(!q.ends_backlog(0, Dur::hours(4)), "no GPUs, or no limit");
        // What `quiet_partitions` counts for a running job without a limit.
        let forever = Quiet {
            running: u128::MAX,
            ..q
        };
        assert!(
            !forever.ends_backlog(long, Dur::hours(4)),
            "an unlimited job runs"
        );
    }
}
