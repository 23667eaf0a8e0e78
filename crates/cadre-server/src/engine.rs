//! The controller's engine: the one thread that owns the scheduler and the store's writer
//! handle, fed by one command channel (API requests, agent messages, ticks).
//!
//! **Given** commands in arrival order. **Decided** here, per batch of commands drained
//! together: what the store commits (one transaction for all the batch's submissions, one
//! for the job changes), what the scheduler is told, and what the agents are sent.
//! **Must hold**:
//! - a submission is answered only after its commit (group commit: submissions that arrive
//!   together share one transaction);
//! - every change of a job's state is committed before anyone is told of it: agents get a
//!   launch only after the job's start is committed, submitters and agents get their
//!   answers and acknowledgements only after what they caused is committed;
//! - a store failure is fatal: the engine stops, and a restarted controller rebuilds from
//!   what was committed (nothing acknowledged is lost, nothing uncommitted was acted on);
//! - one run of a job is started once: a restarted controller adopts the runs its agents
//!   still have and requeues (by the job's policy) the runs whose tasks are gone; it never
//!   launches a committed run again.
//!
//! A run ends when every node's tasks have ended; its outcome is the worst node's. A job
//! whose run spec names completing groups (an MPIJob's launcher, a PyTorchJob's master) is
//! settled earlier: once every node holding tasks of those groups has reported them ended
//! (`Completing`, or its `Ended`), the outcome so far is fixed and the job's other tasks are
//! stopped on every node; how they end no longer counts.

mod steps;

pub use steps::IoHub;
pub(crate) use steps::{StepJob, step_view};

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::authority::check_spec_change;
use crate::metrics::Metrics;
use crate::queues::{QueueObjects, route_job};
use cadre_core::alloc::Allocation;
use cadre_core::cluster::{NodeAvail, NodeId};
use cadre_core::hostlist;
use cadre_core::job::{JobId, JobState};
use cadre_core::resources::MILLI_PER_GPU;
use cadre_core::scheduler::{CoreError, Decision, Event, Hold, PendingReason, Scheduler};
use cadre_core::time::{Dur, Time};
use cadre_k8s::CONTAINER_RUNTIME_FEATURE;
use cadre_proto::agent::{
    ControllerMessage, Hello, LaunchOrder, PROTOCOL_VERSION, RunRef, SequencedEvent, TaskEvent,
};
use cadre_proto::api::{
    ErrorCode, ErrorReason, QueueObjectsRequest, QueueObjectsResponse, StepEvent, StepRequest,
    StepView,
};
use cadre_store::{
    AssocUsage, JobChange, JobEvent, JobStatus, NewJob, NodeRecord, RunUsage, StepRecord, Store,
    StoreError,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc::UnboundedSender, oneshot};

/// Commands drained and handled together at most.
const MAX_BATCH: usize = 4096;

/// How often fair-share usage is saved (and at shutdown): what a crash can forget.
const USAGE_SAVE_INTERVAL: Duration = Duration::from_secs(60);

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// What a user asks of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobAction {
    Cancel,
    Signal(i32),
    Hold,
    Release,
    Requeue,
    SetTimeLimit(Dur),
    SetNice(i32),
    /// The client of an allocation is done with it: the job ends with this exit code.
    Complete(i32),
}

/// What an administrator asks of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAction {
    Drain { reason: String },
    Resume,
}

/// A read of the engine's live state, run on the engine thread.
pub type ReadFn = Box<dyn FnOnce(&Engine) + Send>;

/// What the engine is told.
pub enum Command {
    Submit {
        jobs: Vec<NewJob>,
        reply: Reply<Vec<JobId>>,
    },
    Job {
        who: Principal,
        id: JobId,
        action: JobAction,
        reply: Reply<()>,
    },
    Node {
        who: Principal,
        name: String,
        action: NodeAction,
        reply: Reply<()>,
    },
    Read(ReadFn),
    /// `srun` in a running job: a step, whose events go to `io`.
    StepCreate {
        who: Principal,
        id: JobId,
        request: Box<StepRequest>,
        io: UnboundedSender<StepEvent>,
        reply: Reply<StepView>,
    },
    /// Cancels a step, or sends its tasks a signal. Without a reply: its `srun` went away.
    StepCancel {
        who: Principal,
        id: JobId,
        step: u32,
        signal: Option<i32>,
        reply: Option<Reply<()>>,
    },
    /// Put and delete Kubernetes queue objects (administrators only).
    QueueObjects {
        who: Principal,
        request: Box<QueueObjectsRequest>,
        reply: Reply<QueueObjectsResponse>,
    },
    AgentHello {
        conn: u64,
        hello: Box<Hello>,
        tx: UnboundedSender<ControllerMessage>,
    },
    AgentEvent {
        conn: u64,
        event: SequencedEvent,
    },
    AgentGone {
        conn: u64,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

/// The engine's settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How long a node's agent may stay away before the node is marked down and its jobs
    /// are requeued (Slurm's `SlurmdTimeout`).
    pub node_timeout: Duration,
    /// Longest time between scheduling passes when nothing happens.
    pub sched_interval: Duration,
    /// Nodes whose GPUs are declared, not discovered.
    pub emulated_gpus: bool,
}

/// A connected agent.
struct AgentLink {
    conn: u64,
    tx: UnboundedSender<ControllerMessage>,
}

/// Where a node's agent is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Presence {
    Connected,
    /// Not connected since this instant (the controller's start, or the disconnection).
    Away(Instant),
    /// Away longer than the node timeout: the node is down.
    Lost,
}

/// One run of an active job as dispatch follows it.
#[derive(Clone, Debug)]
struct RunTrack {
    run: u32,
    allocation: Allocation,
    start_time: Time,
    /// Nodes whose tasks have not ended yet.
    nodes_left: BTreeSet<NodeId>,
    /// The worst outcome reported so far.
    outcome: JobState,
    exit_code: Option<i32>,
    /// The launch failed on some node: (why, whether retrying cannot help).
    launch_failed: Option<(String, bool)>,
    /// A stop was asked (cancel, requeue, preemption, node failure): resent to agents
    /// that reconnect with the run still alive.
    stop: Option<u64>,
    /// An allocation without a program of its own (`salloc`): it ends when its client
    /// completes it ([`JobAction::Complete`]).
    is_allocation: bool,
    /// A batch job's batch step (its script's run), for accounting; ended with the run.
    batch_step: Option<StepRecord>,
    /// For a job that completes with some of its groups (the run spec's
    /// `completing_groups`): the nodes holding tasks of those groups that have not all
    /// ended yet. Empty otherwise.
    completing_left: BTreeSet<NodeId>,
    /// Once every completing task has ended: the run's outcome and exit code, fixed. The
    /// other tasks are then stopped, and how they end does not count.
    settled: Option<(JobState, Option<i32>)>,
    /// The run spec's completing groups (what a node's `Completing` report is about).
    completing_groups: Option<Vec<u16>>,
}

impl RunTrack {
    /// A run that has just started (or was adopted) on every node of its allocation;
    /// `completing`: the run spec's completing groups.
    fn new(
        run: u32,
        allocation: Allocation,
        start_time: Time,
        completing: Option<&[u16]>,
    ) -> RunTrack {
        let completing_left = completing.map_or_else(BTreeSet::new, |groups| {
            allocation
                .tasks
                .iter()
                .filter(|t| groups.contains(&t.group))
                .map(|t| t.node)
                .collect()
        });
        RunTrack {
            run,
            nodes_left: allocation.nodes().into_iter().collect(),
            allocation,
            start_time,
            outcome: JobState::Completed,
            exit_code: None,
            launch_failed: None,
            stop: None,
            is_allocation: false,
            batch_step: None,
            completing_left,
            settled: None,
            completing_groups: completing.map(<[u16]>::to_vec),
        }
    }

