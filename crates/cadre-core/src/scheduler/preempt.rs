//! Preemption: choosing the fewest, cheapest victims that let a blocked job really fit.
//!
//! Given: a pending job that does not fit now, and the running jobs. A running job is a
//! candidate victim when preemption is on, it is preemptible, it has run at least the
//! exempt time, it is not already stopping, it runs on a node the preemptor could use, and
//! the preemptor outranks it: a higher preempting priority class, a QOS that lists the
//! victim's QOS, or (when enabled) a partition of a higher priority tier.
//! Decided: a set of victims such that the preemptor's whole gang fits once they are gone
//! (checked by really placing it with the victims' resources released), made minimal by
//! dropping every victim the placement does not need. Cheapest first: lowest priority class
//! and tier, then the most recently started (least work lost), then the highest id.
//! Must hold: no victim is chosen unless the preemptor then fits; the cluster's usage is
//! exactly as before once the search is done (victims keep their resources until they end).

use super::pass::Candidate;
use super::{Decision, Job, Scheduler, Stopping};
use crate::backfill::Profile;
use crate::cluster::{Cluster, NodeId, PartitionId};
use crate::job::{JobId, JobState};
use crate::resources::Amounts;
use crate::time::Time;
use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// The lowest rank among running preemptible jobs, by each way of outranking.
#[derive(Debug, PartialEq)]
pub(super) struct VictimSummary {
    lowest_class: i32,
    lowest_tier: u32,
    qos: BTreeSet<String>,
}

/// The ranks of the running preemptible jobs, counted as jobs start, are asked to stop and
/// end: a pass sums them up ([`VictimSummary`]) from a few counts, not a look at each of
/// tens of thousands of running jobs (on a large cluster that look was a tenth of a pass).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RunningRanks {
    classes: BTreeMap<i32, u32>,
    tiers: BTreeMap<u32, u32>,
    qos: BTreeMap<String, u32>,
}

impl RunningRanks {
    /// Counts `job` in (`add`) or out, if it is running and preemptible: as it starts
    /// running, and before it stops running (asked to stop for a preemptor, or ended).
    pub(super) fn count(&mut self, cluster: &Cluster, job: &Job, add: bool) {
        if job.state != JobState::Running || !job.spec.preemptible {
            return;
        }
        let class = job.class_value;
        let tier = cluster.partition(job.partition).priority_tier;
        let qos = job.spec.qos.as_deref();
        fn count_in<K: Ord>(map: &mut BTreeMap<K, u32>, key: K) {
            *map.entry(key).or_default() += 1;
        }
        fn count_out<K: Ord + Borrow<Q>, Q: Ord + ?Sized>(map: &mut BTreeMap<K, u32>, key: &Q) {
            match map.get_mut(key) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    map.remove(key);
                }
                None => debug_assert!(false, "a running job counted out was never counted in"),
            }
        }
        if add {
            count_in(&mut self.classes, class);
            count_in(&mut self.tiers, tier);
            if let Some(q) = qos {
                count_in(&mut self.qos, q.to_string());
            }
        } else {
            count_out(&mut self.classes, &class);
            count_out(&mut self.tiers, &tier);
            if let Some(q) = qos {
                count_out(&mut self.qos, q);
            }
        }
    }

    /// The lowest class value and partition tier among the running preemptible jobs.
    pub(super) fn lowest(&self) -> (Option<i32>, Option<u32>) {
        (
            self.classes.keys().next().copied(),
            self.tiers.keys().next().copied(),
        )
    }

    fn summary(&self) -> VictimSummary {
        let (lowest_class, lowest_tier) = self.lowest();
        VictimSummary {
            lowest_class: lowest_class.unwrap_or(i32::MAX),
            lowest_tier: lowest_tier.unwrap_or(u32::MAX),
            qos: self.qos.keys().cloned().collect(),
        }
    }
}

/// Candidate victims looked at per preemptor at most.
const MAX_CANDIDATES: usize = 512;
/// Placement attempts per preemptor at most.
const MAX_PLACEMENTS: u32 = 64;

