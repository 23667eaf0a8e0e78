//! The controller's logic: a synchronous state machine with no I/O and no clock, the way
//! the scheduling core is. The I/O shell ([`crate::engine`]) feeds it [`Input`]s one at a
//! time, with the time they happen at ([`Now`]), and carries out what it asks through
//! [`Comm`]: commits to the store, messages to agents, replies, metric updates.
//!
//! **Given** inputs in arrival order: API commands, agent messages, and the end of each
//! batch of them ([`Input::Tick`], which carries whether a scheduling pass is due).
//! **Decided** here, per batch: what the store commits (one call for all the batch's
//! submissions, one transaction for the rest), what the scheduler is told, and what the
//! agents are sent.
//! **Must hold**:
//! - a submission is answered only after its commit (group commit: submissions that arrive
//!   together share one store call);
//! - every change of a job's state is committed before anyone is told of it: agents get a
//!   launch only after the job's start is committed, submitters and agents get their
//!   answers and acknowledgements only after what they caused is committed;
//! - a store failure is fatal, wherever it happens (a commit, or a read the controller
//!   needs): [`Controller::handle`] returns it, nothing decided after the last good commit
//!   is sent, and the shell stops; a restarted controller rebuilds from what was committed
//!   (nothing acknowledged is lost, nothing uncommitted was acted on);
//! - one run of a job is started once: a restarted controller adopts the runs its agents
//!   still have and requeues (by the job's policy) the runs whose tasks are gone; it never
//!   launches a committed run again.
//!
//! A run ends when every node's tasks have ended; its outcome is the worst node's. A job
//! whose run spec names completing groups (an MPIJob's launcher, a PyTorchJob's master) is
//! settled earlier: once every node holding tasks of those groups has reported them ended
//! (`Completing`, or its `Ended`), the outcome so far is fixed and the job's other tasks are
//! stopped on every node; how they end no longer counts. A node's presence and a run's
//! lifecycle each move by one transition function ([`presence`], [`run`]).

pub mod presence;
mod recover;
mod replay;
pub mod run;
mod steps;
#[cfg(test)]
pub(crate) mod tests;

pub use recover::RecoverError;
pub(crate) use recover::Snapshot;
pub(crate) use steps::{StepJob, step_view};

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::authority::check_spec_change;
use crate::queues::{
    QueueObjects, check_object_quotas, is_workload, route_job, waiting_for_local_queue,
    waiting_routes,
};
use cadre_core::alloc::Allocation;
use cadre_core::cluster::{NodeAvail, NodeId};
use cadre_core::hostlist;
use cadre_core::job::{JobId, JobState};
use cadre_core::resources::MILLI_PER_GPU;
use cadre_core::run::RunSpec;
use cadre_core::scheduler::{CoreError, Decision, Event, Hold, PendingReason, Scheduler};
use cadre_core::time::{Dur, Time};
use cadre_k8s::CONTAINER_RUNTIME_FEATURE;
use cadre_proto::agent::{
    AgentSettings, ControllerMessage, Hello, LEASE_FROM_PINGS_VERSION, LaunchOrder,
    OLDEST_AGENT_VERSION, PROTOCOL_VERSION, RunRef, SequencedEvent, TaskEvent,
};
use cadre_proto::api::{
    ErrorCode, ErrorReason, QueueObjectsRequest, QueueObjectsResponse, StepEvent, StepRequest,
    StepView,
};
use cadre_store::{
    AssocUsage, JobChange, JobEvent, JobStatus, NewJob, NewSubmitKey, NodeRecord, QueueObjectKey,
    QueueObjectRecord, RunUsage, StepRecord, StoreError, StoredJob,
};
use presence::{Presence, PresenceEvent};
use replay::AppliedEvents;
use run::{RunEvent, RunTrack};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// How often fair-share usage is saved (and at shutdown): what a crash can forget.
const USAGE_SAVE_INTERVAL: Duration = Duration::from_secs(60);

/// The time an input happens at: the wall clock (what the store and the scheduler count
/// in) and a monotonic clock (what timeouts count in, immune to the wall clock's jumps).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Now {
    pub wall: Time,
    /// Since an instant the shell chose (its start).
    pub mono: Duration,
}

/// Who an answer goes to: a number the shell gave the request it is waiting on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplyTo(pub u64);

/// An answer to one request.
#[derive(Debug)]
pub enum Answer {
    Submitted(Result<Vec<JobId>, ApiError>),
    Done(Result<(), ApiError>),
    Step(Result<StepView, ApiError>),
    QueueObjects(Result<QueueObjectsResponse, ApiError>),
}

/// A metric the controller moves.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Jobs accepted.
    Submitted(u64),
    /// A job started after waiting this long since it became eligible.
    Waited(Duration),
}

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

/// What the controller is told.
#[derive(Debug)]
pub enum Input {
    /// Jobs to submit, all or none; with `dry_run`, checked exactly as a submission is (the
    /// same preparation: default time limit, queue routing, the scheduler's validation,
    /// the partition) and answered with no ids, nothing committed (`sbatch --test-only`).
    Submit {
        jobs: Vec<NewJob>,
        dry_run: bool,
        /// The request's idempotency key: a request with a key already committed (by this
        /// controller or a replica that led before) is answered with that one's jobs.
        key: Option<String>,
        reply: ReplyTo,
    },
    Job {
        who: Principal,
        id: JobId,
        action: JobAction,
        reply: ReplyTo,
    },
    Node {
        who: Principal,
        name: String,
        action: NodeAction,
        reply: ReplyTo,
    },
    /// `srun` in a running job: a step. Its answer is the step's view; its end is told
    /// with [`Comm::step_ended`].
    StepCreate {
        who: Principal,
        id: JobId,
        request: Box<StepRequest>,
        reply: ReplyTo,
    },
    /// Cancels a step, or sends its tasks a signal. Without a reply: its `srun` went away.
    StepCancel {
        who: Principal,
        id: JobId,
        step: u32,
        signal: Option<i32>,
        reply: Option<ReplyTo>,
    },
    /// Put and delete Kubernetes queue objects (administrators only).
    QueueObjects {
        who: Principal,
        request: Box<QueueObjectsRequest>,
        reply: ReplyTo,
    },
    /// An agent said hello on a connection.
    AgentHello {
        conn: u64,
        hello: Box<Hello>,
    },
    AgentEvent {
        conn: u64,
        event: SequencedEvent,
    },
    /// An agent's node's health changed: what its checks find wrong, if anything.
    AgentHealth {
        conn: u64,
        problem: Option<String>,
    },
    /// A connection closed; `last_heard`: when its last frame came, on the controller's
    /// monotonic clock (from which its agent's lease is counted).
    AgentGone {
        conn: u64,
        last_heard: Duration,
    },
    /// The end of a batch of inputs: the batch's submissions are committed and given to
    /// the scheduler, nodes away too long are lost, a scheduling pass runs if `pass`, and
    /// what the batch decided is committed and then sent.
    Tick {
        pass: bool,
    },
    /// The last input: fair-share usage is saved and everything is committed.
    Shutdown,
}

/// One transaction's worth of what the controller decided.
#[derive(Debug, Default)]
pub struct Transaction {
    /// Queue objects put and deleted (one `cadre apply` or `cadre delete` each).
    pub queue_objects: Vec<(Vec<QueueObjectRecord>, Vec<QueueObjectKey>)>,
    /// Administrators' and the controller's word on nodes.
    pub nodes: Vec<NodeRecord>,
    pub changes: Vec<JobChange>,
    pub events: Vec<JobEvent>,
    /// Specs changed after submission (time limit, nice).
    pub specs: Vec<(JobId, cadre_core::job::JobSpec)>,
    pub steps: Vec<StepRecord>,
    pub usage: Vec<AssocUsage>,
}

