//! How deep each partition's backlog is, for the policy's `[priority] largest_first_within`:
//! its outstanding work by time limits (the pending jobs' GPUs times their limits, the
//! running jobs' GPUs times what is left of theirs) over the GPUs of its up nodes, that is
//! how long those GPUs would take to run what is queued and running were every job to use
//! its whole limit.
//!
//! Both sums are kept up to date as jobs enter and leave the queue, start and end, so that
//! a pass reads them in time proportional to the partitions, not to the jobs. Work is in
//! GPU thousandths times seconds, exact (a sum does not depend on the order of its terms,
//! and taking a job out undoes adding it). Jobs that want or hold no GPUs are left out; a
//! job without a time limit, pending or running, leaves its partition's backlog unknown. A
//! job counts in its own partition only: partitions that share nodes are each reckoned as
//! if alone.
//!
//! The pending work is also kept by the width of the jobs (the GPU thousandths each asks
//! for), for the policy's `[priority] largest_first_gaps_percent` ([`gaps_unfilled`]): a
//! queue holds a handful of distinct widths, so a pass weighs the gaps in time
//! proportional to them.

use super::tail::work;
use crate::cluster::PartitionId;
use crate::time::{Dur, Time};
use std::collections::BTreeMap;

/// Why a partition's job-size factor favours larger jobs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LargestFirst {
    /// Its backlog drains within the policy's `largest_first_within`.
    Shallow,
    /// The small work left could not fill around its gangs (the policy's
    /// `largest_first_gaps_percent`).
    Gaps,
}

/// The pending jobs' work per partition (held jobs are not counted by the caller).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PendingWork {
    parts: Vec<Pending>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Pending {
    work: u128,
    /// Jobs without a time limit.
    unlimited: u64,
    /// The work of the jobs with a limit by the GPU thousandths each asks for (a queue
    /// holds a handful of distinct widths), for `largest_first_gaps_percent`.
    by_width: BTreeMap<u64, u128>,
}

/// The running jobs' remaining work per partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct RunningWork {
    parts: Vec<Running>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Running {
    /// The jobs' GPU thousandths times their ends (seconds since the epoch), and their GPU
    /// thousandths: what is left of their work at `now` is `ends - now * gpus`, plus what
    /// the jobs past their ends took off it.
    ends: u128,
    gpus: u128,
    /// Their GPU thousandths by end, to find those past their ends (few: a job is ended at
    /// its limit).
    by_end: BTreeMap<Time, u128>,
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
            (limit, true) => {
                let term = work(gpu_milli, limit);
                e.work += term;
                *e.by_width.entry(gpu_milli).or_default() += term;
            }
            (limit, false) => {
                let term = work(gpu_milli, limit);
                take(&mut e.work, term);
                if let Some(w) = e.by_width.get_mut(&gpu_milli) {
                    take(w, term);
                    if *w == 0 {
                        e.by_width.remove(&gpu_milli);
                    }
                }
            }
        }
    }

    /// Whether it counts the same jobs as `other` (trailing empty partitions aside).
    pub(super) fn same_as(&self, other: &PendingWork) -> bool {
        same_parts(&self.parts, &other.parts)
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
                *e.by_end.entry(end).or_default() += gpus;
            }
            (false, false) => {
                take(&mut e.ends, gpus * u128::from(end.0));
                take(&mut e.gpus, gpus);
                if let Some(at) = e.by_end.get_mut(&end) {
                    take(at, gpus);
                    if *at == 0 {
                        e.by_end.remove(&end);
                    }
                }
            }
        }
    }

    /// Whether it counts the same jobs as `other` (trailing empty partitions aside).
    pub(super) fn same_as(&self, other: &RunningWork) -> bool {
        same_parts(&self.parts, &other.parts)
    }
}

/// Whether two lists of partitions hold the same, trailing empty partitions aside.
fn same_parts<T: Default + PartialEq>(a: &[T], b: &[T]) -> bool {
    let empty = T::default();
    let n = a.len().max(b.len());
    (0..n).all(|i| a.get(i).unwrap_or(&empty) == b.get(i).unwrap_or(&empty))
}

/// The running jobs' remaining work in partition `p` at `now`, by their time limits: none
/// when one of them has no limit (the backlog's end is then unknown). A running job past its
/// limit (not yet ended: stopping, or its limit cut below its run time) has nothing left.
pub(super) fn running_left(running: &RunningWork, p: PartitionId, now: Time) -> Option<u128> {
    let empty = Running::default();
    let run = running.parts.get(usize::from(p.0)).unwrap_or(&empty);
    if run.unlimited > 0 {
        return None;
    }
    // `ends - now * gpus` counts a job past its end below zero: its overrun is added back.
    let overrun: u128 = (run.by_end.range(..now))
        .map(|(end, gpus)| gpus * u128::from(now.0 - end.0))
        .sum();
    Some((run.ends + overrun).saturating_sub(u128::from(now.0) * run.gpus))
}

