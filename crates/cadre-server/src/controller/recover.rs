//! A controller rebuilt from what the store committed.
//!
//! **Given** a [`Snapshot`] of the store (nodes, queue objects, fair-share usage, the jobs
//! not yet ended with what they run, the steps not yet ended). **Decided** here: every
//! unfinished job back into the scheduler (running ones adopted with the allocation they
//! hold, preempting ones requeued), every node away until its agent says hello. **Must
//! hold**: nothing is launched again; what recovery changes is committed before the
//! controller takes its first input.

use super::presence::Presence;
use super::run::RunTrack;
use super::{Comm, Controller, ControllerConfig, NodeHealth, Now, StoreFailed, Transaction};
use crate::queues::QueueObjects;
use cadre_core::cluster::{NodeAvail, NodeId};
use cadre_core::job::{JobId, JobState};
use cadre_core::run::RunSpec;
use cadre_core::scheduler::{CoreError, Event, Hold, PendingReason, Scheduler};
use cadre_core::time::Time;
use cadre_store::{
    AssocUsage, NodeRecord, QueueObjectRecord, StepFilter, StepRecord, Store, StoreError,
    StoredJob, SubmitKey,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a restarted controller reads of the store.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<NodeRecord>,
    pub queue_objects: Vec<QueueObjectRecord>,
    pub usage: Vec<AssocUsage>,
    pub unfinished: Vec<StoredJob>,
    /// The final states of ended jobs that unfinished jobs depend on.
    pub ended: HashMap<JobId, JobState>,
    /// What each running job runs.
    pub run_specs: HashMap<JobId, RunSpec>,
    /// Steps not yet ended.
    pub steps: Vec<StepRecord>,
    /// The idempotency keys of recent submissions.
    pub submit_keys: Vec<SubmitKey>,
}

impl Snapshot {
    /// Reads what recovery needs.
    /// `now`: the wall clock, for the idempotency keys still answered ([`super::KEYS_KEPT`]).
    pub fn load(store: &mut dyn Store, now: Time) -> Result<Snapshot, StoreError> {
        let unfinished = store.unfinished_jobs()?;
        let mut ended = HashMap::new();
        for job in &unfinished {
            for dep in &job.spec.dependencies {
                if let cadre_core::job::Dependency::On { job: other, .. } = dep
                    && !ended.contains_key(other)
                    && let Some(j) = store.job(*other)?
                {
                    ended.insert(*other, j.status.state);
                }
            }
        }
        let mut run_specs = HashMap::new();
        for job in &unfinished {
            if matches!(job.status.state, JobState::Running | JobState::Preempting)
                && let Some(spec) = store.run_spec(job.id)?
            {
                run_specs.insert(job.id, spec);
            }
        }
        Ok(Snapshot {
            nodes: store.nodes()?,
            queue_objects: store.queue_objects()?,
            usage: store.load_usage()?,
            unfinished,
            ended,
            run_specs,
            steps: store.steps(&StepFilter {
                jobs: Vec::new(),
                unfinished: true,
            })?,
            submit_keys: store.submit_keys(Time(now.0.saturating_sub(super::KEYS_KEPT.0)))?,
        })
    }
}

/// The hold a stored pending reason records.
fn held_by(reason: &PendingReason) -> Option<Hold> {
    match reason {
        PendingReason::JobHeldUser => Some(Hold::User),
        PendingReason::JobHeldAdmin => Some(Hold::Admin),
        _ => None,
    }
}

/// Why the controller could not be rebuilt from the store.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Failed(StoreFailed),
    #[error("the stored jobs do not fit the cluster: {0}")]
    Core(CoreError),
    #[error("the store is inconsistent: {0}")]
    Inconsistent(String),
}

