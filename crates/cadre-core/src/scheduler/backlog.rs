//! How deep each partition's backlog is, for the policy's `[priority] largest_first_within`:
//! its outstanding work by time limits (the pending jobs' GPUs times their limits, the
//! running jobs' GPUs times what is left of theirs) over the GPUs of its up nodes, that is
//! how long those GPUs would take to run what is queued and running were every job to use
//! its whole limit.
//!
//! Both sums are kept up to date as jobs enter and leave the queue, start and end, so that
//! a pass reads them in time proportional to the partitions, not to the jobs. Work is in
//! GPU thousandths times seconds, exact (a sum does not depend on the order of its terms,
//! and taking a job out undoes adding it). Jobs without GPUs are left out; a job without a
//! time limit, pending or running, leaves its partition's backlog unknown.

use crate::cluster::PartitionId;
use crate::time::{Dur, Time};

/// The pending jobs' work per partition (held jobs are not counted by the caller).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PendingWork {
    parts: Vec<Pending>,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct Pending {
    work: u128,
    /// Jobs without a time limit.
    unlimited: u64,
}

/// The running jobs' remaining work per partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct RunningWork {
    parts: Vec<Running>,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct Running {
    /// The jobs' GPU thousandths times their ends (seconds since the epoch), and their GPU
    /// thousandths: what is left of their work at `now` is `ends - now * gpus`.
    ends: u128,
    gpus: u128,
    /// Jobs without a time limit.
    unlimited: u64,
}

/// The entry of partition `p`, the vector grown to hold it.
fn part<T: Default>(parts: &mut Vec<T>, p: PartitionId) -> &mut T {
    let i = usize::from(p.0);
    if parts.len() <= i {
        parts.resize_with(i + 1, T::default);
    }
    &mut parts[i]
}

/// `sum` with `term` taken out: exact for a term added before (a shortfall would be a
/// bookkeeping error, which the scheduler's invariant check reports).
fn take(sum: &mut u128, term: u128) {
    debug_assert!(*sum >= term, "taking {term} out of {sum}");
    *sum = sum.saturating_sub(term);
}

impl PendingWork {
    /// Counts in (`add`) or out a pending job of `gpu_milli` with time limit `limit`
    /// (`Dur(0)`: none).
    pub(super) fn count(&mut self, p: PartitionId, gpu_milli: u64, limit: Dur, add: bool) {
        if gpu_milli == 0 {
            return;
        }
        let e = part(&mut self.parts, p);
        match (limit, add) {
            (Dur(0), true) => e.unlimited += 1,
            (Dur(0), false) => e.unlimited = e.unlimited.saturating_sub(1),
            (limit, true) => e.work += u128::from(gpu_milli) * u128::from(limit.0),
            (limit, false) => take(&mut e.work, u128::from(gpu_milli) * u128::from(limit.0)),
        }
    }

    /// Forgets every job.
    pub(super) fn clear(&mut self) {
        self.parts.clear();
    }

    /// Whether it counts the same jobs as `other` (trailing empty partitions aside).
    pub(super) fn same_as(&self, other: &PendingWork) -> bool {
        let n = self.parts.len().max(other.parts.len());
        let at = |v: &Vec<Pending>, i: usize| v.get(i).copied().unwrap_or_default();
        (0..n).all(|i| at(&self.parts, i) == at(&other.parts, i))
    }
}

impl RunningWork {
    /// Counts in (`add`) or out a running job of `gpu_milli` that ends by `end`
    /// ([`Time::NEVER`]: it has no time limit).
    pub(super) fn count(&mut self, p: PartitionId, gpu_milli: u64, end: Time, add: bool) {
        if gpu_milli == 0 {
            return;
        }
        let e = part(&mut self.parts, p);
        let gpus = u128::from(gpu_milli);
        match (end == Time::NEVER, add) {
            (true, true) => e.unlimited += 1,
            (true, false) => e.unlimited = e.unlimited.saturating_sub(1),
            (false, true) => {
                e.ends += gpus * u128::from(end.0);
                e.gpus += gpus;
            }
            (false, false) => {
                take(&mut e.ends, gpus * u128::from(end.0));
                take(&mut e.gpus, gpus);
            }
        }
    }