impl Scheduler {
    /// Whether `job` may preempt `victim` under the policy.
    fn outranks(&self, job: JobId, victim: JobId) -> bool {
        let (j, v) = (&self.jobs[&job], &self.jobs[&victim]);
        let by_class = j.class_preempting && j.class_value > v.class_value;
        let by_qos = match (&j.spec.qos, &v.spec.qos) {
            (Some(jq), Some(vq)) => self
                .policy
                .qos(jq)
                .is_some_and(|q| q.preempt.iter().any(|p| p == vq)),
            _ => false,
        };
        let tier = |p: PartitionId| self.cluster.partition(p).priority_tier;
        let by_tier =
            self.policy.preemption.partition_tier && tier(j.partition) > tier(v.partition);
        by_class || by_qos || by_tier
    }

    /// What the running jobs offer to preemption, summarised so that a blocked job that
    /// outranks none of them is turned away without looking at each: from the counts kept
    /// as jobs start and stop ([`RunningRanks`]); the reference scheduler looks at every
    /// running job.
    pub(super) fn victim_summary(&self) -> VictimSummary {
        if self.reference {
            self.victim_summary_scanned()
        } else {
            self.running_ranks.summary()
        }
    }

    /// Whether the counts kept of the running jobs' ranks are those of a look at every
    /// running job (for [`Scheduler::check_invariants`]).
    pub(super) fn running_ranks_agree(&self) -> bool {
        let mut counted = RunningRanks::default();
        for id in &self.active {
            counted.count(&self.cluster, &self.jobs[id], true);
        }
        counted == self.running_ranks && counted.summary() == self.victim_summary_scanned()
    }

    fn victim_summary_scanned(&self) -> VictimSummary {
        let mut summary = VictimSummary {
            lowest_class: i32::MAX,
            lowest_tier: u32::MAX,
            qos: BTreeSet::new(),
        };
        for id in &self.active {
            let job = &self.jobs[id];
            if job.state != JobState::Running || !job.spec.preemptible {
                continue;
            }
            summary.lowest_class = summary.lowest_class.min(job.class_value);
            summary.lowest_tier = summary
                .lowest_tier
                .min(self.cluster.partition(job.partition).priority_tier);
            if let Some(q) = &job.spec.qos {
                summary.qos.insert(q.clone());
            }
        }
        summary
    }

    /// Whether the pass's candidate `c` could outrank some running job at all (see
    /// [`VictimSummary`]), from what the candidate carries: the job itself is read only for
    /// its QOS, when it has one.
    pub(super) fn may_preempt(&self, c: &Candidate, victims: &VictimSummary) -> bool {
        let (tier, class_value) = (c.tier, c.class_value);
        let by_class = c.class_preempting && class_value > victims.lowest_class;
        let by_tier = self.policy.preemption.partition_tier && tier > victims.lowest_tier;
        let by_qos = c.has_qos
            && self.jobs[&c.id]
                .spec
                .qos
                .as_deref()
                .and_then(|q| self.policy.qos(q))
                .is_some_and(|q| q.preempt.iter().any(|p| victims.qos.contains(p)));
        by_class || by_tier || by_qos
    }

    /// Tries to free room for `id` by preemption; returns the preemption decisions, or
    /// nothing when no set of victims makes it fit.
    /// Only nodes in `allowed` (when given) are used.
    pub(super) fn try_preempt(
        &mut self,
        id: JobId,
        now: Time,
        allowed: Option<&BTreeSet<NodeId>>,
    ) -> Vec<Decision> {
        let job = &self.jobs[&id];
        let eligible: BTreeSet<NodeId> = self
            .cluster
            .partition(job.partition)
            .nodes
            .iter()
            .copied()
            .filter(|n| allowed.is_none_or(|a| a.contains(n)))
            .collect();
        let mut candidates: Vec<JobId> = self
            .active
            .iter()
            .copied()
            .filter(|&v| {
                self.may_be_victim(v, now)
                    && self.jobs[&v]
                        .per_node
                        .iter()
                        .any(|(n, _)| eligible.contains(n))
                    && self.outranks(id, v)
            })
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        candidates.sort_by_key(|&v| {
            let victim = &self.jobs[&v];
            let tier = self.cluster.partition(victim.partition).priority_tier;
            (
                victim.class_value,
                tier,
                Reverse(victim.start_time),
                Reverse(v),
            )
        });
        candidates.truncate(MAX_CANDIDATES);
        let need = self.jobs[&id].min_want;
        let nodes: Vec<NodeId> = eligible.iter().copied().collect();
        let free_now: Amounts = nodes
            .iter()
            .fold(Amounts::ZERO, |a, &n| a + self.cluster.free_amounts(n));

        // Release victims one by one until the job fits.
        let mut released: Vec<JobId> = Vec::new();
        let mut freed = free_now;
        let mut placements = 0u32;
        let mut fits = false;
        for v in candidates {
            self.release_for_search(v);
            released.push(v);
            freed += self.jobs[&v].spec_amounts_held();
            if !need.fits_in(&freed) {
                continue;
            }
            placements += 1;
            if self.place(&self.jobs[&id].spec, &nodes).is_ok() {
                fits = true;
                break;
            }
            if placements >= MAX_PLACEMENTS {
                break;
            }
        }
        if !fits {
            for &v in released.iter().rev() {
                self.rebook_after_search(v);
            }
            return Vec::new();
        }
        // Drop victims the placement does not need, most expensive first.
        let mut victims = released.clone();
        for &v in released.iter().rev() {
            if placements >= MAX_PLACEMENTS * 2 {
                break;
            }
            self.rebook_after_search(v);
            placements += 1;
            if self.place(&self.jobs[&id].spec, &nodes).is_ok() {
                victims.retain(|&x| x != v);
            } else {
                self.release_for_search(v);
            }
        }
        for &v in &victims {
            self.rebook_after_search(v);
        }
        self.mark_victims(id, victims)
    }