    /// What the run spec says of how the run ends: a batch script's run ends with its
    /// first node's tasks (where the script runs; the other nodes only hold the job's
    /// resources, for its steps), an allocation's when its client completes it.
    fn shape_by(&mut self, run_spec: &cadre_core::run::RunSpec) {
        self.is_allocation = run_spec.allocation;
        if run_spec.script.is_some()
            && self.completing_left.is_empty()
            && let Some(&first) = self.allocation.nodes().first()
        {
            self.completing_left = [first].into_iter().collect();
        }
    }

    /// Records a node's outcome in the run's (the worst wins; the first failing exit code).
    fn record(&mut self, state: JobState, exit_code: Option<i32>) {
        if severity(state) > severity(self.outcome) {
            self.outcome = state;
        }
        if self.exit_code.is_none()
            || (exit_code.is_some_and(|c| c != 0) && self.exit_code == Some(0))
        {
            self.exit_code = exit_code.or(self.exit_code);
        }
    }
}

/// The engine: the scheduler, the store's writer handle, and dispatch.
pub struct Engine {
    pub(crate) sched: Scheduler,
    store: Box<dyn Store>,
    config: EngineConfig,
    metrics: Arc<Metrics>,
    links: BTreeMap<NodeId, AgentLink>,
    presence: Vec<Presence>,
    /// Whether each node's GPUs are emulated, as its agent last reported.
    emulated: Vec<bool>,
    /// Where each node's tasks can be reached, as its agent last reported.
    addresses: Vec<Option<String>>,
    /// Each node's container runtime, as its agent last reported.
    runtimes: Vec<Option<String>>,
    /// Each node's features as the cluster describes them, to which the features its agent
    /// reports are added.
    described_features: Vec<Vec<String>>,
    /// The administrator's word on each node (drain, down) and why.
    admin: Vec<(NodeAvail, Option<String>)>,
    runs: HashMap<JobId, RunTrack>,
    /// Why a job's last launch failed, for the API.
    launch_errors: HashMap<JobId, String>,
    /// Job changes waiting for the batch's commit.
    changes: Vec<JobChange>,
    /// Job events waiting for the batch's commit (with the changes, in one transaction).
    events: Vec<JobEvent>,
    /// The state each job not yet ended was last recorded in: a change of it is an event.
    recorded_state: HashMap<JobId, JobState>,
    /// The last pending reason recorded as an event, per pending job.
    recorded_reason: HashMap<JobId, PendingReason>,
    /// The Kubernetes queue objects applied, and the quotas they make with the policy's.
    queue_objects: QueueObjects,
    /// Messages to send once the batch is committed.
    outgoing: Vec<(NodeId, ControllerMessage)>,
    /// Acknowledgements to send once the batch is committed: connection and sequence.
    acks: BTreeMap<u64, (NodeId, u64)>,
    /// Answers to send once the batch is committed.
    replies: Vec<Box<dyn FnOnce() + Send>>,
    /// Job steps running, by (job, step).
    steps: BTreeMap<(JobId, u32), steps::StepTrack>,
    /// The next step number of jobs that have had a step since the controller started.
    next_steps: HashMap<JobId, u32>,
    /// Step rows waiting for the batch's commit.
    step_changes: Vec<StepRecord>,
    /// Specs changed after submission (time limit, nice), waiting for the batch's commit.
    spec_changes: Vec<(JobId, cadre_core::job::JobSpec)>,
    /// Where steps' events go.
    io: IoHub,
    dirty: bool,
    last_pass: Option<(Instant, Duration)>,
    last_usage_save: Instant,
}