impl Transaction {
    /// Writes the transaction to `store`: queue objects, nodes, job changes with their
    /// events, specs, steps, usage, in that order; parts with nothing to write are skipped.
    pub fn apply_to(&self, store: &mut dyn cadre_store::Store) -> Result<(), StoreError> {
        for (put, delete) in &self.queue_objects {
            store.change_queue_objects(put, delete)?;
        }
        if !self.nodes.is_empty() {
            store.upsert_nodes(&self.nodes)?;
        }
        if !self.changes.is_empty() || !self.events.is_empty() {
            store.record_with_events(&self.changes, &self.events)?;
        }
        if !self.specs.is_empty() {
            store.update_specs(&self.specs)?;
        }
        if !self.steps.is_empty() {
            store.record_steps(&self.steps)?;
        }
        if !self.usage.is_empty() {
            store.save_usage(&self.usage)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.queue_objects.is_empty()
            && self.nodes.is_empty()
            && self.changes.is_empty()
            && self.events.is_empty()
            && self.specs.is_empty()
            && self.steps.is_empty()
            && self.usage.is_empty()
    }
}

/// Everything the controller does to the world, and the store reads it needs. The shell
/// implements it over the store, the agents' connections and the API's waiting requests;
/// tests implement it by recording.
pub trait Comm {
    /// Commits new jobs, returning their ids in order.
    fn submit(&mut self, jobs: &[NewJob], keys: &[NewSubmitKey]) -> Result<Vec<JobId>, StoreError>;
    /// Commits a transaction.
    fn commit(&mut self, tx: &Transaction) -> Result<(), StoreError>;
    /// A job as stored (a finished job is no longer in the scheduler).
    fn stored_job(&mut self, id: JobId) -> Result<Option<StoredJob>, StoreError>;
    /// What a job runs, as stored at its submission.
    fn run_spec(&mut self, id: JobId) -> Result<Option<RunSpec>, StoreError>;
    /// A job's steps as stored.
    fn stored_steps(&mut self, id: JobId) -> Result<Vec<StepRecord>, StoreError>;
    /// Sends a message on an agent's connection.
    fn send(&mut self, conn: u64, msg: ControllerMessage);
    /// Answers a request.
    fn reply(&mut self, to: ReplyTo, answer: Answer);
    /// A step ended: the last event of its `srun`'s stream.
    fn step_ended(&mut self, job: JobId, step: u32, event: StepEvent);
    fn metric(&mut self, metric: Metric);
}

/// How long a submission's idempotency key answers its retries: a day, far longer than
/// any client waits through a failover.
pub const KEYS_KEPT: Dur = Dur(24 * 3600);

/// Launch failures of one job on its nodes (a failing prolog, a node that cannot start it)
/// after which it is held rather than requeued again: each drained a node.
pub const MAX_NODE_LAUNCH_FAILURES: u32 = 3;

/// The longest drain reason taken from an agent, in characters.
const MAX_DRAIN_REASON: usize = 512;

/// An agent's words for a reason: no control characters (a reason is one line in logs and
/// listings), at most [`MAX_DRAIN_REASON`] characters.
fn bounded_reason(why: Option<&str>) -> Option<String> {
    why.map(|w| {
        w.chars()
            .filter(|c| !c.is_control())
            .take(MAX_DRAIN_REASON)
            .collect()
    })
}

/// What a node's agent finds wrong with it: a drain that lifts by itself when a later
/// report is clean, never an administrator's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NodeHealth {
    /// Less than the cluster describes, as of its last hello.
    short: Option<String>,
    /// What its health checks find, as of their last report.
    checks: Option<String>,
}

impl NodeHealth {
    fn reason(&self) -> Option<String> {
        match (&self.short, &self.checks) {
            (None, None) => None,
            (Some(a), None) | (None, Some(a)) => Some(a.clone()),
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        }
    }
}

/// The lease a welcome grants an agent of protocol `version`.
///
/// An agent of [`LEASE_FROM_PINGS_VERSION`] or later renews it only by its welcome and
/// the pongs of its own pings, each counted from when it sent the hello or ping, and
/// stops its runs (SIGKILL) by the lease's end: it gets the whole lease, counted by the
/// controller from the agent's last frame. An older agent renews it by any frame it
/// hears, from when it hears it, and SIGKILLs a third of its lease after it ends: it is
/// granted three quarters of the lease, so that its last SIGKILL falls within the lease
/// counted by the controller from the disconnection (after which nothing is sent to it).
pub fn lease_for(lease: Duration, version: u32) -> Duration {
    if version >= LEASE_FROM_PINGS_VERSION {
        lease
    } else {
        lease * 3 / 4
    }
}

/// The store failed: the controller stopped, and what it decided after its last good
/// commit was not sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the store failed: {0}")]
pub struct StoreFailed(pub String);

/// The controller's settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// The agents' lease (Slurm's `SlurmdTimeout`): an agent that cannot renew it stops
    /// its runs by its end; a connection silent for a lease is closed.
    pub node_lease: Duration,
    /// How much longer than the lease the controller waits, from the agent's last frame,
    /// before it declares the node lost and requeues its gangs (slow SIGKILLs, clocks).
    pub lease_margin: Duration,
    /// Nodes whose GPUs are declared, not discovered.
    pub emulated_gpus: bool,
    /// The key job tokens are made with (the cluster's agent key): the controller puts
    /// each run's token in its launch orders, since agents that enrolled with a
    /// certificate hold no key.
    pub job_token_key: String,
    /// The cluster's settings for its agents, told in every welcome (configless).
    pub agent_settings: AgentSettings,
}

/// The controller's state: the scheduler, the nodes' agents, the runs it follows, and
/// what waits for the next commit.
pub struct Controller {
    sched: Scheduler,
    config: ControllerConfig,
    presence: Vec<Presence>,
    /// The node each connected agent's connection belongs to.
    conns: HashMap<u64, NodeId>,
    /// Whether each node's GPUs are emulated, as its agent last reported.
    emulated: Vec<bool>,
    /// Where each node's tasks can be reached, as its agent last reported.
    addresses: Vec<Option<String>>,
    /// Each node's container runtime, as its agent last reported.
    runtimes: Vec<Option<String>>,
    /// Each node's agent's version (cadre's, `?` when it did not say) and protocol, as of
    /// its last hello.
    agent_versions: Vec<Option<(String, u32)>>,
    /// Each node's features as the cluster describes them, to which the features its agent
    /// reports are added.
    described_features: Vec<Vec<String>>,
    /// The administrator's word on each node (drain, down) and why.
    admin: Vec<(NodeAvail, Option<String>)>,
    /// What each node's agent found wrong with it (less than described, failing health
    /// checks), which drains it until a later report is whole; apart from `admin`, which it
    /// never changes.
    health: Vec<NodeHealth>,
    /// Which of each node's agent's events have been applied, so that a replayed one is
    /// not applied again.
    applied: Vec<AppliedEvents>,
    runs: HashMap<JobId, RunTrack>,
    /// Why a job's last launch failed, for the API.
    launch_errors: HashMap<JobId, String>,
    /// How many of a job's launches failed through its nodes (each drained), since this
    /// controller started: at [`MAX_NODE_LAUNCH_FAILURES`] the job is held.
    launch_failures: HashMap<JobId, u32>,
    /// What waits for the batch's commit.
    tx: Transaction,
    /// Submissions waiting for the batch's end, with their idempotency keys.
    submissions: Vec<(Vec<NewJob>, Option<String>, ReplyTo)>,
    /// The jobs of each committed submission with an idempotency key (its user's, the
    /// key), for [`KEYS_KEPT`]; and when each was committed, oldest first.
    submit_keys: HashMap<(String, String), Vec<JobId>>,
    submit_key_times: std::collections::VecDeque<(Time, (String, String))>,
    /// The state each job not yet ended was last recorded in: a change of it is an event.
    recorded_state: HashMap<JobId, JobState>,
    /// The last pending reason recorded as an event, per pending job.
    recorded_reason: HashMap<JobId, PendingReason>,
    /// The Kubernetes queue objects applied, and the quotas they make with the policy's.
    queue_objects: QueueObjects,
    /// Messages to send once the batch is committed.
    outgoing: Vec<(NodeId, ControllerMessage)>,
    /// Acknowledgements to send once the batch is committed: connection and sequence.
    acks: BTreeMap<u64, u64>,
    /// Answers to send once the batch is committed.
    replies: Vec<(ReplyTo, Answer)>,
    /// Steps' last events to send once the batch is committed.
    step_ends: Vec<(JobId, u32, StepEvent)>,
    /// Job steps running, by (job, step).
    steps: BTreeMap<(JobId, u32), steps::StepTrack>,
    /// The next step number of jobs that have had a step since the controller started.
    next_steps: HashMap<JobId, u32>,
    /// The first store failure: once set, nothing more is committed or sent.
    fatal: Option<StoreFailed>,
    /// Whether anything changed since the last scheduling pass.
    dirty: bool,
    /// When fair-share usage was last saved (monotonic).
    last_usage_save: Duration,
}