    /// Whether it counts the same jobs as `other` (trailing empty partitions aside).
    pub(super) fn same_as(&self, other: &RunningWork) -> bool {
        let n = self.parts.len().max(other.parts.len());
        let at = |v: &Vec<Running>, i: usize| v.get(i).copied().unwrap_or_default();
        (0..n).all(|i| at(&self.parts, i) == at(&other.parts, i))
    }
}

/// Whether partition `p`'s backlog, `pending` and `running` as of `now`, would drain within
/// `horizon` on `capacity` GPU thousandths: never when it has no GPUs or a job without a
/// time limit. A running job past its limit and not yet ended (for the moment its end
/// takes) takes its overrun off the others' work, never the sum below zero.
pub(super) fn drains_within(
    pending: &PendingWork,
    running: &RunningWork,
    p: PartitionId,
    capacity: u64,
    now: Time,
    horizon: Dur,
) -> bool {
    let i = usize::from(p.0);
    let pend = pending.parts.get(i).copied().unwrap_or_default();
    let run = running.parts.get(i).copied().unwrap_or_default();
    if capacity == 0 || pend.unlimited > 0 || run.unlimited > 0 {
        return false;
    }
    let left = run.ends.saturating_sub(u128::from(now.0) * run.gpus);
    let work = pend.work.saturating_add(left);
    work <= u128::from(capacity) * u128::from(horizon.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId(0);
    const Q: PartitionId = PartitionId(1);

    #[test]
    fn a_backlog_drains_within_its_work_over_the_capacity() {
        let mut pending = PendingWork::default();
        let mut running = RunningWork::default();
        // 8 GPUs: 4 running for 10 more hours, 8 pending for 5 hours: 10 hours of work.
        running.count(P, 4000, Time(3600 + 36_000), true);
        pending.count(P, 8000, Dur::hours(5), true);
        let now = Time(3600);
        let within = |h: u64| drains_within(&pending, &running, P, 8000, now, Dur::hours(h));
        assert!(within(10) && !within(9), "exactly 10 hours");
        // Later, the running job has less left.
        assert!(drains_within(
            &pending,
            &running,
            P,
            8000,
            Time(3600 + 7200),
            Dur::hours(9)
        ));
        // Another partition is unaffected, and empty: within any horizon.
        assert!(drains_within(&pending, &running, Q, 8000, now, Dur(1)));
        assert!(
            !drains_within(&pending, &running, Q, 0, now, Dur::hours(1)),
            "no GPUs"
        );
    }

    #[test]
    fn counting_out_undoes_counting_in() {
        let mut pending = PendingWork::default();
        let mut running = RunningWork::default();
        pending.count(Q, 2500, Dur(600), true);
        running.count(Q, 1000, Time(5000), true);
        pending.count(Q, 2500, Dur(600), false);
        running.count(Q, 1000, Time(5000), false);
        assert!(pending.same_as(&PendingWork::default()));
        assert!(running.same_as(&RunningWork::default()));
        // CPU-only jobs are not counted at all.
        pending.count(P, 0, Dur(0), true);
        assert!(pending.same_as(&PendingWork::default()));
    }

    #[test]
    fn a_job_without_a_limit_leaves_the_backlog_unknown() {
        let mut pending = PendingWork::default();
        let mut running = RunningWork::default();
        pending.count(P, 1000, Dur(0), true);
        assert!(!drains_within(
            &pending,
            &running,
            P,
            8000,
            Time(0),
            Dur::days(365)
        ));
        pending.count(P, 1000, Dur(0), false);
        running.count(P, 1000, Time::NEVER, true);
        assert!(!drains_within(
            &pending,
            &running,
            P,
            8000,
            Time(0),
            Dur::days(365)
        ));
        running.count(P, 1000, Time::NEVER, false);
        assert!(drains_within(&pending, &running, P, 8000, Time(0), Dur(0)));
    }

    #[test]
    fn a_running_job_past_its_limit_leaves_no_negative_work() {
        let mut running = RunningWork::default();
        running.count(P, 8000, Time(100), true);
        let pending = PendingWork::default();
        assert!(drains_within(
            &pending,
            &running,
            P,
            8000,
            Time(500),
            Dur(0)
        ));
    }
}