/// The pending work of partition `p` in `pending`: none when one of its jobs has no time
/// limit.
pub(super) fn pending_work(pending: &PendingWork, p: PartitionId) -> Option<u128> {
    let pend = pending.parts.get(usize::from(p.0));
    match pend {
        Some(pend) => (pend.unlimited == 0).then_some(pend.work),
        None => Some(0),
    }
}

/// The pending work of partition `p` in `pending` by the GPU thousandths its jobs ask for,
/// narrowest first (jobs without a time limit left out).
pub(super) fn pending_by_width(
    pending: &PendingWork,
    p: PartitionId,
) -> impl Iterator<Item = (u64, u128)> + '_ {
    let pend = pending.parts.get(usize::from(p.0));
    pend.into_iter()
        .flat_map(|pend| pend.by_width.iter().map(|(&w, &work)| (w, work)))
}

/// Whether the small work left could not fill around the gangs: whether the pending work
/// of the jobs whose width divides `capacity` (GPU thousandths) is at most `percent` of
/// the gaps the others would leave (see `largest_first_gaps_percent`), from the pending
/// work by width (`widths`, narrowest first). A job of width `w` runs `capacity / w` side
/// by side with jobs like it, leaving `capacity mod w` idle among them; its gap is its
/// share of those for its limit: the jobs' limits, their work over `w`, times
/// `(capacity mod w) / (capacity / w)`, in whole GPU thousandths times seconds (rounded
/// down, once per width). Jobs wider than `capacity`, which cannot start, are left out;
/// never with no gaps.
pub(super) fn gaps_unfilled(
    widths: impl IntoIterator<Item = (u64, u128)>,
    capacity: u64,
    percent: u32,
) -> bool {
    if percent == 0 {
        return false;
    }
    let (mut fill, mut gaps) = (0u128, 0u128);
    for (w, work) in widths {
        if w == 0 || w > capacity {
            continue;
        }
        let (side, idle) = (capacity / w, capacity % w);
        match idle {
            0 => fill = fill.saturating_add(work),
            // Every job's work is its width times its limit: `work / w` is exact.
            _ => {
                let gap = (work / u128::from(w)).saturating_mul(u128::from(idle));
                gaps = gaps.saturating_add(gap / u128::from(side));
            }
        }
    }
    gaps > 0 && fill.saturating_mul(100) <= gaps.saturating_mul(u128::from(percent))
}

