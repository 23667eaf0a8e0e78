//! Summaries the scheduler keeps up to date between passes: what is free per partition,
//! and the usage rates of associations with running jobs.

use crate::cluster::{Cluster, NodeAvail, NodeId, PartitionId};
use crate::fairshare::{AssocIx, FairShareTree};
use crate::job::JobSpec;
use crate::resources::Amounts;
use crate::time::Time;
use std::collections::BTreeMap;

/// What [`FreeSummary::may_fit`] reads of a job: its gang at its smallest, and the whole
/// GPUs its tasks ask for. Its task groups decide it, so jobs of one shape need alike: the
/// scheduler keeps one per shape, and a pass need not read a job that cannot fit.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Need {
    min: Amounts,
    /// Per task group asking for whole GPUs: the GPUs of a task, and its fewest tasks.
    gpu_tasks: Vec<(u32, u32)>,
}

impl Need {
    pub(super) fn of(spec: &JobSpec) -> Need {
        Need {
            min: spec.min_amounts(),
            gpu_tasks: (spec.groups.iter())
                .filter(|g| g.per_task.gpus > 0)
                .map(|g| (g.per_task.gpus, g.min_tasks()))
                .collect(),
        }
    }
}

/// What is free now, summarised per partition so that most jobs that cannot fit are turned
/// away without running placement.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct FreeSummary {
    /// Per partition, total free amounts on its up nodes.
    total: Vec<Amounts>,
    /// Per partition, how many nodes have exactly k whole GPUs free (index k).
    whole_gpus: Vec<Vec<u32>>,
    /// Whole GPUs free per node, as counted in `whole_gpus`.
    node_whole: Vec<u32>,
    node_free: Vec<Amounts>,
}

fn whole_gpus_free(cluster: &Cluster, n: NodeId) -> u32 {
    let node = cluster.node(n);
    if node.avail != NodeAvail::Up || node.usage.exclusive.is_some() {
        return 0;
    }
    node.usage.gpu_milli.iter().filter(|&&m| m == 0).count() as u32
}

impl FreeSummary {
    pub(super) fn new(cluster: &Cluster) -> FreeSummary {
        FreeSummary::of(cluster, false)
    }

    /// What would be free if every node that is up were idle: a job that may not fit even
    /// there never fits, or needs nodes that are not up.
    pub(super) fn idle_up(cluster: &Cluster) -> FreeSummary {
        FreeSummary::of(cluster, true)
    }

    fn of(cluster: &Cluster, idle: bool) -> FreeSummary {
        let n = cluster.nodes.len();
        let max_gpus = cluster
            .shapes
            .iter()
            .map(|s| s.gpus.len())
            .max()
            .unwrap_or(0);
        let up = |i: u32| cluster.node(NodeId(i)).avail == NodeAvail::Up;
        let node_free: Vec<Amounts> = (0..n as u32)
            .map(|i| match idle {
                false => cluster.free_amounts(NodeId(i)),
                true if up(i) => cluster.shape(NodeId(i)).capacity(),
                true => Amounts::ZERO,
            })
            .collect();
        let node_whole: Vec<u32> = (0..n as u32)
            .map(|i| match idle {
                false => whole_gpus_free(cluster, NodeId(i)),
                true if up(i) => cluster.shape(NodeId(i)).gpus.len() as u32,
                true => 0,
            })
            .collect();
        let mut total = vec![Amounts::ZERO; cluster.partitions.len()];
        let mut whole_gpus = vec![vec![0u32; max_gpus + 1]; cluster.partitions.len()];
        for (p, part) in cluster.partitions.iter().enumerate() {
            for &node in &part.nodes {
                total[p] += node_free[node.0 as usize];
                whole_gpus[p][node_whole[node.0 as usize] as usize] += 1;
            }
        }
        FreeSummary {
            total,
            whole_gpus,
            node_whole,
            node_free,
        }
    }

    /// The total free amounts on partition `p`'s up nodes.
    pub(super) fn total(&self, p: PartitionId) -> Amounts {
        self.total[p.0 as usize]
    }

    /// False when a job of need `need` certainly cannot start now in partition `p`.
    pub(super) fn may_fit(&self, p: PartitionId, need: &Need) -> bool {
        let p = p.0 as usize;
        if !need.min.fits_in(&self.total[p]) {
            return false;
        }
        need.gpu_tasks.iter().all(|&(per, tasks)| {
            let slots: u64 = self.whole_gpus[p]
                .iter()
                .enumerate()
                .map(|(k, &nodes)| u64::from(nodes) * (k as u64 / u64::from(per)))
                .sum();
            slots >= u64::from(tasks)
        })
    }