impl Controller {
    /// Rebuilds the controller from a snapshot of the store: every unfinished job back into
    /// the scheduler, running ones adopted with the allocation they hold. What recovery
    /// changes (preempting jobs requeued, steps of ended jobs closed) is committed through
    /// `c` before it returns.
    pub fn recover(
        mut sched: Scheduler,
        config: ControllerConfig,
        snapshot: Snapshot,
        clock: Now,
        c: &mut dyn Comm,
    ) -> Result<Controller, RecoverError> {
        let now = clock.wall;
        let Snapshot {
            nodes,
            queue_objects,
            usage,
            unfinished,
            ended,
            mut run_specs,
            steps,
            submit_keys,
        } = snapshot;
        let node_count = sched.cluster().nodes.len();
        // The description's word first (a node described drained or down stays so), then
        // what administrators changed since, as the store recorded it.
        let mut admin: Vec<(NodeAvail, Option<String>)> = sched
            .cluster()
            .nodes
            .iter()
            .map(|n| match n.avail {
                NodeAvail::Drain | NodeAvail::Down => (n.avail, n.reason.clone()),
                NodeAvail::Up | NodeAvail::Unknown => (NodeAvail::Up, None),
            })
            .collect();
        for rec in nodes {
            if let Some(id) = sched.cluster().node_id(&rec.name) {
                admin[id.0 as usize] = match rec.avail {
                    NodeAvail::Drain | NodeAvail::Down => (rec.avail, rec.reason),
                    NodeAvail::Up | NodeAvail::Unknown => (NodeAvail::Up, None),
                };
            }
        }
        // Every node is away until its agent says hello.
        for n in 0..node_count {
            sched
                .handle(
                    Event::NodeAvail {
                        node: NodeId(n as u32),
                        avail: NodeAvail::Unknown,
                        reason: Some("agent not connected".into()),
                    },
                    now,
                )
                .map_err(RecoverError::Core)?;
        }
        // The queues come back before the jobs, so that jobs count in the queues they ran in.
        let queue_objects = QueueObjects::load(sched.policy().quotas.clone(), queue_objects)
            .map_err(|e| RecoverError::Inconsistent(format!("the stored queue objects: {e}")))?;
        if !queue_objects.records().is_empty() {
            let quotas = queue_objects.quotas().map_err(|e| {
                RecoverError::Inconsistent(format!("the stored queue objects: {e}"))
            })?;
            sched
                .handle(
                    Event::SetQuotas {
                        quotas: Box::new(quotas),
                    },
                    now,
                )
                .map_err(RecoverError::Core)?;
            sched
                .handle(
                    Event::SetPriorityClasses {
                        classes: queue_objects.priority_classes(),
                    },
                    now,
                )
                .map_err(RecoverError::Core)?;
        }
        let mut restored = 0;
        for u in usage {
            if sched
                .restore_usage(&u.user, &u.account, u.raw_usage, u.as_of, now)
                .map_err(RecoverError::Core)?
            {
                restored += 1;
            }
        }
        let mut runs = HashMap::new();
        let mut requeue_after = Vec::new();
        let recorded_state: HashMap<JobId, JobState> =
            unfinished.iter().map(|j| (j.id, j.status.state)).collect();
        let adopted = unfinished.len();
        // Jobs that ended before the restart and that restored jobs depend on.
        let mut ended_deps = BTreeSet::new();
        for job in &unfinished {
            for dep in &job.spec.dependencies {
                if let cadre_core::job::Dependency::On { job: other, .. } = dep {
                    ended_deps.insert(*other);
                }
            }
        }
        for other in ended_deps {
            if let Some(&state) = ended.get(&other)
                && state.is_final()
            {
                sched
                    .handle(Event::RestoreEnded { id: other, state }, now)
                    .map_err(RecoverError::Core)?;
            }
        }
        for job in unfinished {
            let id = job.id;
            match job.status.state {
                JobState::Pending => {
                    sched
                        .handle(
                            Event::RestorePending {
                                id,
                                spec: Box::new(job.spec),
                                requeues: job.status.requeues,
                                hold: held_by(&job.status.reason),
                            },
                            now,
                        )
                        .map_err(RecoverError::Core)?;
                }
                JobState::Running | JobState::Preempting => {
                    let allocation = job.status.allocation.clone().ok_or_else(|| {
                        RecoverError::Inconsistent(format!(
                            "job {id} is {} without an allocation",
                            job.status.state
                        ))
                    })?;
                    let start_time = job.status.start_time.unwrap_or(now);
                    sched
                        .handle(
                            Event::Adopt {
                                id,
                                spec: Box::new(job.spec),
                                allocation: allocation.clone(),
                                start_time,
                                requeues: job.status.requeues,
                            },
                            now,
                        )
                        .map_err(RecoverError::Core)?;
                    // The preemptor it was stopping for is not remembered across a restart:
                    // the stop goes on as an administrator's requeue would.
                    if job.status.state == JobState::Preempting {
                        requeue_after.push(id);
                    }
                    // A job completing with some groups (or a batch script, or an
                    // allocation) goes on doing so after a restart.
                    let run_spec = run_specs.remove(&id);
                    let completing = run_spec.as_ref().and_then(|r| r.completing_groups.clone());
                    let mut track = RunTrack::new(
                        job.status.requeues,
                        allocation,
                        start_time,
                        completing.as_deref(),
                    );
                    if let Some(r) = &run_spec {
                        track.shape_by(r);
                    }
                    // It ran before the restart: started wherever it still runs.
                    track.started_on = track.nodes_left.clone();
                    runs.insert(id, track);
                }
                _ => {}
            }
        }
        let described_features: Vec<Vec<String>> = sched
            .cluster()
            .nodes
            .iter()
            .map(|n| n.features.clone())
            .collect();
        let mut controller = Controller {
            sched,
            config: config.clone(),
            presence: vec![Presence::Away { since: clock.mono }; node_count],
            conns: HashMap::new(),
            emulated: vec![config.emulated_gpus; node_count],
            addresses: vec![None; node_count],
            runtimes: vec![None; node_count],
            described_features,
            admin,
            health: vec![NodeHealth::default(); node_count],
            applied: vec![Default::default(); node_count],
            agent_versions: vec![None; node_count],
            launch_failures: HashMap::new(),
            runs,
            launch_errors: HashMap::new(),
            tx: Transaction::default(),
            submissions: Vec::new(),
            submit_keys: submit_keys
                .iter()
                .map(|k| {
                    let ids = (0..k.count).map(|i| JobId(k.first.0 + i)).collect();
                    ((k.user.clone(), k.key.clone()), ids)
                })
                .collect(),
            submit_key_times: submit_keys
                .into_iter()
                .map(|k| (k.at, (k.user, k.key)))
                .collect(),
            recorded_state,
            recorded_reason: HashMap::new(),
            queue_objects,
            outgoing: Vec::new(),
            acks: BTreeMap::new(),
            replies: Vec::new(),
            step_ends: Vec::new(),
            steps: BTreeMap::new(),
            next_steps: HashMap::new(),
            fatal: None,
            dirty: true,
            last_usage_save: clock.mono,
        };
        for id in requeue_after {
            let decisions = controller
                .sched
                .handle(Event::Requeue { id }, now)
                .map_err(RecoverError::Core)?;
            controller.apply(c, decisions, now);
        }
        controller.recover_steps(steps, now);
        // A job that waited for its LocalQueue whose route was not committed with the queue
        // objects (the controller died between the two writes) is routed now.
        controller.route_waiting(now);
        controller.flush(c);
        if let Some(e) = controller.fatal.take() {
            return Err(RecoverError::Failed(e));
        }
        tracing::info!(
            jobs = adopted,
            usage = restored,
            queue_objects = controller.queue_objects.records().len(),
            "recovered queue objects, unfinished jobs and fair-share usage from the store"
        );
        Ok(controller)
    }
}
