//! Explain: why a job waits, as a pure function of the scheduler's state.
//!
//! The reason is the one the last pass gave (Slurm's names: Priority, Resources,
//! Dependency, ...). On request the explanation also lists, node by node, why the job's
//! tasks cannot use each node of its partition now, the priority factors, and the start
//! time backfill planned for it.

use super::backlog::LargestFirst;
use super::{PendingReason, Scheduler};
use crate::job::{JobId, JobState};
use crate::placement;
use crate::priority::Factors;
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// Why one node cannot take the job now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeWhyNot {
    pub node: String,
    pub why: String,
}

/// Everything the scheduler can say about a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    pub job: JobId,
    pub state: JobState,
    /// The pending reason (`None` for a job that is not pending).
    pub reason: PendingReason,
    pub priority: u64,
    pub factors: Option<Factors>,
    /// The start time backfill planned, if it planned one.
    pub expected_start: Option<Time>,
    /// A pending job the last pass found starving (waiting longer than the policy's
    /// `starvation_wait`) and put first in its partition, with a reservation of its own:
    /// when it became eligible.
    pub starving_since: Option<Time>,
    /// The job carries that mark because work has stopped arriving at its partition and
    /// it would end the backlog last (the policy's `drain_longest_first`), not for its wait.
    pub ends_backlog: bool,
    /// Its job-size factor favours larger jobs: the last pass found its partition's backlog
    /// within the policy's `largest_first_within`, or too little small work left to fill
    /// the gaps its gangs would leave (`largest_first_gaps_percent`: then
    /// `largest_first_for_gaps` too).
    #[serde(default)]
    pub largest_first: bool,
    /// Its job-size factor favours larger jobs for the gaps (`largest_first_gaps_percent`),
    /// not for a shallow backlog.
    #[serde(default)]
    pub largest_first_for_gaps: bool,
    /// Per node of the job's partition, why it cannot take the job now (only nodes that
    /// cannot; with `nodes = false`, empty).
    pub nodes: Vec<NodeWhyNot>,
}

impl Scheduler {
    /// Explains a job that has not ended; `nodes` adds the per-node why-not.
    pub fn explain(&self, id: JobId, now: Time, nodes: bool) -> Option<Explanation> {
        let job = self.jobs.get(&id)?;
        let per_node = if nodes && job.state == JobState::Pending {
            self.cluster
                .partition(job.partition)
                .nodes
                .iter()
                .filter_map(|&n| {
                    placement::why_not(&self.cluster, &job.spec, n).map(|why| NodeWhyNot {
                        node: self.cluster.node(n).name.clone(),
                        why: why.to_string(),
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let starving_since = job
            .starving_since
            .filter(|_| job.state == JobState::Pending);
        // Marked, but not for its wait: the drain's mark (see `drain_longest_first`).
        let backfill = &self.policy.backfill;
        let ends_backlog =
            starving_since.is_some_and(|since| !backfill.starving_after(now.since(since)));
        let largest_first = (job.state == JobState::Pending)
            .then(|| self.largest_first_in(job.partition))
            .flatten();
        Some(Explanation {
            job: id,
            state: job.state,
            reason: if job.state == JobState::Pending {
                job.reason.clone()
            } else {
                PendingReason::None
            },
            priority: self.priority(job),
            factors: (job.state == JobState::Pending)
                .then(|| self.factors(id, now))
                .flatten(),
            expected_start: self.expected_start(id),
            starving_since,
            ends_backlog,
            largest_first: largest_first.is_some(),
            largest_first_for_gaps: largest_first == Some(LargestFirst::Gaps),
            nodes: per_node,
        })
    }

    /// The start time backfill planned for a pending job (`squeue --start`).
    pub fn expected_start(&self, id: JobId) -> Option<Time> {
        self.reservations
            .iter()
            .find(|r| r.job == id)
            .map(|r| r.start)
    }
}