    /// Refreshes the summary for nodes whose usage changed.
    pub(super) fn refresh(&mut self, cluster: &Cluster, nodes: &[NodeId]) {
        for &n in nodes {
            let i = n.0 as usize;
            let free = cluster.free_amounts(n);
            let whole = whole_gpus_free(cluster, n);
            for &p in &cluster.node(n).partitions {
                let p = p.0 as usize;
                self.total[p] = self.total[p].saturating_sub(&self.node_free[i]) + free;
                self.whole_gpus[p][self.node_whole[i] as usize] -= 1;
                self.whole_gpus[p][whole as usize] += 1;
            }
            self.node_free[i] = free;
            self.node_whole[i] = whole;
        }
    }
}

/// Billing units per second of each association with running jobs, charged to the
/// fair-share tree lazily: when a job of the association starts or ends, and every calc
/// period. Charging per association rather than per job keeps a pass independent of the
/// number of running jobs.
#[derive(Clone, Debug, Default)]
pub(super) struct UsageRates {
    /// Per association: summed rate, running jobs, and when it was last charged.
    by_assoc: BTreeMap<AssocIx, (f64, u32, Time)>,
}

impl UsageRates {
    /// A job of `assoc` with `rate` started at `now`.
    pub(super) fn start(&mut self, tree: &mut FairShareTree, assoc: AssocIx, rate: f64, now: Time) {
        let entry = self.by_assoc.entry(assoc).or_insert((0.0, 0, now));
        charge(tree, assoc, entry, now);
        entry.0 += rate;
        entry.1 += 1;
    }

    /// A job of `assoc` with `rate` ended at `now`.
    pub(super) fn stop(&mut self, tree: &mut FairShareTree, assoc: AssocIx, rate: f64, now: Time) {
        let Some(entry) = self.by_assoc.get_mut(&assoc) else {
            return;
        };
        charge(tree, assoc, entry, now);
        entry.1 = entry.1.saturating_sub(1);
        if entry.1 == 0 {
            self.by_assoc.remove(&assoc);
        } else {
            entry.0 = (entry.0 - rate).max(0.0);
        }
    }

    /// Charges every association up to `now`.
    pub(super) fn charge_all(&mut self, tree: &mut FairShareTree, now: Time) {
        for (assoc, entry) in &mut self.by_assoc {
            charge(tree, *assoc, entry, now);
        }
    }
}

/// Charges one association's rate from its last charge to `now`. The amounts come from
/// the scheduler's own arithmetic on non-negative finite numbers, so a refusal is a bug.
fn charge(tree: &mut FairShareTree, assoc: AssocIx, entry: &mut (f64, u32, Time), now: Time) {
    let elapsed = now.since(entry.2).0 as f64;
    if elapsed > 0.0 && entry.0 > 0.0 {
        let units = entry.0 * elapsed;
        let charged = tree.charge(assoc, units);
        debug_assert!(
            charged.is_ok(),
            "charging {units} to {assoc:?}: {charged:?}"
        );
    }
    entry.2 = entry.2.max(now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TaskResources;
    use crate::time::Dur;

    /// A job of `tasks` tasks of `gpus` GPUs each, at least `min` of them.
    fn need(tasks: u32, min: u32, gpus: u32) -> Need {
        let per_task = TaskResources {
            gpus,
            ..TaskResources::default()
        };
        let mut spec = JobSpec::simple("u", "a", tasks, per_task, Dur(60));
        spec.groups[0].min_count = Some(min);
        Need::of(&spec)
    }

    #[test]
    fn a_gang_may_fit_at_its_smallest_in_whole_gpus() {
        let cluster = Cluster::flat_gpu(2, 8);
        let free = FreeSummary::new(&cluster);
        let p = PartitionId(0);
        // Two nodes of 8 free GPUs: two tasks of 8, not three; an elastic gang of four
        // that may start with two may fit.
        assert!(free.may_fit(p, &need(2, 2, 8)));
        assert!(!free.may_fit(p, &need(3, 3, 8)));
        assert!(free.may_fit(p, &need(4, 2, 8)));
        // Three tasks of 5 GPUs are 15 of the 16 free, but each node holds one of them.
        assert!(!free.may_fit(p, &need(3, 3, 5)));
        assert!(free.may_fit(p, &need(2, 2, 5)));
    }
}