    /// Whether a running job may be preempted at all now: preemptible, not already stopping,
    /// and past the exempt time.
    fn may_be_victim(&self, v: JobId, now: Time) -> bool {
        let victim = &self.jobs[&v];
        victim.state == JobState::Running
            && victim.stopping.is_none()
            && victim.spec.preemptible
            && victim
                .start_time
                .is_some_and(|s| now.since(s) >= self.policy.preemption.exempt_time)
    }

    /// Asks `victims` to stop for `id`: the preemption decisions.
    fn mark_victims(&mut self, id: JobId, victims: Vec<JobId>) -> Vec<Decision> {
        let mode = self.policy.preemption.mode;
        let grace = self.policy.preemption.grace;
        self.queue.touch(id);
        let mut out = Vec::with_capacity(victims.len());
        for v in victims {
            let victim = self.jobs.get_mut(&v).expect("victims are active jobs");
            self.running_ranks.count(&self.cluster, victim, false);
            victim.state = JobState::Preempting;
            victim.stopping = Some(Stopping::Preempted { by: id, mode });
            self.stopping.insert(v);
            victim.preempted_by = Some(id);
            out.push(Decision::Preempt {
                victim: v,
                by: id,
                mode,
                grace,
            });
            self.jobs
                .get_mut(&id)
                .expect("the preemptor is pending")
                .awaiting_victims
                .insert(v);
        }
        let held = self.victim_amounts(id);
        self.jobs
            .get_mut(&id)
            .expect("the preemptor is pending")
            .victims_held = held;
        out
    }

    /// Holds for a preemptor, in the pass's profile, what its victims give it: what those
    /// that ended have freed, from now, and what the others still hold, from when they must
    /// be gone; both until the preemptor would end. Without this, a lower job could start on
    /// what an early victim freed while the preemptor waits for the rest.
    pub(super) fn hold_for_preemptor(&self, profile: &mut Profile, id: JobId, now: Time) {
        let job = &self.jobs[&id];
        let victims_end = now + self.policy.preemption.grace;
        let end = super::end_of(victims_end, job.spec.time_limit);
        let still_held = self.victim_amounts(id);
        let freed: Vec<(NodeId, Amounts)> = job
            .victims_held
            .iter()
            .map(|&(n, a)| {
                let held = still_held
                    .iter()
                    .find(|(m, _)| *m == n)
                    .map_or(Amounts::ZERO, |(_, h)| *h);
                (n, a.saturating_sub(&held))
            })
            .filter(|(_, a)| !a.is_zero())
            .collect();
        profile.reserve(&freed, now, end);
        profile.reserve(&still_held, victims_end, end);
    }