pub(crate) fn core_error(e: CoreError) -> ApiError {
    use cadre_core::scheduler::Refusal;
    let code = match &e {
        CoreError::UnknownJob(_) | CoreError::UnknownNode(_) => ErrorCode::NotFound,
        CoreError::InvalidJob { .. }
        | CoreError::InvalidQuotas { .. }
        | CoreError::InvalidPriorityClasses { .. } => ErrorCode::InvalidRequest,
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

impl Controller {
    /// Handles one input. A store failure (of a commit, or of a read the input needed) is
    /// returned: the controller must not be fed again, and nothing it decided after its
    /// last good commit has been sent.
    pub fn handle(&mut self, input: Input, now: Now, c: &mut dyn Comm) -> Result<(), StoreFailed> {
        if let Some(e) = &self.fatal {
            return Err(e.clone());
        }
        let wall = now.wall;
        match input {
            Input::Submit {
                mut jobs,
                dry_run: true,
                reply,
                ..
            } => {
                let checked = jobs
                    .iter_mut()
                    .try_for_each(|job| self.prepare(job, wall))
                    .and_then(|()| carried(&jobs))
                    .and_then(|()| self.check_object_quotas(&[], &jobs))
                    .map(|()| Vec::new());
                self.replies.push((reply, Answer::Submitted(checked)));
            }
            Input::Submit {
                jobs,
                dry_run: false,
                key,
                reply,
            } => self.submissions.push((jobs, key, reply)),
            Input::Job {
                who,
                id,
                action,
                reply,
            } => {
                let result = self.job_action(c, &who, id, action, wall);
                self.replies.push((reply, Answer::Done(result)));
            }
            Input::Node {
                who,
                name,
                action,
                reply,
            } => {
                let result = self.node_action(c, &who, &name, action, wall);
                self.replies.push((reply, Answer::Done(result)));
            }
            Input::StepCreate {
                who,
                id,
                request,
                reply,
            } => {
                let result = self.step_create(c, &who, id, &request, wall);
                self.replies.push((reply, Answer::Step(result)));
            }
            Input::StepCancel {
                who,
                id,
                step,
                signal,
                reply,
            } => {
                let result = self.step_cancel(c, &who, id, step, signal);
                if let Some(reply) = reply {
                    self.replies.push((reply, Answer::Done(result)));
                }
            }
            Input::QueueObjects {
                who,
                request,
                reply,
            } => {
                let result = self.queue_objects_change(c, &who, &request, wall);
                self.replies.push((reply, Answer::QueueObjects(result)));
            }
            Input::AgentHello { conn, hello } => self.hello(c, conn, *hello, now),
            Input::AgentEvent { conn, event } => {
                if let Some(node) = self.node_of_conn(conn) {
                    // Sent by itself, an event is never a repeat (only a hello replays).
                    self.task_event(c, node, event.event, wall);
                    self.applied[node.0 as usize].applied(event.seq);
                    self.acks.insert(conn, event.seq);
                }
            }
            Input::AgentHealth { conn, problem } => {
                if let Some(node) = self.node_of_conn(conn) {
                    self.checked_health(c, node, problem, wall);
                }
            }
            Input::AgentGone { conn, last_heard } => {
                if let Some(node) = self.node_of_conn(conn) {
                    // An older agent renews its lease by whatever it hears, which may be
                    // as late as the disconnection: its lease counts from then.
                    let version = self.agent_versions[node.0 as usize]
                        .as_ref()
                        .map_or(0, |(_, v)| *v);
                    let since = if version >= LEASE_FROM_PINGS_VERSION {
                        last_heard
                    } else {
                        now.mono
                    };
                    self.move_presence(node, PresenceEvent::Gone { conn, since }, now);
                    let silent_ms = now.mono.saturating_sub(since).as_millis() as u64;
                    tracing::warn!(node = %self.node_name(node), silent_ms, "agent disconnected");
                    self.refresh_avail(c, node, wall);
                }
            }
            Input::Tick { pass } => {
                self.submit(c, wall);
                self.check_presence(c, now);
                if pass {
                    self.pass(c, wall);
                }
                if now.mono.saturating_sub(self.last_usage_save) >= USAGE_SAVE_INTERVAL {
                    self.save_usage(now);
                }
                self.flush(c);
            }
            Input::Shutdown => {
                self.submit(c, wall);
                self.save_usage(now);
                self.flush(c);
                if self.fatal.is_none() {
                    tracing::info!("controller stopped");
                }
            }
        }
        match &self.fatal {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The store failure that stopped the controller, if one did.
    pub fn failed(&self) -> Option<&StoreFailed> {
        self.fatal.as_ref()
    }

    /// Whether anything changed since the last scheduling pass (the shell paces passes).
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Keeps the first store failure: from now on nothing is committed or sent.
    fn fail(&mut self, e: StoreError) {
        tracing::error!(error = %e, "the store failed: the controller stops");
        self.fatal.get_or_insert(StoreFailed(e.to_string()));
    }

    /// A read a request needed failed: fatal for the controller, and the request's answer.
    fn failed_read(&mut self, e: StoreError) -> ApiError {
        let answer = ApiError::new(ErrorCode::Unavailable, format!("the store failed: {e}"));
        self.fail(e);
        answer
    }

    /// A store read's value, or `None` after recording its failure as fatal.
    fn read<T>(&mut self, r: Result<T, StoreError>) -> Option<T> {
        r.map_err(|e| self.fail(e)).ok()
    }

    /// Saves the fair-share usage as of `now`, with the batch.
    fn save_usage(&mut self, now: Now) {
        let usage =
            self.sched
                .usage_snapshot(now.wall)
                .into_iter()
                .map(|(user, account, raw_usage)| AssocUsage {
                    user,
                    account,
                    raw_usage,
                    as_of: now.wall,
                });
        self.tx.usage.extend(usage);
        self.last_usage_save = now.mono;
    }

    fn pass(&mut self, c: &mut dyn Comm, now: Time) {
        let decisions = self.sched.schedule(now);
        self.dirty = false;
        self.apply(c, decisions, now);
        self.pending_events(now);
    }

    /// Commits the batch, then sends what waited for it: answers first (so that a step's
    /// `srun` follows its output before its launch leaves), then messages to agents, then
    /// acknowledgements. After a store failure nothing is.
    fn flush(&mut self, c: &mut dyn Comm) {
        if self.fatal.is_some() {
            return;
        }
        if !self.tx.is_empty() {
            let tx = std::mem::take(&mut self.tx);
            if let Err(e) = c.commit(&tx) {
                return self.fail(e);
            }
        }
        for (to, answer) in self.replies.drain(..) {
            c.reply(to, answer);
        }
        for (job, step, event) in self.step_ends.drain(..) {
            c.step_ended(job, step, event);
        }
        for (node, msg) in self.outgoing.drain(..) {
            if let Some(conn) = self.presence[node.0 as usize].conn() {
                c.send(conn, msg);
            }
        }
        for (conn, seq) in std::mem::take(&mut self.acks) {
            if self.conns.contains_key(&conn) {
                c.send(conn, ControllerMessage::Ack { seq });
            }
        }
    }

    /// Commits the batch's submissions (one store call for all), gives them to the
    /// scheduler and answers them. A refused request is answered with why; the others go
    /// on.
    fn submit(&mut self, c: &mut dyn Comm, now: Time) {
        if self.submissions.is_empty() || self.fatal.is_some() {
            return;
        }
        self.forget_old_keys(now);
        type Key = (String, String);
        let mut accepted: Vec<(Vec<NewJob>, Option<Key>, ReplyTo)> = Vec::new();
        // Requests whose key an earlier one of this batch has: answered as that one.
        let mut repeats: Vec<(Key, ReplyTo)> = Vec::new();
        for (mut jobs, key, reply) in std::mem::take(&mut self.submissions) {
            let key = key.map(|k| {
                let user = jobs
                    .first()
                    .map(|j| j.spec.user.clone())
                    .unwrap_or_default();
                (user, k)
            });
            if let Some(k) = &key {
                if let Some(ids) = self.submit_keys.get(k) {
                    tracing::info!(user = %k.0, key = %k.1, ?ids, "a submission sent again: answered with its jobs");
                    self.replies
                        .push((reply, Answer::Submitted(Ok(ids.clone()))));
                    continue;
                }
                if accepted
                    .iter()
                    .any(|(_, other, _)| other.as_ref() == Some(k))
                {
                    repeats.push((k.clone(), reply));
                    continue;
                }
            }
            let checked = jobs
                .iter_mut()
                .try_for_each(|job| self.prepare(job, now))
                .and_then(|()| carried(&jobs))
                .and_then(|()| {
                    let earlier: Vec<&NewJob> = accepted.iter().flat_map(|(j, _, _)| j).collect();
                    self.check_object_quotas(&earlier, &jobs)
                });
            match checked {
                Err(e) => self.replies.push((reply, Answer::Submitted(Err(e)))),
                Ok(()) => accepted.push((jobs, key, reply)),
            }
        }
        if accepted.is_empty() {
            return;
        }
        // One batch for every request; array positions become positions in the batch.
        let mut all: Vec<NewJob> = Vec::new();
        let mut keys: Vec<NewSubmitKey> = Vec::new();
        let mut replies = Vec::with_capacity(accepted.len());
        for (jobs, key, reply) in accepted {
            let offset = all.len();
            if let Some((user, key)) = &key {
                keys.push(NewSubmitKey {
                    user: user.clone(),
                    key: key.clone(),
                    first: offset,
                    count: jobs.len(),
                });
            }
            replies.push((jobs.len(), key, reply));
            all.extend(jobs.into_iter().map(|mut j| {
                j.array_of = j.array_of.map(|p| p + offset);
                j
            }));
        }
        let ids = match c.submit(&all, &keys) {
            Ok(ids) => ids,
            Err(e) => return self.fail(e),
        };
        c.metric(Metric::Submitted(ids.len() as u64));
        let mut jobs = all.into_iter().zip(ids.iter().copied());
        for (n, key, reply) in replies {
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
            if let Some(k) = key {
                self.submit_keys.insert(k.clone(), mine.clone());
                self.submit_key_times.push_back((now, k));
            }
            // Committed already: answered at once, as the batch's commit adds nothing to it.
            c.reply(reply, Answer::Submitted(Ok(mine)));
        }
        for (k, reply) in repeats {
            let answer = self.submit_keys.get(&k).cloned().ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Conflict,
                    format!(
                        "the first submission with idempotency key `{}` was refused",
                        k.1
                    ),
                )
            });
            c.reply(reply, Answer::Submitted(answer));
        }
        self.dirty = true;
    }

    /// Forgets the idempotency keys older than [`KEYS_KEPT`].
    fn forget_old_keys(&mut self, now: Time) {
        while let Some((at, _)) = self.submit_key_times.front() {
            if at.0.saturating_add(KEYS_KEPT.0) >= now.0 {
                break;
            }
            if let Some((_, k)) = self.submit_key_times.pop_front() {
                self.submit_keys.remove(&k);
            }
        }
    }

    /// Whether `jobs`, after the `earlier` ones of the same batch, keep within the object
    /// counts of their namespaces' ResourceQuotas ([`check_object_quotas`]).
    fn check_object_quotas(&self, earlier: &[&NewJob], jobs: &[NewJob]) -> Result<(), ApiError> {
        let new: Vec<&cadre_core::job::JobSpec> = earlier
            .iter()
            .copied()
            .chain(jobs)
            .map(|j| &j.spec)
            .collect();
        check_object_quotas(
            &self.queue_objects,
            self.sched.jobs().map(|j| &j.spec),
            &new,
        )
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e))
    }

    /// Makes a job ready to commit, or says why it cannot be: its submit time, its default
    /// time limit, its queue (through a LocalQueue), the scheduler's checks, and its
    /// partition resolved (the spec's, else the cluster's default). The one preparation of
    /// a submission and of its dry run.
    fn prepare(&self, job: &mut NewJob, now: Time) -> Result<(), ApiError> {
        job.spec.submit_time = now;
        self.default_time_limit(&mut job.spec);
        route_job(&self.queue_objects, &mut job.spec)
            .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e))?;
        crate::claims::prepare_workload(
            &self.queue_objects,
            &mut job.spec,
            &mut job.run,
            &self.config.job_token_key,
        )
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e))?;
        // A Kubernetes workload waits for a queue applied later, as Kubernetes takes objects
        // in any order; any other job naming a queue that does not exist is a mistake.
        if !is_workload(&job.spec)
            && let Some(q) = &job.spec.queue
            && self.sched.quota().queue_ix(q).is_none()
        {
            return Err(ApiError::because(
                ErrorReason::UnknownQueue,
                format!("queue `{q}` does not exist"),
            )
            .about(q.clone()));
        }
        self.sched
            .validate(JobId(u64::MAX), &job.spec)
            .map_err(core_error)?;
        job.partition = match &job.spec.partition {
            Some(p) => p.clone(),
            None => self
                .sched
                .cluster()
                .default_partition()
                .map(|p| self.sched.cluster().partition(p).name.clone())
                .unwrap_or_default(),
        };
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

    fn node_of_conn(&self, conn: u64) -> Option<NodeId> {
        self.conns.get(&conn).copied()
    }

    /// Moves a node's presence by its transition function, keeping the connection index.
    /// An illegal move is a bug of the caller: logged, and the presence is kept.
    fn move_presence(&mut self, node: NodeId, event: PresenceEvent, now: Now) {
        let i = node.0 as usize;
        let from = self.presence[i];
        match from.next(event, now.mono) {
            Ok(to) => {
                if let Some(old) = from.conn() {
                    self.conns.remove(&old);
                }
                if let Some(conn) = to.conn() {
                    self.conns.insert(conn, node);
                }
                self.presence[i] = to;
            }
            Err(e) => tracing::error!(node = %self.node_name(node), error = %e, "presence"),
        }
    }

    /// The job token of `run` (a job's run; a step's is its job run's).
    fn job_token(&self, run: RunRef) -> Option<cadre_proto::agent::Secret> {
        (!self.config.job_token_key.is_empty()).then(|| {
            cadre_proto::agent::Secret(cadre_proto::job_token::make(
                &self.config.job_token_key,
                run.job,
                run.run,
            ))
        })
    }

    /// The scheduler, to read.
    pub fn sched(&self) -> &Scheduler {
        &self.sched
    }

    /// The controller's post-conditions (checked after every input in its tests): the
    /// scheduler's own; the connection index matches the nodes' presences; every run
    /// followed is of a job the scheduler has active and waits only for nodes of its
    /// allocation, and every active job has its run followed; every step followed is of a
    /// run followed.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.sched.check_invariants()?;
        let connected = self.presence.iter().filter(|p| p.conn().is_some()).count();
        if connected != self.conns.len() {
            return Err(format!(
                "{connected} nodes connected, {} connections indexed",
                self.conns.len()
            ));
        }
        for (i, p) in self.presence.iter().enumerate() {
            if let Some(conn) = p.conn()
                && self.conns.get(&conn) != Some(&NodeId(i as u32))
            {
                return Err(format!("connection {conn} of node {i} is not indexed"));
            }
        }
        for (id, t) in &self.runs {
            if !self.sched.job(*id).is_some_and(|j| j.state.is_active()) {
                return Err(format!("run {} of job {id}, which is not active", t.run));
            }
            let nodes = t.allocation.nodes();
            if let Some(n) = t.nodes_left.iter().find(|n| !nodes.contains(n)) {
                return Err(format!(
                    "job {id} waits for node {n:?} outside its allocation"
                ));
            }
        }
        if self.fatal.is_none() {
            for job in self.sched.jobs().filter(|j| j.state.is_active()) {
                if !self.runs.contains_key(&job.id) {
                    return Err(format!(
                        "job {} is {} without a run followed",
                        job.id, job.state
                    ));
                }
            }
        }
        for (job, step) in self.steps.keys() {
            if !self.runs.contains_key(job) {
                return Err(format!("step {job}.{step} of no run followed"));
            }
        }
        Ok(())
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
        self.presence[node.0 as usize].conn().is_some()
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

    /// Where the node's tasks are reached, as its agent last reported.
    pub(crate) fn node_address(&self, node: NodeId) -> Option<&str> {
        self.addresses[node.0 as usize].as_deref()
    }

    /// The node's agent's version and protocol, as of its last hello.
    pub(crate) fn node_agent(&self, node: NodeId) -> Option<(&str, u32)> {
        self.agent_versions[node.0 as usize]
            .as_ref()
            .map(|(v, p)| (v.as_str(), *p))
    }

    /// What the node's agent finds wrong with it.
    pub(crate) fn node_health(&self, node: NodeId) -> Option<String> {
        self.health[node.0 as usize].reason()
    }

    /// The node's features: the cluster's, and those of what its agent reported (a
    /// container runtime). The scheduler is told when they change.
    fn report_features(&mut self, c: &mut dyn Comm, node: NodeId, now: Time) {
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
            Ok(decisions) => self.apply(c, decisions, now),
            Err(e) => tracing::error!(error = %e, "the scheduler refused the node's features"),
        }
        self.dirty = true;
    }

    pub(crate) fn launch_error(&self, id: JobId) -> Option<&str> {
        self.launch_errors.get(&id).map(String::as_str)
    }

    /// A job as stored, for a request about it: a number beyond what the store keeps is the
    /// request's fault; any other failure is the store's, and fatal.
    fn stored_job(&mut self, c: &mut dyn Comm, id: JobId) -> Result<Option<StoredJob>, ApiError> {
        match c.stored_job(id) {
            Ok(job) => Ok(job),
            Err(e @ StoreError::OutOfRange { .. }) => Err(e.into()),
            Err(e) => Err(self.failed_read(e)),
        }
    }

    /// The job's owner, from the scheduler or (for a finished job) the store.
    fn owner(
        &mut self,
        c: &mut dyn Comm,
        id: JobId,
    ) -> Result<(String, Option<JobState>), ApiError> {
        if let Some(job) = self.sched.job(id) {
            return Ok((job.spec.user.clone(), Some(job.state)));
        }
        match self.stored_job(c, id)? {
            Some(job) => Ok((job.spec.user, None)),
            None => Err(ApiError::new(
                ErrorCode::NotFound,
                format!("job {id} does not exist"),
            )),
        }
    }

    fn job_action(
        &mut self,
        c: &mut dyn Comm,
        who: &Principal,
        id: JobId,
        action: JobAction,
        now: Time,
    ) -> Result<(), ApiError> {
        let (owner, live) = self.owner(c, id)?;
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
                .stored_job(c, id)?
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
                if track.settled().is_none() {
                    let outcome = if code == 0 {
                        JobState::Completed
                    } else {
                        JobState::Failed
                    };
                    let settle = track.advance(RunEvent::Settle {
                        outcome,
                        exit_code: Some(code),
                    });
                    if let Err(e) = settle {
                        tracing::error!(job = %id, error = %e, "allocation completed");
                    }
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
        self.apply(c, decisions, now);
        if spec_changed && let Some(job) = self.sched.job(id) {
            let spec = job.spec.clone();
            self.retime(id, spec.time_limit);
            self.tx.specs.push((id, spec));
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
            // Times are whole seconds: a step started 0.1 s after its job may read as 1 s
            // after it. Its limit is rounded in its favour (never more than a second past
            // the job's), so that it never ends before the job's own limit does: the job
            // then ends TIMEOUT, not FAILED for its step's timeout.
            let offset = st
                .record
                .start_time
                .0
                .saturating_sub(job_start.0)
                .saturating_sub(1);
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
        c: &mut dyn Comm,
        who: &Principal,
        request: &QueueObjectsRequest,
        now: Time,
    ) -> Result<QueueObjectsResponse, ApiError> {
        let namespace = request.namespace.as_deref().unwrap_or("default");
        if let Some(why) = crate::claims::forbidden(
            &self.queue_objects,
            &request.put,
            &request.delete,
            namespace,
            &who.user,
            who.admin,
        ) {
            return Err(ApiError::new(ErrorCode::Forbidden, why));
        }
        let invalid = |e: String| ApiError::new(ErrorCode::InvalidRequest, e);
        let jobs = &self.sched;
        let claim_user = |ns: &str, name: &str| {
            crate::claims::claim_user(
                jobs.jobs()
                    .filter(|j| !j.state.is_final())
                    .map(|j| (j.id.0, &j.spec)),
                ns,
                name,
            )
        };
        let change = self
            .queue_objects
            .change(
                &request.put,
                &request.delete,
                namespace,
                now,
                &crate::queues::Applier {
                    user: &who.user,
                    claim_user: &claim_user,
                },
            )
            .map_err(invalid)?;
        let quotas = change.next.quotas().map_err(invalid)?;
        self.sched
            .validate_quotas(&quotas)
            .map_err(|e| invalid(core_error(e).message))?;
        let classes = change.next.priority_classes();
        self.sched
            .validate_priority_classes(&classes)
            .map_err(|e| invalid(core_error(e).message))?;
        let response = QueueObjectsResponse {
            results: change.results,
        };
        if request.dry_run || (change.put.is_empty() && change.delete.is_empty()) {
            return Ok(response);
        }
        self.tx.queue_objects.push((change.put, change.delete));
        self.queue_objects = change.next;
        self.sched
            .handle(Event::SetPriorityClasses { classes }, now)
            .map_err(core_error)?;
        let decisions = self
            .sched
            .handle(
                Event::SetQuotas {
                    quotas: Box::new(quotas),
                },
                now,
            )
            .map_err(core_error)?;
        self.apply(c, decisions, now);
        self.route_waiting(now);
        tracing::info!(
            objects = self.queue_objects.records().len(),
            "queue objects changed: quotas replaced"
        );
        self.dirty = true;
        Ok(response)
    }

    /// Routes the pending jobs that waited for their Kueue LocalQueue (or its ClusterQueue),
    /// now that the queue objects route them: their specs get the ClusterQueue and the
    /// flavor's node labels, committed with the change. One whose node selector clashes
    /// with the flavor's labels stays waiting, with an event saying why.
    pub(crate) fn route_waiting(&mut self, now: Time) {
        let pending = self
            .sched
            .jobs()
            .filter(|j| j.state == JobState::Pending)
            .map(|j| (j.id, &j.spec));
        for (id, route) in waiting_routes(&self.queue_objects, pending) {
            let (queue, node_selector) = match route {
                Ok(r) => r,
                Err(e) => {
                    self.event(id, now, "Inadmissible", true, e);
                    continue;
                }
            };
            let routed = self.sched.handle(
                Event::Route {
                    id,
                    queue: Some(queue.clone()),
                    node_selector,
                },
                now,
            );
            match routed {
                Ok(_) => {
                    if let Some(job) = self.sched.job(id) {
                        self.tx.specs.push((id, job.spec.clone()));
                    }
                    self.event(
                        id,
                        now,
                        "Routed",
                        false,
                        format!("its LocalQueue is applied: routed to ClusterQueue {queue}"),
                    );
                    self.note_change(id, now);
                }
                Err(e) => self.event(id, now, "Inadmissible", true, core_error(e).message),
            }
        }
    }

    fn node_action(
        &mut self,
        c: &mut dyn Comm,
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
        self.tx.nodes.push(NodeRecord {
            name: name.to_owned(),
            avail,
            reason,
            emulated_gpus: self.config.emulated_gpus,
            updated: now,
        });
        self.refresh_avail(c, node, now);
        Ok(())
    }

    /// Drains a node whose agent failed to launch a job or to kill a job's processes,
    /// recording why (durably), as an administrator's drain: only an administrator's
    /// resume lifts it, once someone has looked at the node.
    fn drain_on_failure(&mut self, c: &mut dyn Comm, node: NodeId, why: String, now: Time) {
        if self.admin[node.0 as usize].0 != NodeAvail::Up {
            return;
        }
        tracing::warn!(node = %self.node_name(node), reason = %why, "node drained");
        self.admin[node.0 as usize] = (NodeAvail::Drain, Some(why.clone()));
        let record = NodeRecord {
            name: self.node_name(node).to_owned(),
            avail: NodeAvail::Drain,
            reason: Some(why),
            emulated_gpus: self.emulated[node.0 as usize],
            updated: now,
        };
        self.tx.nodes.push(record);
        self.refresh_avail(c, node, now);
    }

    /// A node's health checks report, drained with what they find or lifted when clean.
    fn checked_health(
        &mut self,
        c: &mut dyn Comm,
        node: NodeId,
        problem: Option<String>,
        now: Time,
    ) {
        let problem = bounded_reason(problem.as_deref());
        let health = &mut self.health[node.0 as usize];
        if health.checks == problem {
            return;
        }
        match &problem {
            Some(why) => {
                tracing::warn!(node = %self.sched.cluster().node(node).name, reason = %why, "node drained by its health checks")
            }
            None => {
                tracing::info!(node = %self.sched.cluster().node(node).name, "node's health checks pass again")
            }
        }
        health.checks = problem;
        self.refresh_avail(c, node, now);
    }

    /// Tells the scheduler the node's availability: the administrator's word, unless its
    /// agent is away (unknown) or lost (down).
    fn refresh_avail(&mut self, c: &mut dyn Comm, node: NodeId, now: Time) {
        let (admin, admin_reason) = self.admin[node.0 as usize].clone();
        let (avail, reason) = match self.presence[node.0 as usize] {
            _ if admin == NodeAvail::Down => (NodeAvail::Down, admin_reason),
            Presence::Connected { .. } => match self.health[node.0 as usize].reason() {
                Some(why) if admin == NodeAvail::Up => (NodeAvail::Drain, Some(why)),
                _ => (admin, admin_reason),
            },
            Presence::Away { .. } => (NodeAvail::Unknown, Some("agent not connected".into())),
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
            Ok(decisions) => self.apply(c, decisions, now),
            Err(e) => tracing::error!(error = %e, "node availability refused"),
        }
        self.dirty = true;
    }

    /// How long after an away agent's last frame its node is lost: the lease and margin.
    fn grace(&self) -> Duration {
        self.config
            .node_lease
            .saturating_add(self.config.lease_margin)
    }

    /// When the next away node is to be declared lost, on the monotonic clock: the
    /// engine wakes for it.
    pub fn next_loss_at(&self) -> Option<Duration> {
        let grace = self.grace();
        self.presence.iter().filter_map(|p| p.lost_at(grace)).min()
    }

    /// Marks nodes whose agents stayed away too long as lost: their runs' tasks count as
    /// gone (the scheduler stops the rest of each gang and requeues it by policy).
    fn check_presence(&mut self, c: &mut dyn Comm, now: Now) {
        let grace = self.grace();
        for n in 0..self.presence.len() {
            if self.presence[n].timed_out(now.mono, grace) {
                let node = NodeId(n as u32);
                tracing::warn!(node = %self.node_name(node), "agent lost: node down");
                self.move_presence(
                    node,
                    PresenceEvent::Timeout {
                        now: now.mono,
                        grace,
                    },
                    now,
                );
                self.refresh_avail(c, node, now.wall);
                let on_node: Vec<JobId> = self
                    .runs
                    .iter()
                    .filter(|(_, t)| t.nodes_left.contains(&node))
                    .map(|(&id, _)| id)
                    .collect();
                for id in on_node {
                    self.node_done(c, id, node, JobState::NodeFail, None, now.wall);
                }
            }
        }
    }

    /// Carries out the scheduler's decisions (after the commit of the batch).
    fn apply(&mut self, c: &mut dyn Comm, decisions: Vec<Decision>, now: Time) {
        for d in decisions {
            match d {
                Decision::Start { job, allocation } => self.start(c, job, allocation, now),
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

    fn start(&mut self, c: &mut dyn Comm, id: JobId, allocation: Allocation, now: Time) {
        let Some(job) = self.sched.job(id) else {
            return;
        };
        let run = RunRef::job_run(id, job.requeues);
        let waited = job
            .eligible_since
            .map(|eligible| Duration::from_secs(now.0.saturating_sub(eligible.0)));
        let spec = job.spec.clone();
        let partition = self.sched.cluster().partition(job.partition).name.clone();
        let time_limit_ms = (spec.time_limit.0 > 0).then(|| spec.time_limit.0.saturating_mul(1000));
        self.note_change(id, now);
        self.launch_errors.remove(&id);
        let nodes = allocation.nodes();
        // A store that cannot be read is fatal: nothing of this start is committed or sent.
        let Some(run_spec) = self.read(c.run_spec(id)) else {
            return;
        };
        if let Some(waited) = waited {
            c.metric(Metric::Waited(waited));
        }
        let completing = run_spec.as_ref().and_then(|r| r.completing_groups.clone());
        let mut track = RunTrack::new(run.run, allocation.clone(), now, completing.as_deref());
        if let Some(r) = &run_spec {
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
                self.tx.steps.push(rec.clone());
                track.batch_step = Some(rec);
            }
        }
        self.runs.insert(id, track);
        let run_spec = match run_spec {
            Some(r) => r,
            None => {
                // Without what to run there is nothing to launch: fail the launch on every
                // node, permanently, so the job is held with the reason.
                let why = format!("job {id} has no stored run spec");
                for node in nodes {
                    self.node_launch_failed(c, id, node, why.clone(), true, now);
                }
                return;
            }
        };
        let order =
            match self.launch_order(run, spec, partition, allocation, run_spec, time_limit_ms) {
                Ok(o) => o,
                Err(why) => {
                    for node in nodes {
                        self.node_launch_failed(c, id, node, why.clone(), true, now);
                    }
                    return;
                }
            };
        for node in nodes {
            if self.is_connected(node) {
                self.outgoing
                    .push((node, ControllerMessage::Launch(Box::new(order.clone()))));
            } else {
                // Its agent went away since the pass: the gang cannot start whole.
                self.node_launch_failed(c, id, node, "agent not connected".into(), false, now);
            }
        }
    }

    /// The order that starts `run` of a job on its nodes; an error says why it cannot be
    /// made (a claim the job mounts is no longer there).
    fn launch_order(
        &self,
        run: RunRef,
        spec: cadre_core::job::JobSpec,
        partition: String,
        allocation: Allocation,
        run_spec: RunSpec,
        time_limit_ms: Option<u64>,
    ) -> Result<LaunchOrder, String> {
        let (node_names, node_addresses) = self.names_and_addresses(&allocation.nodes());
        let claims = crate::claims::claim_mounts(&self.queue_objects, &spec)?;
        let host_paths = crate::claims::host_paths(&spec, &self.config.job_token_key);
        Ok(LaunchOrder {
            run,
            spec,
            partition,
            allocation,
            node_names,
            node_addresses,
            run_spec,
            time_limit_ms,
            step: None,
            job_token: self.job_token(run),
            claims,
            host_paths,
        })
    }

    /// Sends `node` the launch order of job `id`'s current run again: its agent came back
    /// without the run and had never reported it started (the order was lost with the
    /// connection). `false`: it cannot be (the job or its run spec is gone).
    fn launch_again(&mut self, c: &mut dyn Comm, id: JobId, node: NodeId) -> bool {
        let (Some(job), Some(track)) = (self.sched.job(id), self.runs.get(&id)) else {
            return false;
        };
        let run = RunRef::job_run(id, track.run);
        let spec = job.spec.clone();
        let partition = self.sched.cluster().partition(job.partition).name.clone();
        let time_limit_ms = (spec.time_limit.0 > 0).then(|| spec.time_limit.0.saturating_mul(1000));
        let allocation = track.allocation.clone();
        let Some(Some(run_spec)) = self.read(c.run_spec(id)) else {
            return false;
        };
        let Ok(order) =
            self.launch_order(run, spec, partition, allocation, run_spec, time_limit_ms)
        else {
            return false;
        };
        tracing::info!(job = %id, node = %self.node_name(node), "launch order sent again: the agent came back without it");
        self.outgoing
            .push((node, ControllerMessage::Launch(Box::new(order))));
        true
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
        if let Err(e) = track.advance(RunEvent::Stop { kill_wait_secs }) {
            tracing::error!(job = %id, error = %e, "stop");
        }
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
            self.tx.changes.push(JobChange {
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

    fn hello(&mut self, c: &mut dyn Comm, conn: u64, hello: Hello, now: Now) {
        let refuse = |c: &mut dyn Comm, reason: String| {
            tracing::warn!(node = %hello.node, %reason, "agent refused");
            c.send(conn, ControllerMessage::Refused { reason });
        };
        if !(OLDEST_AGENT_VERSION..=PROTOCOL_VERSION).contains(&hello.version) {
            return refuse(
                c,
                format!(
                    "agent protocol version {} is not supported; this controller speaks versions {OLDEST_AGENT_VERSION} to {PROTOCOL_VERSION}",
                    hello.version
                ),
            );
        }
        let Some(node) = self.sched.cluster().node_id(&hello.node) else {
            let names: Vec<&str> = self
                .sched
                .cluster()
                .nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect();
            return refuse(
                c,
                format!(
                    "node `{}` is not in the cluster (its nodes are {})",
                    hello.node,
                    hostlist::compress(&names)
                ),
            );
        };
        // A node with less than the cluster describes is drained with what it lacks (it
        // must never be booked for what it does not have), until its agent reports enough.
        let want = self.sched.cluster().shape(node).capacity();
        let have = hello.report.shape.capacity();
        let gpus = |milli: u64| milli / u64::from(MILLI_PER_GPU);
        let mut short = Vec::new();
        if have.gpu_milli < want.gpu_milli {
            short.push(format!(
                "{} of its {} GPUs",
                gpus(have.gpu_milli),
                gpus(want.gpu_milli)
            ));
        }
        if have.cpus < want.cpus {
            short.push(format!("{} of its {} cores", have.cpus, want.cpus));
        }
        if have.mem_mib < want.mem_mib {
            short.push(format!(
                "{} of its {} MiB of memory",
                have.mem_mib, want.mem_mib
            ));
        }
        let short = (!short.is_empty()).then(|| {
            format!(
                "its agent finds only {} (as the cluster describes it)",
                short.join(", ")
            )
        });
        if let Some(why) = &short {
            tracing::warn!(node = %hello.node, reason = %why, "node drained");
        }
        self.health[node.0 as usize] = NodeHealth {
            short,
            checks: bounded_reason(hello.health.as_deref()),
        };
        if let Some(why) = &self.health[node.0 as usize].checks {
            tracing::warn!(node = %hello.node, reason = %why, "node drained by its health checks");
        }
        c.send(
            conn,
            ControllerMessage::Welcome {
                // An older agent is answered in its own version.
                version: hello.version,
                now_ms: Some(now.wall.0.saturating_mul(1000)),
                settings: (!self.config.agent_settings.is_empty())
                    .then(|| self.config.agent_settings.clone()),
                node_id: node,
                lease_ms: Some(lease_for(self.config.node_lease, hello.version).as_millis() as u64),
            },
        );
        if let Some(old) = self.presence[node.0 as usize].conn() {
            tracing::info!(node = %hello.node, old, "agent reconnected; the older connection is dropped");
        }
        self.move_presence(node, PresenceEvent::Hello { conn }, now);
        let now = now.wall;
        self.emulated[node.0 as usize] = hello.report.emulated_gpus;
        self.addresses[node.0 as usize] = Some(hello.report.address.clone());
        self.runtimes[node.0 as usize] = hello.report.container_runtime.clone();
        self.agent_versions[node.0 as usize] = Some((
            hello
                .agent_version
                .as_deref()
                .map_or_else(|| "?".to_string(), |v| v.chars().take(32).collect()),
            hello.version,
        ));
        self.report_features(c, node, now);
        tracing::info!(node = %hello.node, conn, running = hello.running.len(), outbox = hello.outbox.len(), emulated = hello.report.emulated_gpus, "agent connected");
        let applied = &mut self.applied[node.0 as usize];
        let same_life = applied.hello(hello.life);
        let skipped = hello
            .outbox
            .iter()
            .filter(|e| !applied.is_new(e.seq))
            .count();
        if skipped > 0 {
            tracing::info!(node = %hello.node, skipped, "replayed events already applied: skipped");
        }
        let mut last_seq = None;
        for ev in hello.outbox {
            last_seq = Some(ev.seq);
            if self.applied[node.0 as usize].is_new(ev.seq) {
                self.task_event(c, node, ev.event, now);
                self.applied[node.0 as usize].applied(ev.seq);
            }
        }
        if let Some(seq) = last_seq {
            self.acks.insert(conn, seq);
        }
        // Reconcile what runs there with what the controller thinks runs there.
        let alive: BTreeSet<RunRef> = hello.running.iter().copied().collect();
        let mine: Vec<(JobId, u32, Option<u64>)> = self
            .runs
            .iter()
            .filter(|(_, t)| t.nodes_left.contains(&node))
            .map(|(&id, t)| (id, t.run, t.stop()))
            .collect();
        for (id, run, stop) in mine {
            let r = RunRef::job_run(id, run);
            // Only the same life of the agent can have missed the order: a restarted one (a
            // reboot) may have started the run and lost it.
            let never_started = same_life
                && stop.is_none()
                && self
                    .runs
                    .get(&id)
                    .is_some_and(|t| !t.started_on.contains(&node) && t.launch_failed.is_none());
            if alive.contains(&r) {
                if let Some(kill_wait_secs) = stop {
                    self.send_stop(r, [node], kill_wait_secs);
                }
            } else if never_started && self.launch_again(c, id, node) {
                // Its Started or LaunchFailed will come.
            } else {
                tracing::warn!(job = %id, node = %hello.node, "run's tasks are gone from the node");
                self.node_done(c, id, node, JobState::NodeFail, None, now);
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
        self.tx.nodes.push(NodeRecord {
            name: hello.node.clone(),
            avail: self.admin[node.0 as usize].0,
            reason: self.admin[node.0 as usize].1.clone(),
            emulated_gpus: hello.report.emulated_gpus,
            updated: now,
        });
        self.refresh_avail(c, node, now);
    }

    fn task_event(&mut self, c: &mut dyn Comm, node: NodeId, event: TaskEvent, now: Time) {
        let run = event.run();
        if let TaskEvent::Ended {
            drain: Some(what), ..
        } = &event
        {
            // The node's agent found it unfit once the run ended (processes that outlived
            // SIGKILL may hold its GPUs; its epilog failed), whichever run or step it was.
            // The agent's words, bounded: a reason is shown everywhere nodes are.
            let why = bounded_reason(Some(what)).unwrap_or_default();
            self.drain_on_failure(c, node, why, now);
        }
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
                if let Some(t) = self.runs.get_mut(&run.job) {
                    t.started_on.insert(node);
                }
            }
            TaskEvent::LaunchFailed {
                reason, permanent, ..
            } => {
                if !permanent {
                    // The node could not start what it was given, through no fault of the
                    // job: drained for an administrator to look at, as Slurm drains a node
                    // whose launch failed, so the requeued job does not bounce off it again.
                    self.drain_on_failure(c, node, format!("launch failed: {reason}"), now);
                }
                self.node_launch_failed(c, run.job, node, reason, permanent, now)
            }
            TaskEvent::Ended {
                state, exit_code, ..
            } => {
                self.task_failure_event(run.job, node, state, exit_code, false, now);
                self.node_done(c, run.job, node, state, exit_code, now)
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
        self.tx.events.push(JobEvent {
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
        if t.stop().is_some() || t.settled().is_some() || !reported {
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
            let waiting = self
                .sched
                .job(id)
                .and_then(|j| waiting_for_local_queue(&self.queue_objects, &j.spec));
            let message = match (waiting, self.sched.reason_detail(id), &reason) {
                (Some(why), _, _) => format!("{reason}: {why}"),
                (None, Some(detail), _) => format!("{reason}: {detail}"),
                (None, None, PendingReason::Resources) => {
                    "Resources: not enough free resources for the whole gang now".into()
                }
                (None, None, PendingReason::BadConstraints) => {
                    "BadConstraints: it can never run on this cluster as asked".into()
                }
                (None, None, PendingReason::InvalidQueue) => {
                    "InvalidQueue: its queue does not exist".into()
                }
                (None, None, other) => other.to_string(),
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
        if t.settled().is_some() || !t.completing_left.remove(&node) {
            return;
        }
        t.record(state, exit_code);
        if t.completing_left.is_empty() {
            if let Err(e) = t.settle_now() {
                tracing::error!(job = %id, error = %e, "completing groups done");
            }
            tracing::info!(job = %id, outcome = %t.outcome, "completing groups done: stopping the job's other tasks");
            // What still runs is not the job's work: no grace beyond a second to end.
            self.stop(id, Dur(1));
        }
    }

    fn node_launch_failed(
        &mut self,
        c: &mut dyn Comm,
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
        self.node_done(c, id, node, JobState::Failed, None, now);
    }

    /// The run's tasks on `node` are gone, with this outcome; once every node's are, the
    /// job's run is over and the scheduler learns it.
    fn node_done(
        &mut self,
        c: &mut dyn Comm,
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
        let was_settled = t.settled().is_some();
        match t.settled() {
            // Stopped after the completing groups were done: the outcome is fixed.
            Some((outcome, code)) => {
                t.outcome = outcome;
                t.exit_code = code;
            }
            None => {
                t.record(state, exit_code);
                // A node's end is also the end of its completing tasks.
                if t.completing_left.remove(&node) && t.completing_left.is_empty() {
                    if let Err(e) = t.settle_now() {
                        tracing::error!(job = %id, error = %e, "completing groups done");
                    }
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
                Ok(decisions) => self.apply(c, decisions, now),
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
            Ok(decisions) => self.apply(c, decisions, now),
            Err(e) => {
                tracing::error!(job = %id, error = %e, "run end refused by the scheduler");
                self.runs.remove(&id);
                return;
            }
        }
        if let Some((why, permanent)) = launch_failed {
            self.launch_errors.insert(id, why);
            // Each launch failure that was a node's drains that node; a job that fails on
            // node after node (a prolog it breaks) would drain them all.
            let failures = self.launch_failures.entry(id).or_default();
            *failures += u32::from(!permanent);
            let again = *failures >= MAX_NODE_LAUNCH_FAILURES;
            if (permanent || again) && self.sched.job(id).is_some() {
                // Retrying cannot help: held for an administrator, as Slurm holds a job
                // whose launch (or prolog) failed.
                let _ = self.sched.handle(Event::Hold { id, admin: true }, now);
            }
        }
        if self.sched.job(id).is_none_or(|j| j.state.is_final()) {
            self.launch_failures.remove(&id);
        }
        if let Some(status) = self.status_of(id, now) {
            self.transition_events(id, &status, now);
            self.tx.changes.push(JobChange {
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
            self.tx.steps.push(b);
        }
        self.end_steps(id, now);
        self.dirty = true;
    }
}

/// Whether the workloads of one submission carry at most what the controller takes in one
/// (see [`crate::claims::check_carried`]).
fn carried(jobs: &[NewJob]) -> Result<(), ApiError> {
    crate::claims::check_carried(jobs).map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e))
}