/// Seconds since the Unix epoch: the engine's clock, read once per batch.
pub fn wall_now() -> Time {
    Time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

pub(crate) fn core_error(e: CoreError) -> ApiError {
    use cadre_core::scheduler::Refusal;
    let code = match &e {
        CoreError::UnknownJob(_) | CoreError::UnknownNode(_) => ErrorCode::NotFound,
        CoreError::InvalidJob { .. } | CoreError::InvalidQuotas { .. } => ErrorCode::InvalidRequest,
        CoreError::WrongState { .. } | CoreError::Transition(_) | CoreError::NotOnNode { .. } => {
            ErrorCode::Conflict
        }
        CoreError::DuplicateJob(_) | CoreError::Booking { .. } => ErrorCode::Internal,
    };
    match e {
        CoreError::InvalidJob { refusal, what, .. } => {
            let (reason, subject) = match refusal {
                Refusal::Spec => (ErrorReason::InvalidJobSpec, None),
                Refusal::UnknownPartition { subject } => {
                    (ErrorReason::UnknownPartition, Some(subject))
                }
                Refusal::NoDefaultPartition => (ErrorReason::NoDefaultPartition, None),
                Refusal::UnknownQos { subject } => (ErrorReason::UnknownQos, Some(subject)),
                Refusal::UnknownPriorityClass { subject } => {
                    (ErrorReason::UnknownPriorityClass, Some(subject))
                }
                Refusal::UnknownQueue { subject } => (ErrorReason::UnknownQueue, Some(subject)),
                Refusal::DependencyNotFound { subject } => {
                    (ErrorReason::DependencyNotFound, Some(subject))
                }
                Refusal::NoAssociation => (ErrorReason::NoAssociation, None),
                Refusal::Policy => (ErrorReason::PolicyRefused, None),
            };
            let error = ApiError::because(reason, what);
            match subject {
                Some(s) => error.about(s),
                None => error,
            }
        }
        other => ApiError::new(code, other.to_string()),
    }
}

/// The milli-GPUs, CPUs and node list an allocation holds, for accounting.
fn run_usage(sched: &Scheduler, alloc: &Allocation) -> RunUsage {
    let amounts = alloc.amounts();
    let names: Vec<&str> = alloc
        .nodes()
        .iter()
        .map(|&n| sched.cluster().node(n).name.as_str())
        .collect();
    RunUsage {
        gpu_milli: amounts.gpu_milli,
        cpus: amounts.cpus,
        nodes: hostlist::compress(&names),
    }
}

impl Engine {
    /// Rebuilds the engine from the store: every unfinished job back into the scheduler,
    /// running ones adopted with the allocation they hold.
    pub fn recover(
        mut sched: Scheduler,
        mut store: Box<dyn Store>,
        config: EngineConfig,
        metrics: Arc<Metrics>,
        io: IoHub,
    ) -> Result<Engine, RecoverError> {
        let now = wall_now();
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
        for rec in store.nodes()? {
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
        let queue_objects =
            QueueObjects::load(sched.policy().quotas.clone(), store.queue_objects()?).map_err(
                |e| RecoverError::Inconsistent(format!("the stored queue objects: {e}")),
            )?;
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
        }
        let mut restored = 0;
        for u in store.load_usage()? {
            if sched
                .restore_usage(&u.user, &u.account, u.raw_usage, u.as_of, now)
                .map_err(RecoverError::Core)?
            {
                restored += 1;
            }
        }
        let mut runs = HashMap::new();
        let mut requeue_after = Vec::new();
        let unfinished = store.unfinished_jobs()?;
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
            if let Some(j) = store.job(other)?
                && j.status.state.is_final()
            {
                sched
                    .handle(
                        Event::RestoreEnded {
                            id: other,
                            state: j.status.state,
                        },
                        now,
                    )
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
                    let run_spec = store.run_spec(id).ok().flatten();
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
        let started_at = Instant::now();
        let mut engine = Engine {
            sched,
            store,
            config: config.clone(),
            metrics,
            links: BTreeMap::new(),
            presence: vec![Presence::Away(started_at); node_count],
            emulated: vec![config.emulated_gpus; node_count],
            addresses: vec![None; node_count],
            runtimes: vec![None; node_count],
            described_features,
            admin,
            runs,
            launch_errors: HashMap::new(),
            changes: Vec::new(),
            events: Vec::new(),
            recorded_state,
            recorded_reason: HashMap::new(),
            queue_objects,
            outgoing: Vec::new(),
            acks: BTreeMap::new(),
            replies: Vec::new(),
            steps: BTreeMap::new(),
            next_steps: HashMap::new(),
            step_changes: Vec::new(),
            spec_changes: Vec::new(),
            io,
            dirty: true,
            last_pass: None,
            last_usage_save: Instant::now(),
        };
        for id in requeue_after {
            let decisions = engine
                .sched
                .handle(Event::Requeue { id }, now)
                .map_err(RecoverError::Core)?;
            engine.apply(decisions, now);
        }
        engine.recover_steps(now).map_err(RecoverError::Store)?;
        engine.commit().map_err(RecoverError::Store)?;
        tracing::info!(
            jobs = adopted,
            usage = restored,
            queue_objects = engine.queue_objects.records().len(),
            "recovered queue objects, unfinished jobs and fair-share usage from the store"
        );
        Ok(engine)
    }

    /// Runs the engine until a shutdown command or a fatal store error.
    pub fn run(mut self, rx: Receiver<Command>) -> Result<(), StoreError> {
        let mut batch: Vec<Command> = Vec::new();
        loop {
            let wait = self.until_next_pass();
            match rx.recv_timeout(wait) {
                Ok(cmd) => batch.push(cmd),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => batch.push(cmd),
                    Err(_) => break,
                }
            }
            let now = wall_now();
            let mut shutdown = None;
            let mut submits = Vec::new();
            for cmd in batch.drain(..) {
                match cmd {
                    Command::Submit { jobs, reply } => submits.push((jobs, reply)),
                    Command::Shutdown { reply } => shutdown = Some(reply),
                    other => self.handle(other, now),
                }
            }
            self.submit(submits, now)?;
            self.check_presence(now);
            if self.pass_due() {
                self.pass(now);
            }
            self.commit()?;
            if shutdown.is_some() || self.last_usage_save.elapsed() >= USAGE_SAVE_INTERVAL {
                self.save_usage(now)?;
            }
            if let Some(reply) = shutdown {
                tracing::info!("engine stopped");
                let _ = reply.send(());
                return Ok(());
            }
        }
    }

    /// Saves the fair-share usage as of `now`.
    fn save_usage(&mut self, now: Time) -> Result<(), StoreError> {
        let usage: Vec<AssocUsage> = self
            .sched
            .usage_snapshot(now)
            .into_iter()
            .map(|(user, account, raw_usage)| AssocUsage {
                user,
                account,
                raw_usage,
                as_of: now,
            })
            .collect();
        self.store.save_usage(&usage)?;
        self.last_usage_save = Instant::now();
        Ok(())
    }

    /// Time to wait for commands before the next pass is due.
    fn until_next_pass(&self) -> Duration {
        match self.last_pass {
            None => Duration::ZERO,
            Some((at, took)) => {
                let next = if self.dirty {
                    at + took
                } else {
                    at + self.config.sched_interval
                };
                next.saturating_duration_since(Instant::now())
                    .min(self.config.sched_interval)
            }
        }
    }

    /// Whether to run a scheduling pass now: something changed and the last pass is at
    /// least its own duration ago (so that passes take at most half the engine's time
    /// under a storm of submissions), or the interval has passed.
    fn pass_due(&self) -> bool {
        match self.last_pass {
            None => true,
            Some((at, took)) => {
                let since = at.elapsed();
                (self.dirty && since >= took) || since >= self.config.sched_interval
            }
        }
    }

    fn pass(&mut self, now: Time) {
        let t0 = Instant::now();
        let decisions = self.sched.schedule(now);
        let took = t0.elapsed();
        self.metrics.observe_cycle(took);
        self.last_pass = Some((Instant::now(), took));
        self.dirty = false;
        self.apply(decisions, now);
        self.pending_events(now);
    }

    /// Commits the batch's job changes, then sends what waited for them.
    fn commit(&mut self) -> Result<(), StoreError> {
        if !self.changes.is_empty() || !self.events.is_empty() {
            self.store.record_with_events(&self.changes, &self.events)?;
            self.changes.clear();
            self.events.clear();
        }
        if !self.spec_changes.is_empty() {
            self.store.update_specs(&self.spec_changes)?;
            self.spec_changes.clear();
        }
        if !self.step_changes.is_empty() {
            self.store.record_steps(&self.step_changes)?;
            self.step_changes.clear();
        }
        for reply in self.replies.drain(..) {
            reply();
        }
        for (node, msg) in self.outgoing.drain(..) {
            if let Some(link) = self.links.get(&node) {
                let _ = link.tx.send(msg);
            }
        }
        for (conn, (node, seq)) in std::mem::take(&mut self.acks) {
            if let Some(link) = self.links.get(&node).filter(|l| l.conn == conn) {
                let _ = link.tx.send(ControllerMessage::Ack { seq });
            }
        }
        Ok(())
    }

    fn submit(
        &mut self,
        requests: Vec<(Vec<NewJob>, Reply<Vec<JobId>>)>,
        now: Time,
    ) -> Result<(), StoreError> {
        if requests.is_empty() {
            return Ok(());
        }
        let mut accepted: Vec<(Vec<NewJob>, Reply<Vec<JobId>>)> = Vec::new();
        for (mut jobs, reply) in requests {
            let mut refused = None;
            for job in &mut jobs {
                job.spec.submit_time = now;
                self.default_time_limit(&mut job.spec);
                if let Err(e) = route_job(&self.queue_objects, &mut job.spec) {
                    refused = Some(ApiError::new(ErrorCode::InvalidRequest, e));
                    break;
                }
                if let Err(e) = self.sched.validate(JobId(u64::MAX), &job.spec) {
                    refused = Some(core_error(e));
                    break;
                }
                if let Some(p) = job.spec.partition.clone() {
                    job.partition = p;
                } else if let Some(p) = self.sched.cluster().default_partition() {
                    job.partition = self.sched.cluster().partition(p).name.clone();
                }
            }
            match refused {
                Some(e) => {
                    let _ = reply.send(Err(e));
                }
                None => accepted.push((jobs, reply)),
            }
        }
        // One batch for every request; array positions become positions in the batch.
        let mut all: Vec<NewJob> = Vec::new();
        let mut replies = Vec::with_capacity(accepted.len());
        for (jobs, reply) in accepted {
            let offset = all.len();
            replies.push((jobs.len(), reply));
            all.extend(jobs.into_iter().map(|mut j| {
                j.array_of = j.array_of.map(|p| p + offset);
                j
            }));
        }
        let ids = self.store.submit_batch(&all)?;
        self.metrics.submitted(ids.len() as u64);
        let mut jobs = all.into_iter().zip(ids.iter().copied());
        for (n, reply) in replies {
            let mut mine = Vec::with_capacity(n);
            for (mut job, id) in jobs.by_ref().take(n) {
                job.resolve_array(&ids);
                self.recorded_state.insert(id, JobState::Pending);
                let spec = Box::new(job.spec);
                if let Err(e) = self.sched.handle(Event::Submit { id, spec }, now) {
                    // Validated a moment ago on this thread; only a bug gets here.
                    tracing::error!(job = %id, error = %e, "committed job refused by the scheduler");
                }
                mine.push(id);
            }
            let _ = reply.send(Ok(mine));
        }
        self.dirty = true;
        Ok(())
    }

    /// A job that gives no time limit gets its partition's default, else its maximum (as
    /// Slurm's DefaultTime falls back to MaxTime), so that it is not refused by the very
    /// partition it did not ask a limit of.
    fn default_time_limit(&self, spec: &mut cadre_core::job::JobSpec) {
        if spec.time_limit.0 != 0 {
            return;
        }
        let cluster = self.sched.cluster();
        let partition = match &spec.partition {
            Some(name) => cluster.partition_id(name),
            None => cluster.default_partition(),
        };
        if let Some(p) = partition {
            let p = cluster.partition(p);
            if let Some(limit) = p.default_time.or(p.max_time) {
                spec.time_limit = limit;
            }
        }
    }

    fn handle(&mut self, cmd: Command, now: Time) {
        match cmd {
            Command::Job {
                who,
                id,
                action,
                reply,
            } => {
                let result = self.job_action(&who, id, action, now);
                self.replies.push(Box::new(move || {
                    let _ = reply.send(result);
                }));
            }
            Command::Node {
                who,
                name,
                action,
                reply,
            } => {
                let result = self.node_action(&who, &name, action, now);
                self.replies.push(Box::new(move || {
                    let _ = reply.send(result);
                }));
            }
            Command::Read(f) => f(self),
            Command::StepCreate {
                who,
                id,
                request,
                io,
                reply,
            } => {
                let result = self.step_create(&who, id, &request, io, now);
                self.replies.push(Box::new(move || {
                    let _ = reply.send(result);
                }));
            }
            Command::QueueObjects {
                who,
                request,
                reply,
            } => {
                let result = self.queue_objects_change(&who, &request, now);
                self.replies.push(Box::new(move || {
                    let _ = reply.send(result);
                }));
            }
            Command::StepCancel {
                who,
                id,
                step,
                signal,
                reply,
            } => {
                let result = self.step_cancel(&who, id, step, signal);
                if let Some(reply) = reply {
                    self.replies.push(Box::new(move || {
                        let _ = reply.send(result);
                    }));
                }
            }
            Command::AgentHello { conn, hello, tx } => self.hello(conn, *hello, tx, now),
            Command::AgentEvent { conn, event } => {
                if let Some(node) = self.node_of_conn(conn) {
                    self.task_event(node, event.event, now);
                    self.acks.insert(conn, (node, event.seq));
                }
            }
            Command::AgentGone { conn } => {
                if let Some(node) = self.node_of_conn(conn) {
                    self.links.remove(&node);
                    self.presence[node.0 as usize] = Presence::Away(Instant::now());
                    tracing::warn!(node = %self.node_name(node), "agent disconnected");
                    self.refresh_avail(node, now);
                }
            }
            Command::Submit { .. } | Command::Shutdown { .. } => {}
        }
    }

    fn node_of_conn(&self, conn: u64) -> Option<NodeId> {
        self.links
            .iter()
            .find(|(_, l)| l.conn == conn)
            .map(|(&n, _)| n)
    }

    /// The names of `nodes`, and the addresses their agents reported, for a launch order.
    fn names_and_addresses(
        &self,
        nodes: &[NodeId],
    ) -> (BTreeMap<NodeId, String>, BTreeMap<NodeId, String>) {
        let names = nodes
            .iter()
            .map(|&n| (n, self.node_name(n).to_owned()))
            .collect();
        let addresses = nodes
            .iter()
            .filter_map(|&n| Some((n, self.addresses[n.0 as usize].clone()?)))
            .collect();
        (names, addresses)
    }

    pub(crate) fn node_name(&self, node: NodeId) -> &str {
        &self.sched.cluster().node(node).name
    }

    pub(crate) fn is_connected(&self, node: NodeId) -> bool {
        self.links.contains_key(&node)
    }

    /// Whether any node's GPUs are emulated.
    pub(crate) fn emulated_gpus(&self) -> bool {
        self.emulated.iter().any(|&e| e)
    }

    pub(crate) fn node_emulated(&self, node: NodeId) -> bool {
        self.emulated[node.0 as usize]
    }

    pub(crate) fn node_runtime(&self, node: NodeId) -> Option<&str> {
        self.runtimes[node.0 as usize].as_deref()
    }

    /// The node's features: the cluster's, and those of what its agent reported (a
    /// container runtime). The scheduler is told when they change.
    fn report_features(&mut self, node: NodeId, now: Time) {
        let mut features = self.described_features[node.0 as usize].clone();
        if self.runtimes[node.0 as usize].is_some()
            && !features.iter().any(|f| f == CONTAINER_RUNTIME_FEATURE)
        {
            features.push(CONTAINER_RUNTIME_FEATURE.to_string());
        }
        if self.sched.cluster().node(node).features == features {
            return;
        }
        tracing::info!(node = %self.node_name(node), ?features, "node features");
        match self
            .sched
            .handle(Event::SetNodeFeatures { node, features }, now)
        {
            Ok(decisions) => self.apply(decisions, now),
            Err(e) => tracing::error!(error = %e, "the scheduler refused the node's features"),
        }
        self.dirty = true;
    }

    pub(crate) fn launch_error(&self, id: JobId) -> Option<&str> {
        self.launch_errors.get(&id).map(String::as_str)
    }

    /// The job's owner, from the scheduler or (for a finished job) the store.
    fn owner(&mut self, id: JobId) -> Result<(String, Option<JobState>), ApiError> {
        if let Some(job) = self.sched.job(id) {
            return Ok((job.spec.user.clone(), Some(job.state)));
        }
        match self.store.job(id)? {
            Some(job) => Ok((job.spec.user, None)),
            None => Err(ApiError::new(
                ErrorCode::NotFound,
                format!("job {id} does not exist"),
            )),
        }
    }

    fn job_action(
        &mut self,
        who: &Principal,
        id: JobId,
        action: JobAction,
        now: Time,
    ) -> Result<(), ApiError> {
        let (owner, live) = self.owner(id)?;
        if owner != who.user && !who.admin {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "job {id} belongs to user `{owner}`; `{}` may not change it",
                    who.user
                ),
            ));
        }
        let Some(state) = live else {
            let final_state = self
                .store
                .job(id)?
                .map_or(JobState::Completed, |j| j.status.state);
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("job {id} has already ended ({final_state})"),
            ));
        };
        let cancel = action == JobAction::Cancel;
        let event = match action {
            JobAction::Cancel => Event::Cancel { id },
            JobAction::Signal(signal) => {
                let Some(track) = self.runs.get(&id) else {
                    return Err(ApiError::new(
                        ErrorCode::Conflict,
                        format!("job {id} is {state}; only a running job can be signalled"),
                    ));
                };
                let run = RunRef::job_run(id, track.run);
                for &node in &track.nodes_left {
                    self.outgoing
                        .push((node, ControllerMessage::Signal { run, signal }));
                }
                return Ok(());
            }
            JobAction::Complete(code) => {
                let Some(track) = self.runs.get_mut(&id) else {
                    return Err(ApiError::new(
                        ErrorCode::Conflict,
                        format!("job {id} is {state}; only a running allocation can be completed"),
                    ));
                };
                if !track.is_allocation {
                    return Err(ApiError::new(
                        ErrorCode::Conflict,
                        format!(
                            "job {id} runs a program of its own; only an allocation (salloc, srun) is completed by its client"
                        ),
                    ));
                }
                if track.settled.is_none() {
                    let outcome = if code == 0 {
                        JobState::Completed
                    } else {
                        JobState::Failed
                    };
                    track.settled = Some((outcome, Some(code)));
                    self.stop(id, Dur(1));
                }
                return Ok(());
            }
            JobAction::Hold => Event::Hold {
                id,
                admin: who.admin,
            },
            JobAction::Release => {
                if self.sched.job(id).and_then(|j| j.hold) == Some(Hold::Admin) && !who.admin {
                    return Err(ApiError::new(
                        ErrorCode::Forbidden,
                        format!("job {id} was held by an administrator; only one may release it"),
                    ));
                }
                Event::Release { id }
            }
            JobAction::Requeue => Event::Requeue { id },
            JobAction::SetTimeLimit(limit) => {
                self.check_update(who, id, |s| s.time_limit = limit)?;
                Event::SetTimeLimit { id, limit }
            }
            JobAction::SetNice(nice) => {
                self.check_update(who, id, |s| s.nice = nice)?;
                Event::SetNice { id, nice }
            }
        };
        let spec_changed = matches!(event, Event::SetTimeLimit { .. } | Event::SetNice { .. });
        let decisions = self.sched.handle(event, now).map_err(core_error)?;
        if cancel {
            self.event(
                id,
                now,
                "Deleted",
                false,
                format!("cancelled by user {}", who.user),
            );
        }
        self.apply(decisions, now);
        if spec_changed && let Some(job) = self.sched.job(id) {
            let spec = job.spec.clone();
            self.retime(id, spec.time_limit);
            self.spec_changes.push((id, spec));
        }
        self.note_change(id, now);
        self.dirty = true;
        Ok(())
    }

    /// Whether `who` may change job `id`'s spec so, by the rules a submission is held to
    /// as well ([`check_spec_change`]). A job the scheduler no longer has is left to the
    /// scheduler to refuse.
    fn check_update(
        &self,
        who: &Principal,
        id: JobId,
        change: impl FnOnce(&mut cadre_core::job::JobSpec),
    ) -> Result<(), ApiError> {
        let Some(job) = self.sched.job(id) else {
            return Ok(());
        };
        let mut wanted = job.spec.clone();
        change(&mut wanted);
        check_spec_change(who, Some(&job.spec), &wanted)
    }

    /// A running job's time limit changed: its nodes and its steps' are told (a step's
    /// limit counts from its own start, the job's from the job's).
    fn retime(&mut self, id: JobId, limit: Dur) {
        let Some(track) = self.runs.get(&id) else {
            return;
        };
        let ms = |from_job_start: u64| {
            (limit.0 > 0).then(|| limit.0.saturating_sub(from_job_start).saturating_mul(1000))
        };
        let run = RunRef::job_run(id, track.run);
        for &node in &track.nodes_left {
            self.outgoing.push((
                node,
                ControllerMessage::SetTimeLimit {
                    run,
                    time_limit_ms: ms(0),
                },
            ));
        }
        let job_start = track.start_time;
        for st in self.steps.range((id, 0)..=(id, u32::MAX)).map(|(_, s)| s) {
            let offset = st.record.start_time.0.saturating_sub(job_start.0);
            let key = RunRef {
                job: id,
                run: st.run,
                step: Some(st.record.step),
            };
            for &node in &st.nodes_left {
                self.outgoing.push((
                    node,
                    ControllerMessage::SetTimeLimit {
                        run: key,
                        time_limit_ms: ms(offset),
                    },
                ));
            }
        }
    }

    /// The Kubernetes queue objects applied, and the quotas they make.
    pub(crate) fn queue_objects(&self) -> &QueueObjects {
        &self.queue_objects
    }

    /// Puts and deletes queue objects: checked whole (the objects, then the quota
    /// configuration they make, by the scheduler's own rules), committed, then given to the
    /// scheduler. Nothing changes on error.
    fn queue_objects_change(
        &mut self,
        who: &Principal,
        request: &QueueObjectsRequest,
        now: Time,
    ) -> Result<QueueObjectsResponse, ApiError> {
        if !who.admin {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "only an administrator may apply or delete queue objects; `{}` is not one",
                    who.user
                ),
            ));
        }
        let invalid = |e: String| ApiError::new(ErrorCode::InvalidRequest, e);
        let namespace = request.namespace.as_deref().unwrap_or("default");
        let change = self
            .queue_objects
            .change(&request.put, &request.delete, namespace, now)
            .map_err(invalid)?;
        let quotas = change.next.quotas().map_err(invalid)?;
        self.sched
            .validate_quotas(&quotas)
            .map_err(|e| invalid(core_error(e).message))?;
        let response = QueueObjectsResponse {
            results: change.results,
        };
        if request.dry_run || (change.put.is_empty() && change.delete.is_empty()) {
            return Ok(response);
        }
        self.store
            .change_queue_objects(&change.put, &change.delete)?;
        self.queue_objects = change.next;
        let decisions = self
            .sched
            .handle(
                Event::SetQuotas {
                    quotas: Box::new(quotas),
                },
                now,
            )
            .map_err(core_error)?;
        self.apply(decisions, now);
        tracing::info!(
            objects = self.queue_objects.records().len(),
            "queue objects changed: quotas replaced"
        );
        self.dirty = true;
        Ok(response)
    }

    fn node_action(
        &mut self,
        who: &Principal,
        name: &str,
        action: NodeAction,
        now: Time,
    ) -> Result<(), ApiError> {
        if !who.admin {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("only an administrator may change node `{name}`"),
            ));
        }
        let node = self.sched.cluster().node_id(name).ok_or_else(|| {
            ApiError::new(ErrorCode::NotFound, format!("node `{name}` does not exist"))
        })?;
        self.admin[node.0 as usize] = match action {
            NodeAction::Drain { reason } => (NodeAvail::Drain, Some(reason)),
            NodeAction::Resume => (NodeAvail::Up, None),
        };
        let (avail, reason) = self.admin[node.0 as usize].clone();
        self.store.upsert_nodes(&[NodeRecord {
            name: name.to_owned(),
            avail,
            reason,
            emulated_gpus: self.config.emulated_gpus,
            updated: now,
        }])?;
        self.refresh_avail(node, now);
        Ok(())
    }

    /// Drains a node whose agent failed to launch a job, recording why (durably).
    fn drain_on_failure(&mut self, node: NodeId, reason: &str, now: Time) {
        if self.admin[node.0 as usize].0 != NodeAvail::Up {
            return;
        }
        let why = format!("launch failed: {reason}");
        tracing::warn!(node = %self.node_name(node), reason = %why, "node drained");
        self.admin[node.0 as usize] = (NodeAvail::Drain, Some(why.clone()));
        let record = NodeRecord {
            name: self.node_name(node).to_owned(),
            avail: NodeAvail::Drain,
            reason: Some(why),
            emulated_gpus: self.emulated[node.0 as usize],
            updated: now,
        };
        if let Err(e) = self.store.upsert_nodes(&[record]) {
            tracing::error!(error = %e, "failed to record the drain");
        }
        self.refresh_avail(node, now);
    }

    /// Tells the scheduler the node's availability: the administrator's word, unless its
    /// agent is away (unknown) or lost (down).
    fn refresh_avail(&mut self, node: NodeId, now: Time) {
        let (admin, admin_reason) = self.admin[node.0 as usize].clone();
        let (avail, reason) = match self.presence[node.0 as usize] {
            _ if admin == NodeAvail::Down => (NodeAvail::Down, admin_reason),
            Presence::Connected => (admin, admin_reason),
            Presence::Away(_) => (NodeAvail::Unknown, Some("agent not connected".into())),
            Presence::Lost => (NodeAvail::Down, Some("agent not responding".into())),
        };
        let current = &self.sched.cluster().node(node);
        if current.avail == avail && current.reason == reason {
            return;
        }
        match self.sched.handle(
            Event::NodeAvail {
                node,
                avail,
                reason,
            },
            now,
        ) {
            Ok(decisions) => self.apply(decisions, now),
            Err(e) => tracing::error!(error = %e, "node availability refused"),
        }
        self.dirty = true;
    }

    /// Marks nodes whose agents stayed away too long as lost: their runs' tasks count as
    /// gone (the scheduler stops the rest of each gang and requeues it by policy).
    fn check_presence(&mut self, now: Time) {
        for n in 0..self.presence.len() {
            if let Presence::Away(since) = self.presence[n]
                && since.elapsed() >= self.config.node_timeout
            {
                let node = NodeId(n as u32);
                tracing::warn!(node = %self.node_name(node), "agent lost: node down");
                self.presence[n] = Presence::Lost;
                self.refresh_avail(node, now);
                let on_node: Vec<JobId> = self
                    .runs
                    .iter()
                    .filter(|(_, t)| t.nodes_left.contains(&node))
                    .map(|(&id, _)| id)
                    .collect();
                for id in on_node {
                    self.node_done(id, node, JobState::NodeFail, None, now);
                }
            }
        }
    }

    /// Carries out the scheduler's decisions (after the commit of the batch).
    fn apply(&mut self, decisions: Vec<Decision>, now: Time) {
        for d in decisions {
            match d {
                Decision::Start { job, allocation } => self.start(job, allocation, now),
                Decision::Preempt {
                    victim, by, grace, ..
                } => {
                    self.event(
                        victim,
                        now,
                        "Preempted",
                        true,
                        format!("stopping within {} s so that job {by} can run", grace.0),
                    );
                    self.note_change(victim, now);
                    self.stop(victim, grace);
                }
                Decision::Stop { job, grace, .. } => self.stop(job, grace),
                Decision::Reserve(_) => {}
            }
        }
    }

    fn start(&mut self, id: JobId, allocation: Allocation, now: Time) {
        let Some(job) = self.sched.job(id) else {
            return;
        };
        let run = RunRef::job_run(id, job.requeues);
        if let Some(eligible) = job.eligible_since {
            self.metrics
                .observe_wait(Duration::from_secs(now.0.saturating_sub(eligible.0)));
        }
        let spec = job.spec.clone();
        let partition = self.sched.cluster().partition(job.partition).name.clone();
        let time_limit_ms = (spec.time_limit.0 > 0).then(|| spec.time_limit.0.saturating_mul(1000));
        self.note_change(id, now);
        self.launch_errors.remove(&id);
        let nodes = allocation.nodes();
        let run_spec = self.store.run_spec(id);
        let completing = match &run_spec {
            Ok(Some(r)) => r.completing_groups.clone(),
            _ => None,
        };
        let mut track = RunTrack::new(run.run, allocation.clone(), now, completing.as_deref());
        if let Ok(Some(r)) = &run_spec {
            track.shape_by(r);
            if r.script.is_some()
                && let Some(&first) = nodes.first()
            {
                let rec = StepRecord {
                    job: id,
                    step: cadre_proto::api::BATCH_STEP,
                    name: "batch".into(),
                    state: JobState::Running,
                    nodes: self.node_name(first).to_owned(),
                    ntasks: 1,
                    cpus: allocation
                        .tasks
                        .iter()
                        .filter(|t| t.node == first)
                        .map(|t| t.cores.len() as u64)
                        .sum(),
                    start_time: now,
                    end_time: None,
                    exit_code: None,
                    command: "batch".into(),
                };
                self.step_changes.push(rec.clone());
                track.batch_step = Some(rec);
            }
        }
        self.runs.insert(id, track);
        let run_spec = match run_spec {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => {
                // Without what to run there is nothing to launch: fail the launch on every
                // node, permanently, so the job is held with the reason.
                let why = format!("job {id} has no stored run spec");
                for node in nodes {
                    self.node_launch_failed(id, node, why.clone(), true, now);
                }
                return;
            }
        };
        let (node_names, node_addresses) = self.names_and_addresses(&nodes);
        let order = LaunchOrder {
            run,
            spec,
            partition,
            allocation,
            node_names,
            node_addresses,
            run_spec,
            time_limit_ms,
            step: None,
        };
        for node in nodes {
            if self.links.contains_key(&node) {
                self.outgoing
                    .push((node, ControllerMessage::Launch(Box::new(order.clone()))));
            } else {
                // Its agent went away since the pass: the gang cannot start whole.
                self.node_launch_failed(id, node, "agent not connected".into(), false, now);
            }
        }
    }

    /// Tells `nodes` to stop `run` (SIGTERM, then SIGKILL after `kill_wait_secs`), once the
    /// batch is committed.
    fn send_stop(
        &mut self,
        run: RunRef,
        nodes: impl IntoIterator<Item = NodeId>,
        kill_wait_secs: u64,
    ) {
        for node in nodes {
            self.outgoing.push((
                node,
                ControllerMessage::Stop {
                    run,
                    kill_wait_secs,
                },
            ));
        }
    }

    fn stop(&mut self, id: JobId, grace: Dur) {
        let Some(track) = self.runs.get_mut(&id) else {
            return;
        };
        let run = RunRef::job_run(id, track.run);
        let kill_wait_secs = grace.0.max(1);
        track.stop = Some(kill_wait_secs);
        let nodes: Vec<NodeId> = track.nodes_left.iter().copied().collect();
        self.send_stop(run, nodes, kill_wait_secs);
        self.stop_steps(id, kill_wait_secs);
    }

    /// Queues the job's current status for the batch's commit.
    fn note_change(&mut self, id: JobId, now: Time) {
        if let Some(status) = self.status_of(id, now) {
            if status.state.is_final() {
                self.launch_errors.remove(&id);
            }
            self.transition_events(id, &status, now);
            self.changes.push(JobChange {
                id,
                status,
                ended_run: None,
            });
        }
    }

    /// The job's status as the store should record it now.
    fn status_of(&self, id: JobId, now: Time) -> Option<JobStatus> {
        let track = self.runs.get(&id);
        if let Some(job) = self.sched.job(id) {
            let reason = match job.hold {
                Some(Hold::User) => PendingReason::JobHeldUser,
                Some(Hold::Admin) => PendingReason::JobHeldAdmin,
                None => job.reason.clone(),
            };
            return Some(JobStatus {
                state: job.state,
                reason,
                start_time: job.start_time.or(track.map(|t| t.start_time)),
                end_time: None,
                allocation: job
                    .allocation
                    .clone()
                    .or_else(|| track.map(|t| t.allocation.clone())),
                exit_code: track.and_then(|t| t.exit_code),
                requeues: job.requeues,
            });
        }
        let state = self.sched.ended_state(id)?;
        Some(JobStatus {
            state,
            reason: PendingReason::None,
            start_time: track.map(|t| t.start_time),
            end_time: Some(now),
            allocation: track.map(|t| t.allocation.clone()),
            exit_code: track.and_then(|t| t.exit_code),
            requeues: track.map_or(0, |t| t.run),
        })
    }

    fn hello(
        &mut self,
        conn: u64,
        hello: Hello,
        tx: UnboundedSender<ControllerMessage>,
        now: Time,
    ) {
        let refuse = |reason: String| {
            tracing::warn!(node = %hello.node, %reason, "agent refused");
            let _ = tx.send(ControllerMessage::Refused { reason });
        };
        if hello.version != PROTOCOL_VERSION {
            return refuse(format!(
                "agent protocol version {} is not supported; this controller speaks version {PROTOCOL_VERSION}",
                hello.version
            ));
        }
        let Some(node) = self.sched.cluster().node_id(&hello.node) else {
            let names: Vec<&str> = self
                .sched
                .cluster()
                .nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect();
            return refuse(format!(
                "node `{}` is not in the cluster (its nodes are {})",
                hello.node,
                hostlist::compress(&names)
            ));
        };
        let want = self.sched.cluster().shape(node).capacity();
        let have = hello.report.shape.capacity();
        if have.cpus < want.cpus || have.mem_mib < want.mem_mib || have.gpu_milli < want.gpu_milli {
            return refuse(format!(
                "node `{}` has {} cores, {} MiB and {} GPUs, fewer than the cluster describes ({} cores, {} MiB, {} GPUs)",
                hello.node,
                have.cpus,
                have.mem_mib,
                have.gpu_milli / u64::from(MILLI_PER_GPU),
                want.cpus,
                want.mem_mib,
                want.gpu_milli / u64::from(MILLI_PER_GPU)
            ));
        }
        let _ = tx.send(ControllerMessage::Welcome {
            version: PROTOCOL_VERSION,
            node_id: node,
        });
        if let Some(old) = self.links.insert(node, AgentLink { conn, tx }) {
            tracing::info!(node = %hello.node, old = old.conn, "agent reconnected; the older connection is dropped");
        }
        self.presence[node.0 as usize] = Presence::Connected;
        self.emulated[node.0 as usize] = hello.report.emulated_gpus;
        self.addresses[node.0 as usize] = Some(hello.report.address.clone());
        self.runtimes[node.0 as usize] = hello.report.container_runtime.clone();
        self.report_features(node, now);
        tracing::info!(node = %hello.node, conn, running = hello.running.len(), outbox = hello.outbox.len(), emulated = hello.report.emulated_gpus, "agent connected");
        let mut last_seq = None;
        for ev in hello.outbox {
            last_seq = Some(ev.seq);
            self.task_event(node, ev.event, now);
        }
        if let Some(seq) = last_seq {
            self.acks.insert(conn, (node, seq));
        }
        // Reconcile what runs there with what the controller thinks runs there.
        let alive: BTreeSet<RunRef> = hello.running.iter().copied().collect();
        let mine: Vec<(JobId, u32, Option<u64>)> = self
            .runs
            .iter()
            .filter(|(_, t)| t.nodes_left.contains(&node))
            .map(|(&id, t)| (id, t.run, t.stop))
            .collect();
        for (id, run, stop) in mine {
            let r = RunRef::job_run(id, run);
            if alive.contains(&r) {
                if let Some(kill_wait_secs) = stop {
                    self.send_stop(r, [node], kill_wait_secs);
                }
            } else {
                tracing::warn!(job = %id, node = %hello.node, "run's tasks are gone from the node");
                self.node_done(id, node, JobState::NodeFail, None, now);
            }
        }
        self.reconcile_steps(node, &alive, now);
        for r in alive.into_iter().filter(|r| r.step.is_none()) {
            let current = self
                .runs
                .get(&r.job)
                .is_some_and(|t| t.run == r.run && t.nodes_left.contains(&node));
            if !current {
                tracing::warn!(job = %r.job, run = r.run, node = %hello.node, "agent runs a run the controller does not: stopping it");
                self.send_stop(r, [node], cadre_core::run::DEFAULT_KILL_WAIT_SECS);
            }
        }
        let _ = self.store.upsert_nodes(&[NodeRecord {
            name: hello.node.clone(),
            avail: self.admin[node.0 as usize].0,
            reason: self.admin[node.0 as usize].1.clone(),
            emulated_gpus: hello.report.emulated_gpus,
            updated: now,
        }]);
        self.refresh_avail(node, now);
    }

    fn task_event(&mut self, node: NodeId, event: TaskEvent, now: Time) {
        let run = event.run();
        if run.step.is_some() {
            return self.step_event(node, run, event, now);
        }
        let current = self
            .runs
            .get(&run.job)
            .is_some_and(|t| t.run == run.run && t.nodes_left.contains(&node));
        if !current {
            tracing::debug!(job = %run.job, run = run.run, "event of a run that is over: ignored");
            return;
        }
        match event {
            TaskEvent::Started { .. } => {
                tracing::debug!(job = %run.job, node = %self.node_name(node), "tasks started");
            }
            TaskEvent::LaunchFailed {
                reason, permanent, ..
            } => {
                if !permanent {
                    // The node could not start what it was given, through no fault of the
                    // job: drained for an administrator to look at, as Slurm drains a node
                    // whose launch failed, so the requeued job does not bounce off it again.
                    self.drain_on_failure(node, &reason, now);
                }
                self.node_launch_failed(run.job, node, reason, permanent, now)
            }
            TaskEvent::Ended {
                state, exit_code, ..
            } => {
                self.task_failure_event(run.job, node, state, exit_code, false, now);
                self.node_done(run.job, node, state, exit_code, now)
            }
            TaskEvent::Completing {
                state, exit_code, ..
            } => {
                self.task_failure_event(run.job, node, state, exit_code, true, now);
                self.node_completing(run.job, node, state, exit_code)
            }
        }
    }

    /// Records an event for a job.
    fn event(&mut self, job: JobId, now: Time, kind: &str, warning: bool, message: String) {
        self.events.push(JobEvent {
            job,
            at: now,
            kind: kind.to_owned(),
            warning,
            message,
        });
    }

    /// The tasks of a node (of the completing groups only, with `completing`), as
    /// `group/rank` words.
    fn tasks_on(&self, id: JobId, node: NodeId, completing: bool) -> String {
        let Some(t) = self.runs.get(&id) else {
            return String::new();
        };
        let only = t.completing_groups.as_deref().filter(|_| completing);
        let groups = self.sched.job(id).map(|j| &j.spec.groups);
        let mut tasks: Vec<(u16, u32)> = t
            .allocation
            .tasks
            .iter()
            .filter(|x| x.node == node && only.is_none_or(|g| g.contains(&x.group)))
            .map(|x| (x.group, x.rank))
            .collect();
        tasks.sort_unstable();
        tasks
            .into_iter()
            .map(|(g, r)| {
                let name = groups
                    .and_then(|gs| gs.get(usize::from(g)))
                    .map_or_else(|| g.to_string(), |x| x.name.clone());
                format!("{name}/{r}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A node reports its tasks of a run (its completing groups' tasks, with `completing`)
    /// ended badly while nothing asked them to stop: a rank failure (`TasksFailed`), or
    /// the node's tasks lost (`NodeLost`).
    fn task_failure_event(
        &mut self,
        id: JobId,
        node: NodeId,
        state: JobState,
        exit_code: Option<i32>,
        completing: bool,
        now: Time,
    ) {
        let Some(t) = self.runs.get(&id) else {
            return;
        };
        let reported = if completing {
            t.completing_left.contains(&node)
        } else {
            t.nodes_left.contains(&node)
        };
        if t.stop.is_some() || t.settled.is_some() || !reported {
            return;
        }
        let (kind, what) = match state {
            JobState::Failed | JobState::OutOfMemory | JobState::Timeout => {
                ("TasksFailed", format!("ended {state}"))
            }
            JobState::NodeFail => (
                "NodeLost",
                "were lost (their agent no longer has them)".to_string(),
            ),
            _ => return,
        };
        let code = exit_code.map_or_else(String::new, |c| format!(" with exit code {c}"));
        let message = format!(
            "tasks {} on {} {what}{code}",
            self.tasks_on(id, node, completing),
            self.node_name(node)
        );
        self.event(id, now, kind, true, message);
    }

    /// The events a recorded change of a job's state makes: started (where, through which
    /// queue), back in the queue, ended (how).
    fn transition_events(&mut self, id: JobId, status: &JobStatus, now: Time) {
        let old = self.recorded_state.get(&id).copied();
        let new = status.state;
        if old == Some(new) {
            return;
        }
        if new.is_final() {
            self.recorded_state.remove(&id);
            self.recorded_reason.remove(&id);
        } else {
            self.recorded_state.insert(id, new);
        }
        match new {
            JobState::Running if old != Some(JobState::Preempting) => {
                self.recorded_reason.remove(&id);
                let (nodes, tasks) = status.allocation.as_ref().map_or_else(
                    || (String::new(), 0),
                    |a| (run_usage(&self.sched, a).nodes, a.tasks.len()),
                );
                let queue = self
                    .sched
                    .job(id)
                    .and_then(|j| j.spec.queue.clone())
                    .map_or_else(String::new, |q| format!(", admitted by queue {q}"));
                let run = if status.requeues > 0 {
                    format!(" (run {})", status.requeues)
                } else {
                    String::new()
                };
                self.event(
                    id,
                    now,
                    "Started",
                    false,
                    format!(
                        "{} started on {nodes}{queue}{run}",
                        if tasks == 1 {
                            "its task".to_string()
                        } else {
                            format!("all {tasks} tasks")
                        }
                    ),
                );
            }
            JobState::Pending if old.is_some_and(JobState::is_active) => {
                self.event(
                    id,
                    now,
                    "Requeued",
                    true,
                    format!(
                        "the gang went back to the queue whole (requeue {})",
                        status.requeues
                    ),
                );
            }
            s if s.is_final() => {
                let kind = match s {
                    JobState::Completed => "Completed",
                    JobState::Failed => "Failed",
                    JobState::Cancelled => "Cancelled",
                    JobState::Timeout => "DeadlineExceeded",
                    JobState::NodeFail => "NodeFail",
                    JobState::OutOfMemory => "OOMKilled",
                    JobState::Preempted => "Preempted",
                    _ => "Ended",
                };
                let code = status
                    .exit_code
                    .map_or_else(String::new, |c| format!(" (exit code {c})"));
                self.event(
                    id,
                    now,
                    kind,
                    s != JobState::Completed,
                    format!("the job ended {s}{code}"),
                );
            }
            _ => {}
        }
    }

    /// After a pass: a pending job whose reason became one worth telling (a quota or limit,
    /// a missing queue, resources, constraints it can never meet) gets a `Pending` event,
    /// once per reason in a row; `Priority` and waiting on dependencies are not told (they
    /// change at every pass), nor `ReqNodeNotAvail` (every queued job has it while agents
    /// are away, as at a controller's start: a burst of writes that says nothing per job;
    /// `describe` shows it as the job's reason now).
    fn pending_events(&mut self, now: Time) {
        let mut new = Vec::new();
        for job in self.sched.jobs() {
            if job.state != JobState::Pending {
                continue;
            }
            let tell = matches!(
                job.reason,
                PendingReason::Limit(_)
                    | PendingReason::InvalidQueue
                    | PendingReason::Resources
                    | PendingReason::BadConstraints
                    | PendingReason::PartitionTimeLimit
                    | PendingReason::PartitionDown
                    | PendingReason::DependencyNeverSatisfied
            );
            if tell && self.recorded_reason.get(&job.id) != Some(&job.reason) {
                new.push((job.id, job.reason.clone()));
            }
        }
        for (id, reason) in new {
            let message = match self.sched.reason_detail(id) {
                Some(detail) => format!("{reason}: {detail}"),
                None => match &reason {
                    PendingReason::Resources => {
                        "Resources: not enough free resources for the whole gang now".into()
                    }
                    PendingReason::BadConstraints => {
                        "BadConstraints: it can never run on this cluster as asked".into()
                    }
                    PendingReason::InvalidQueue => "InvalidQueue: its queue does not exist".into(),
                    other => other.to_string(),
                },
            };
            self.event(id, now, "Pending", true, message);
            self.recorded_reason.insert(id, reason);
        }
    }

    /// The tasks of the completing groups on `node` have all ended, with this outcome
    /// over the node's ended tasks. Once every node's have, the run's outcome is settled
    /// and its other tasks are stopped: an MPI job is done when its launcher is, and its
    /// workers' `sshd` does not run on until the time limit.
    fn node_completing(
        &mut self,
        id: JobId,
        node: NodeId,
        state: JobState,
        exit_code: Option<i32>,
    ) {
        let Some(t) = self.runs.get_mut(&id) else {
            return;
        };
        if t.settled.is_some() || !t.completing_left.remove(&node) {
            return;
        }
        t.record(state, exit_code);
        if t.completing_left.is_empty() {
            t.settled = Some((t.outcome, t.exit_code));
            tracing::info!(job = %id, outcome = %t.outcome, "completing groups done: stopping the job's other tasks");
            // What still runs is not the job's work: no grace beyond a second to end.
            self.stop(id, Dur(1));
        }
    }

    fn node_launch_failed(
        &mut self,
        id: JobId,
        node: NodeId,
        reason: String,
        permanent: bool,
        now: Time,
    ) {
        tracing::warn!(job = %id, node = %self.node_name(node), %reason, permanent, "launch failed");
        if self
            .runs
            .get(&id)
            .is_some_and(|t| t.nodes_left.contains(&node))
        {
            let message = format!(
                "the gang could not start on node {}: {reason}",
                self.node_name(node)
            );
            self.event(id, now, "LaunchFailed", true, message);
        }
        if let Some(t) = self.runs.get_mut(&id) {
            let msg = format!(
                "launch failed on {}: {reason}",
                self.sched.cluster().node(node).name
            );
            t.launch_failed = Some((
                msg,
                permanent || t.launch_failed.as_ref().is_some_and(|f| f.1),
            ));
        }
        // The rest of the gang must not run without this part.
        self.stop(id, Dur(0));
        self.node_done(id, node, JobState::Failed, None, now);
    }

    /// The run's tasks on `node` are gone, with this outcome; once every node's are, the
    /// job's run is over and the scheduler learns it.
    fn node_done(
        &mut self,
        id: JobId,
        node: NodeId,
        state: JobState,
        exit_code: Option<i32>,
        now: Time,
    ) {
        let Some(t) = self.runs.get_mut(&id) else {
            return;
        };
        if !t.nodes_left.remove(&node) {
            return;
        }
        let was_settled = t.settled.is_some();
        match t.settled {
            // Stopped after the completing groups were done: the outcome is fixed.
            Some((outcome, code)) => {
                t.outcome = outcome;
                t.exit_code = code;
            }
            None => {
                t.record(state, exit_code);
                // A node's end is also the end of its completing tasks.
                if t.completing_left.remove(&node) && t.completing_left.is_empty() {
                    t.settled = Some((t.outcome, t.exit_code));
                    if !t.nodes_left.is_empty() {
                        tracing::info!(job = %id, outcome = %t.outcome, "completing groups done: stopping the job's other tasks");
                        self.stop(id, Dur(1));
                    }
                }
            }
        }
        // The node's tasks vanished (lost agent, or gone at a restart): a node failure for
        // this job; the scheduler stops the rest of the gang and requeues it by policy.
        // Not once its completing groups had settled its outcome: what was lost was being
        // stopped anyway.
        if state == JobState::NodeFail && !was_settled {
            match self.sched.handle(Event::Lost { id, node }, now) {
                Ok(decisions) => self.apply(decisions, now),
                Err(e) => tracing::debug!(job = %id, error = %e, "lost tasks of a stopping job"),
            }
        }
        let Some(t) = self.runs.get(&id) else {
            return;
        };
        if !t.nodes_left.is_empty() {
            return;
        }
        let usage = run_usage(&self.sched, &t.allocation);
        let launch_failed = t.launch_failed.clone();
        let event = match &launch_failed {
            Some((why, _)) => Event::LaunchFailed {
                id,
                reason: why.clone(),
            },
            None => Event::Ended {
                id,
                outcome: t.outcome,
            },
        };
        match self.sched.handle(event, now) {
            Ok(decisions) => self.apply(decisions, now),
            Err(e) => {
                tracing::error!(job = %id, error = %e, "run end refused by the scheduler");
                self.runs.remove(&id);
                return;
            }
        }
        if let Some((why, permanent)) = launch_failed {
            self.launch_errors.insert(id, why);
            if permanent && self.sched.job(id).is_some() {
                // Retrying cannot help: held for an administrator, as Slurm holds a job
                // whose launch failed.
                let _ = self.sched.handle(Event::Hold { id, admin: true }, now);
            }
        }
        if let Some(status) = self.status_of(id, now) {
            self.transition_events(id, &status, now);
            self.changes.push(JobChange {
                id,
                status,
                ended_run: Some(usage),
            });
        }
        if let Some(mut b) = self.runs.remove(&id).and_then(|t| {
            let (outcome, code) = (t.outcome, t.exit_code);
            t.batch_step.map(|mut b| {
                b.state = outcome;
                b.exit_code = code;
                b
            })
        }) {
            b.end_time = Some(now);
            self.step_changes.push(b);
        }
        self.end_steps(id, now);
        self.dirty = true;
    }
}

/// How bad an outcome is, for the gang's outcome: the worst node's.
fn severity(s: JobState) -> u8 {
    match s {
        JobState::Completed => 0,
        JobState::Failed => 1,
        JobState::OutOfMemory => 2,
        JobState::Timeout => 3,
        JobState::NodeFail => 4,
        JobState::Preempted => 5,
        JobState::Cancelled => 6,
        _ => 0,
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

/// Why the engine could not be rebuilt from the store.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the stored jobs do not fit the cluster: {0}")]
    Core(CoreError),
    #[error("the store is inconsistent: {0}")]
    Inconsistent(String),
}

/// A handle to send commands to the engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    io: IoHub,
}

impl EngineHandle {
    pub fn new(tx: Sender<Command>, io: IoHub) -> EngineHandle {
        EngineHandle { tx, io }
    }

    /// Where steps' output goes (straight from the agents' connections, not through the
    /// engine thread).
    pub fn io(&self) -> &IoHub {
        &self.io
    }

    pub fn send(&self, cmd: Command) -> Result<(), ApiError> {
        self.tx
            .send(cmd)
            .map_err(|_| ApiError::new(ErrorCode::Unavailable, "the controller is shutting down"))
    }

    /// Sends a command carrying a reply channel and waits for the answer.
    pub async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx))?;
        rx.await
            .map_err(|_| ApiError::new(ErrorCode::Unavailable, "the controller is shutting down"))?
    }

    /// Runs `f` on the engine thread against its live state.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Read(Box::new(move |e| {
            let _ = tx.send(f(e));
        })))?;
        rx.await
            .map_err(|_| ApiError::new(ErrorCode::Unavailable, "the controller is shutting down"))
    }
}
