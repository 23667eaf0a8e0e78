//! Backfill planning: what will be free on each node, when, and the reservations made on it.
//!
//! Given: the amounts free on every node now, the running jobs with the end times their time
//! limits promise, and the reservations made so far in this pass.
//! Decided: for a blocked job, the earliest time its gang fits (its reservation); for a job
//! that could start now, whether starting it would take anything a reservation counts on.
//! Must hold: a job started by backfill never makes a reservation made before it in the same
//! pass infeasible, assuming running jobs run to their time limits. Reservations are held in
//! amounts per node (cores, memory, GPUs, NICs), not whole nodes as Slurm's are, so a
//! reservation for one GPU does not idle the seven others of its node.
//!
//! Device-level detail (which GPU, which NUMA domain) is not planned ahead: when the
//! reservation's time comes, placement picks devices from what is then free.

use crate::cluster::{Cluster, NodeAvail, NodeId};
use crate::job::JobId;
use crate::resources::Amounts;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A promise to a blocked job: these amounts on these nodes from `start` to `end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub job: JobId,
    pub start: Time,
    pub end: Time,
    pub nodes: Vec<(NodeId, Amounts)>,
}

/// Amounts held on a node over `[start, end)`: a reservation, or a job started in this pass.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Hold {
    start: Time,
    end: Time,
    amounts: Amounts,
}

/// Free amounts on every node over time, from `now` on.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    now: Time,
    /// Free now, per node (zero on nodes that are not up).
    base: Vec<Amounts>,
    /// Amounts released when running jobs end, node by node, each node's sorted by time:
    /// node `i`'s are `release_list[release_at[i]..release_at[i + 1]]` (one list rather
    /// than a list per node: building the profile of a large cluster allocated one for
    /// each node at every pass).
    release_at: Vec<u32>,
    release_list: Vec<(Time, Amounts)>,
    /// Per node: holds, in the order they were made.
    holds: Vec<Vec<Hold>>,
    /// Per node: the earliest start of any hold ([`Time::NEVER`] without holds).
    first_hold: Vec<Time>,
    /// Per node: the earliest start of a hold made for a job that has not started (a
    /// reservation, or what a preemptor waits for).
    first_reservation: Vec<Time>,
}

/// What each node's running jobs release and when, by their time limits: kept as jobs
/// start, change their limits and end, so that a pass copies its [`Profile`] from it
/// instead of gathering it from every running job (on a large cluster, tens of thousands of
/// scattered reads at every pass).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeReleases {
    /// Per node: (end by the time limit, job, amounts), sorted.
    lists: Vec<Vec<(Time, JobId, Amounts)>>,
}

impl NodeReleases {
    pub fn new(nodes: usize) -> NodeReleases {
        NodeReleases {
            lists: vec![Vec::new(); nodes],
        }
    }

    /// Counts in a running job that ends by `end` and holds `per_node`.
    pub fn add(&mut self, job: JobId, end: Time, per_node: &[(NodeId, Amounts)]) {
        for &(n, amounts) in per_node {
            let list = &mut self.lists[n.0 as usize];
            let at = list.partition_point(|e| (e.0, e.1) < (end, job));
            list.insert(at, (end, job, amounts));
        }
    }

    /// Counts out what [`NodeReleases::add`] counted in.
    pub fn remove(&mut self, job: JobId, end: Time, per_node: &[(NodeId, Amounts)]) {
        for &(n, _) in per_node {
            let list = &mut self.lists[n.0 as usize];
            match list.binary_search_by(|e| (e.0, e.1).cmp(&(end, job))) {
                Ok(at) => {
                    list.remove(at);
                }
                Err(_) => debug_assert!(false, "job {job} was not counted on node {n:?}"),
            }
        }
    }
}

/// A running job that was asked to stop: it releases what it holds on `nodes` by `end`
/// rather than by its time limit.
pub struct EarlyEnd<'a> {
    pub job: JobId,
    pub end: Time,
    pub nodes: &'a [(NodeId, Amounts)],
}

impl Profile {
    /// The profile of a cluster whose running jobs end at the times given: `ends` lists, for
    /// each running job, its expected end and the amounts it holds per node.
    pub fn new<'a>(
        cluster: &Cluster,
        now: Time,
        ends: impl IntoIterator<Item = (Time, &'a [(NodeId, Amounts)])>,
    ) -> Profile {
        let n = cluster.nodes.len();
        let up: Vec<bool> = cluster
            .nodes
            .iter()
            .map(|node| node.avail == NodeAvail::Up)
            .collect();
        let mut released: Vec<(NodeId, Time, Amounts)> = Vec::new();
        for (end, per_node) in ends {
            let end = end.max(now);
            for &(node, amounts) in per_node {
                if up[node.0 as usize] {
                    released.push((node, end, amounts));
                }
            }
        }
        // Node by node (a counting sort), then each node's by time.
        let mut release_at = vec![0u32; n + 1];
        for &(node, ..) in &released {
            release_at[node.0 as usize + 1] += 1;
        }
        for i in 0..n {
            release_at[i + 1] += release_at[i];
        }
        let mut release_list = vec![(Time(0), Amounts::ZERO); released.len()];
        let mut next = release_at.clone();
        for (node, end, amounts) in released {
            let slot = &mut next[node.0 as usize];
            release_list[*slot as usize] = (end, amounts);
            *slot += 1;
        }
        for w in release_at.windows(2) {
            release_list[w[0] as usize..w[1] as usize].sort_by_key(|&(t, _)| t);
        }
        Profile::of(cluster, now, release_at, release_list)
    }

    /// The profile of what is free on `cluster` now, with these releases.
    fn of(
        cluster: &Cluster,
        now: Time,
        release_at: Vec<u32>,
        release_list: Vec<(Time, Amounts)>,
    ) -> Profile {
        let n = cluster.nodes.len();
        let base = (0..n as u32)
            .map(|i| cluster.free_amounts(NodeId(i)))
            .collect();
        Profile {
            now,
            base,
            release_at,
            release_list,
            holds: vec![Vec::new(); n],
            first_hold: vec![Time::NEVER; n],
            first_reservation: vec![Time::NEVER; n],
        }
    }

    /// The same profile as [`Profile::new`] gives for the running jobs `releases` counts,
    /// of which those in `stopping` end by their own time: copied node by node.
    pub fn from_releases(
        cluster: &Cluster,
        now: Time,
        releases: &NodeReleases,
        stopping: &[EarlyEnd<'_>],
    ) -> Profile {
        let n = cluster.nodes.len();
        debug_assert_eq!(releases.lists.len(), n, "one release list per node");
        let up = |i: usize| cluster.nodes[i].avail == NodeAvail::Up;
        let mut release_at = Vec::with_capacity(n + 1);
        release_at.push(0u32);
        let mut release_list = Vec::with_capacity(releases.lists.iter().map(Vec::len).sum());
        for (i, list) in releases.lists.iter().enumerate() {
            if up(i) {
                // Those due by now are released now, in job order (as `Profile::new`
                // orders equal times), not in the order of their own ends.
                let due = list.partition_point(|e| e.0 <= now);
                if due > 1 {
                    let mut now_due: Vec<(JobId, Amounts)> =
                        list[..due].iter().map(|&(_, job, a)| (job, a)).collect();
                    now_due.sort_unstable_by_key(|e| e.0);
                    release_list.extend(now_due.into_iter().map(|(_, a)| (now, a)));
                } else {
                    release_list.extend(list[..due].iter().map(|&(_, _, a)| (now, a)));
                }
                release_list.extend(list[due..].iter().map(|&(end, _, a)| (end, a)));
            }
            release_at.push(release_list.len() as u32);
        }
        // A stopping job's releases move to its own end: the lists of its nodes are made
        // again, sorted as `Profile::new` sorts them (by time, then job).
        let early: BTreeMap<JobId, Time> = stopping.iter().map(|s| (s.job, s.end)).collect();
        let moved: BTreeSet<usize> = stopping
            .iter()
            .flat_map(|s| s.nodes.iter().map(|(n, _)| n.0 as usize))
            .filter(|&i| up(i))
            .collect();
        for i in moved {
            let mut list: Vec<(Time, JobId, Amounts)> = releases.lists[i]
                .iter()
                .map(|&(end, job, a)| (early.get(&job).copied().unwrap_or(end).max(now), job, a))
                .collect();
            list.sort_unstable_by_key(|&(end, job, _)| (end, job));
            let slots = &mut release_list[release_at[i] as usize..release_at[i + 1] as usize];
            for (slot, (end, _, a)) in slots.iter_mut().zip(list) {
                *slot = (end, a);
            }
        }
        Profile::of(cluster, now, release_at, release_list)
    }

    /// What running jobs release on node `i`, by time.
    fn releases(&self, i: usize) -> &[(Time, Amounts)] {
        &self.release_list[self.release_at[i] as usize..self.release_at[i + 1] as usize]
    }

    pub fn now(&self) -> Time {
        self.now
    }

    /// Amounts free on `node` at time `t`, counting holds.
    pub fn free_at(&self, node: NodeId, t: Time) -> Amounts {
        let i = node.0 as usize;
        let mut free = self.base[i];
        for &(end, amounts) in self.releases(i) {
            if end > t {
                break;
            }
            free += amounts;
        }
        let held = self.holds[i]
            .iter()
            .filter(|h| h.start <= t && t < h.end)
            .fold(Amounts::ZERO, |acc, h| acc + h.amounts);
        free.saturating_sub(&held)
    }

    /// The least free on `node` at any time in `[from, to)`. Free amounts only fall where a
    /// hold starts, so only `from` and hold starts inside the window need looking at.
    pub fn min_free(&self, node: NodeId, from: Time, to: Time) -> Amounts {
        let mut least = self.free_at(node, from);
        for h in &self.holds[node.0 as usize] {
            if h.start > from && h.start < to {
                least = least.component_min(&self.free_at(node, h.start));
            }
        }
        least
    }

    /// Whether `amounts` per node fit over `[from, to)` without touching any hold.
    pub fn fits(&self, per_node: &[(NodeId, Amounts)], from: Time, to: Time) -> bool {
        per_node
            .iter()
            .all(|(n, a)| a.fits_in(&self.min_free(*n, from, to)))
    }

    /// Holds `amounts` per node over `[start, end)`.
    pub fn hold(&mut self, per_node: &[(NodeId, Amounts)], start: Time, end: Time) {
        for &(n, amounts) in per_node {
            let i = n.0 as usize;
            self.holds[i].push(Hold {
                start,
                end,
                amounts,
            });
            self.first_hold[i] = self.first_hold[i].min(start);
        }
    }

    /// Holds `amounts` per node over `[start, end)` for a job that has not started yet.
    pub fn reserve(&mut self, per_node: &[(NodeId, Amounts)], start: Time, end: Time) {
        self.hold(per_node, start, end);
        for &(n, _) in per_node {
            let i = n.0 as usize;
            self.first_reservation[i] = self.first_reservation[i].min(start);
        }
    }

    /// Whether no reservation on `node` starts before `end`.
    pub fn unreserved_until(&self, node: NodeId, end: Time) -> bool {
        self.first_reservation[node.0 as usize] >= end
    }

    /// Whether a job ending by `end` may use `node` as freely as if nothing were held:
    /// no hold on it starts before `end`.
    #[inline]
    pub fn untouched_until(&self, node: NodeId, end: Time) -> bool {
        self.first_hold[node.0 as usize] >= end
    }

    /// Candidate start times after now, in order: when running jobs end on up nodes, and when holds end
    /// (a job started in this pass or a reservation gives its amounts back then; neither is
    /// among the running jobs the releases come from).
    pub fn candidate_times(&self) -> Vec<Time> {
        let mut times: Vec<Time> = self.release_list.iter().map(|r| r.0).collect();
        times.extend(self.holds.iter().flatten().map(|h| h.end));
        times.retain(|&t| t > self.now);
        times.sort_unstable();
        times.dedup();
        times
    }

    /// When holds on `nodes` end, sorted and deduplicated: start times to try besides the
    /// releases of [`Profile::releases_on`].
    pub fn hold_ends(&self, nodes: &[NodeId]) -> Vec<Time> {
        let mut ends: Vec<Time> = nodes
            .iter()
            .flat_map(|n| self.holds[n.0 as usize].iter().map(|h| h.end))
            .collect();
        ends.sort_unstable();
        ends.dedup();
        ends
    }

    /// The free total of `nodes` now, and every later release on them, in no order (a
    /// caller that reads a few of them in time order need not sort them all): the sum of
    /// those up to `t` bounds from above what is free on them at `t`.
    pub fn releases_on(&self, nodes: &[NodeId]) -> (Amounts, Vec<(Time, Amounts)>) {
        let mut base = Amounts::ZERO;
        let count = nodes
            .iter()
            .map(|n| self.releases(n.0 as usize).len())
            .sum();
        let mut releases = Vec::with_capacity(count);
        for &n in nodes {
            base += self.base[n.0 as usize];
            releases.extend_from_slice(self.releases(n.0 as usize));
        }
        (base, releases)
    }

    /// Total free on `nodes` at time `t`, ignoring holds: an upper bound used to skip
    /// candidate times cheaply.
    pub fn total_free_upper_bound(&self, nodes: &[NodeId], t: Time) -> Amounts {
        nodes.iter().fold(Amounts::ZERO, |acc, &n| {
            let i = n.0 as usize;
            let released = self
                .releases(i)
                .iter()
                .take_while(|(end, _)| *end <= t)
                .fold(Amounts::ZERO, |a, (_, r)| a + *r);
            acc + self.base[i] + released
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u64) -> Amounts {
        Amounts {
            gpu_milli: n * 1000,
            ..Amounts::ZERO
        }
    }

    #[test]
    fn releases_raise_and_holds_lower_free_amounts() {
        let cluster = Cluster::flat_gpu(2, 8);
        let running = [(NodeId(0), gpus(0))];
        let mut p = Profile::new(&cluster, Time(100), [(Time(200), &running[..])]);
        // Node 0 is idle in the cluster; pretend 0 GPUs were released (job holds none).
        assert_eq!(p.free_at(NodeId(0), Time(100)).gpu_milli, 8000);
        p.hold(&[(NodeId(0), gpus(6))], Time(150), Time(300));
        assert_eq!(p.free_at(NodeId(0), Time(149)).gpu_milli, 8000);
        assert_eq!(p.free_at(NodeId(0), Time(150)).gpu_milli, 2000);
        assert_eq!(p.free_at(NodeId(0), Time(300)).gpu_milli, 8000);
        assert_eq!(p.min_free(NodeId(0), Time(100), Time(150)).gpu_milli, 8000);
        assert_eq!(p.min_free(NodeId(0), Time(100), Time(151)).gpu_milli, 2000);
        assert!(p.fits(&[(NodeId(0), gpus(2))], Time(100), Time(400)));
        assert!(!p.fits(&[(NodeId(0), gpus(3))], Time(100), Time(400)));
        assert!(p.fits(&[(NodeId(0), gpus(8))], Time(100), Time(150)));
        assert_eq!(p.candidate_times(), vec![Time(200), Time(300)]);
        assert_eq!(p.hold_ends(&[NodeId(0)]), vec![Time(300)]);
        assert!(p.hold_ends(&[NodeId(1)]).is_empty());
    }
}