    /// Kueue's reclaim within a cohort: a job held back because other queues of its cohort
    /// borrow the quota its own queue lends may take it back by preempting their jobs
    /// (youngest first, then the fewest), when the job then passes its quota check and
    /// really fits. Returns the preemption decisions, or nothing.
    pub(super) fn try_reclaim(&mut self, id: JobId, now: Time) -> Vec<Decision> {
        let job = &self.jobs[&id];
        let Some(own) = self.quota.resolve(job.queue, &job.spec.account) else {
            return Vec::new();
        };
        let borrowers: BTreeSet<_> = self
            .quota
            .borrowers_in_cohort(own)
            .into_iter()
            .map(|(q, _)| q)
            .collect();
        let mut candidates: Vec<JobId> = self
            .active
            .iter()
            .copied()
            .filter(|&v| {
                let victim = &self.jobs[&v];
                self.may_be_victim(v, now)
                    && self
                        .quota
                        .resolve(victim.queue, &victim.spec.account)
                        .is_some_and(|q| borrowers.contains(&q))
            })
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        candidates.sort_by_key(|&v| {
            (
                std::cmp::Reverse(self.jobs[&v].start_time),
                std::cmp::Reverse(v),
            )
        });
        candidates.truncate(MAX_CANDIDATES);
        let nodes = self.cluster.partition(job.partition).nodes.clone();
        let admitted = |sched: &Scheduler, book: &crate::quota::QuotaBook| {
            let j = &sched.jobs[&id];
            book.check_in(
                j.queue,
                &j.spec.account,
                &j.spec.user,
                j.spec.namespace.as_deref(),
                j.min_want,
            )
            .is_ok()
        };
        let release_quota = |sched: &Scheduler, book: &mut crate::quota::QuotaBook, v: JobId| {
            let victim = &sched.jobs[&v];
            let released = book.release_in(
                victim.queue,
                &victim.spec.account,
                &victim.spec.user,
                victim.spec.namespace.as_deref(),
                victim.spec_amounts_held(),
            );
            debug_assert!(released.is_ok(), "victim {v} was admitted: {released:?}");
        };
        let mut book = self.quota.clone();
        let mut released = Vec::new();
        let mut placements = 0u32;
        let mut fits = false;
        for v in candidates {
            release_quota(self, &mut book, v);
            self.release_for_search(v);
            released.push(v);
            if !admitted(self, &book) {
                continue;
            }
            placements += 1;
            if self.place(&self.jobs[&id].spec, &nodes).is_ok() {
                fits = true;
                break;
            }
            if placements >= MAX_PLACEMENTS {
                break;
            }
        }
        if !fits {
            for &v in released.iter().rev() {
                self.rebook_after_search(v);
            }
            return Vec::new();
        }
        // Spare the victims the job does not need, most recently chosen first.
        let mut victims = released.clone();
        for &v in released.iter().rev() {
            let mut with_v = book.clone();
            let victim = &self.jobs[&v];
            let readmitted = with_v.admit_in(
                victim.queue,
                &victim.spec.account,
                &victim.spec.user,
                victim.spec.namespace.as_deref(),
                victim.spec_amounts_held(),
            );
            self.rebook_after_search(v);
            if readmitted.is_ok()
                && admitted(self, &with_v)
                && self.place(&self.jobs[&id].spec, &nodes).is_ok()
            {
                victims.retain(|&x| x != v);
                book = with_v;
            } else {
                self.release_for_search(v);
            }
        }
        for &v in &victims {
            self.rebook_after_search(v);
        }
        self.mark_victims(id, victims)
    }

    /// Amounts per node held by the victims a job awaits.
    pub(super) fn victim_amounts(&self, id: JobId) -> Vec<(NodeId, Amounts)> {
        let mut out: Vec<(NodeId, Amounts)> = Vec::new();
        for v in &self.jobs[&id].awaiting_victims {
            out.extend(self.jobs[v].per_node.iter().copied());
        }
        out.sort_by_key(|(n, _)| *n);
        out.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        out
    }

    fn release_for_search(&mut self, v: JobId) {
        let alloc = self.jobs[&v].allocation.clone().unwrap_or_default();
        self.cluster.release(v, &alloc);
    }

    fn rebook_after_search(&mut self, v: JobId) {
        let alloc = self.jobs[&v].allocation.clone().unwrap_or_default();
        let rebooked = self.cluster.restore(v, &alloc);
        // Nothing else changed the cluster during the search, so a victim's own resources
        // are free again for it.
        debug_assert!(
            rebooked.is_ok(),
            "re-booking victim {v} failed: {rebooked:?}"
        );
    }
}