/// Whether a backlog of `pending` work and `running` work left (none: unknown, see
/// [`running_left`]) would drain within `horizon` on `capacity` GPU thousandths: never
/// when it has no GPUs or is unknown.
pub(super) fn drains_within(
    pending: Option<u128>,
    running: Option<u128>,
    capacity: u64,
    horizon: Dur,
) -> bool {
    match (pending, running) {
        (Some(pend), Some(left)) if capacity > 0 => {
            pend.saturating_add(left) <= u128::from(capacity) * u128::from(horizon.0)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId(0);
    const Q: PartitionId = PartitionId(1);
    const MAX: u32 = crate::policy::MAX_GAPS_PERCENT;

    /// Whether partition `p`'s backlog, `pending` and `running` as of `now`, drains within
    /// `horizon` on `capacity`, as the pass reads it from the kept sums.
    fn drains(
        pending: &PendingWork,
        running: &RunningWork,
        p: PartitionId,
        capacity: u64,
        now: Time,
        horizon: Dur,
    ) -> bool {
        let left = running_left(running, p, now);
        drains_within(pending_work(pending, p), left, capacity, horizon)
    }

    #[test]
    fn a_backlog_drains_within_its_work_over_the_capacity() {
        let mut pending = PendingWork::default();
        let mut running = RunningWork::default();
        // 8 GPUs: 4 running for 10 more hours, 8 pending for 5 hours: 10 hours of work.
        running.count(P, 4000, Time(3600 + 36_000), true);
        pending.count(P, 8000, Dur::hours(5), true);
        let now = Time(3600);
        let within = |h: u64| drains(&pending, &running, P, 8000, now, Dur::hours(h));
        assert!(within(10) && !within(9), "exactly 10 hours");
        // Later, the running job has less left.
        assert!(drains(
            &pending,
            &running,
            P,
            8000,
            Time(3600 + 7200),
            Dur::hours(9)
        ));
        // Another partition is unaffected, and empty: within any horizon.
        assert!(drains(&pending, &running, Q, 8000, now, Dur(1)));
        assert!(
            !drains(&pending, &running, Q, 0, now, Dur::hours(1)),
            "no GPUs"
        );
    }

    /// Whether partition `p`'s small work could not fill its gaps on `capacity`, as the
    /// pass reads it from the kept sums.
    fn unfilled(pending: &PendingWork, p: PartitionId, capacity: u64, percent: u32) -> bool {
        gaps_unfilled(pending_by_width(pending, p), capacity, percent)
    }

    #[test]
    fn the_gaps_are_weighed_against_the_small_work_that_could_fill_them() {
        let mut pending = PendingWork::default();
        // 16 GPUs. A 12-GPU gang for an hour leaves 4 idle: 4 GPU-hours of gaps.
        pending.count(P, 12_000, Dur::hours(1), true);
        assert!(unfilled(&pending, P, 16_000, 50), "no small work at all");
        // 2 GPU-hours of single GPUs: exactly half the gaps.
        pending.count(P, 1000, Dur::hours(2), true);
        assert!(unfilled(&pending, P, 16_000, 50));
        assert!(!unfilled(&pending, P, 16_000, 49));
        // Another GPU-hour: more than half.
        pending.count(P, 1000, Dur::hours(1), true);
        assert!(!unfilled(&pending, P, 16_000, 50));
        assert!(unfilled(&pending, P, 16_000, 75));
        // 6 GPUs run two side by side and leave 4 idle among them, 2 each: a 6-GPU job for
        // 3 hours adds 6 GPU-hours of gaps (10 in all, 3 of small work).
        pending.count(P, 6000, Dur::hours(3), true);
        assert!(unfilled(&pending, P, 16_000, 30));
        assert!(!unfilled(&pending, P, 16_000, 29));
        // Off, and never in another partition (no gaps there), nor wider than the GPUs up.
        assert!(!unfilled(&pending, P, 16_000, 0));
        assert!(!unfilled(&pending, Q, 16_000, MAX));
        let mut wide = PendingWork::default();
        wide.count(P, 24_000, Dur::hours(1), true);
        assert!(!unfilled(&wide, P, 16_000, MAX), "cannot start: no gap");
        // Jobs without a limit have no known work: not counted.
        let mut unlimited = PendingWork::default();
        unlimited.count(P, 12_000, Dur(0), true);
        assert!(!unfilled(&unlimited, P, 16_000, MAX));
        // Taken out, the gang's gaps are gone; so is its entry.
        pending.count(P, 12_000, Dur::hours(1), false);
        pending.count(P, 6000, Dur::hours(3), false);
        assert!(!unfilled(&pending, P, 16_000, MAX));
        pending.count(P, 1000, Dur::hours(2), false);
        pending.count(P, 1000, Dur::hours(1), false);
        assert!(pending.same_as(&PendingWork::default()));
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
        let within_a_year = |pending: &PendingWork, running: &RunningWork| {
            drains(pending, running, P, 8000, Time(0), Dur::days(365))
        };
        pending.count(P, 1000, Dur(0), true);
        assert!(!within_a_year(&pending, &running), "pending");
        pending.count(P, 1000, Dur(0), false);
        running.count(P, 1000, Time::NEVER, true);
        assert!(!within_a_year(&pending, &running), "running");
        running.count(P, 1000, Time::NEVER, false);
        assert!(drains(&pending, &running, P, 8000, Time(0), Dur(0)));
    }

    #[test]
    fn a_running_job_past_its_limit_has_nothing_left_and_takes_nothing_off_the_others() {
        let mut running = RunningWork::default();
        let pending = PendingWork::default();
        running.count(P, 8000, Time(100), true);
        assert!(drains(&pending, &running, P, 8000, Time(500), Dur(0)));
        // Another job has 10 hours left on the other 8 of 16 GPUs: 5 hours of the
        // partition, whatever the first job's overrun (6 hours here).
        let now = Time(100 + 6 * 3600);
        running.count(P, 8000, now + Dur::hours(10), true);
        let within = |r: &RunningWork, h: u64| drains(&pending, r, P, 16_000, now, Dur::hours(h));
        assert!(within(&running, 5) && !within(&running, 4));
        running.count(P, 8000, Time(100), false);
        assert!(within(&running, 5) && !within(&running, 4));
        let mut alone = RunningWork::default();
        alone.count(P, 8000, now + Dur::hours(10), true);
        assert!(alone.same_as(&running), "counted out entirely");
    }
}
