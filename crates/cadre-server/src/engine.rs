//! The controller's I/O shell: the one thread that owns the [`Controller`] state machine
//! and carries out what it asks ([`Comm`]) against the store, the agents' connections and
//! the API's waiting requests.
//!
//! **Given** commands from the API and the agents' connections, on one channel. **Decided**
//! here: which commands make a batch (those waiting when the thread wakes, up to
//! `MAX_BATCH`), when a scheduling pass is due (something changed and the last pass is
//! at least its own duration ago, or the interval has passed), and the time each batch
//! happens at. Everything else is the controller's.
//! **Must hold**: the controller's effects are carried out in the order it asks them; a
//! store failure stops the thread (the controller has sent nothing it decided after its
//! last good commit); reads of the controller's state run on this thread between two
//! inputs, in the batch's order, never during one.

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::controller::{
    Answer, Comm, Controller, ControllerConfig, Input, JobAction, Metric, NodeAction, Now,
    RecoverError, ReplyTo, Snapshot, StoreFailed, Transaction,
};
use crate::metrics::Metrics;
use cadre_core::job::JobId;
use cadre_core::run::RunSpec;
use cadre_core::scheduler::Scheduler;
use cadre_core::time::Time;
use cadre_proto::agent::{ControllerMessage, Hello, OutputChunk, SequencedEvent};
use cadre_proto::api::{
    ErrorCode, QueueObjectsRequest, QueueObjectsResponse, StepEvent, StepRequest, StepView,
};
use cadre_store::{NewJob, NewSubmitKey, StepFilter, StepRecord, Store, StoreError, StoredJob};
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc::UnboundedSender, oneshot};

/// Commands drained and handled together at most.
const MAX_BATCH: usize = 4096;

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// A read of the controller's live state, run on the engine thread between two inputs.
pub type ReadFn = Box<dyn FnOnce(&Controller) + Send>;

/// What the engine is told.
pub enum Command {
    /// Jobs to submit (with `dry_run`: only checked, see [`Input::Submit`]).
    Submit {
        jobs: Vec<NewJob>,
        dry_run: bool,
        /// The request's idempotency key (`Idempotency-Key`).
        key: Option<String>,
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
    AgentHealth {
        conn: u64,
        problem: Option<String>,
    },
    /// A connection closed; `last_heard`: when its last frame came.
    AgentGone {
        conn: u64,
        last_heard: Instant,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

/// The engine's settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The agents' lease (Slurm's `SlurmdTimeout`).
    pub node_lease: Duration,
    /// How much longer than the lease, after an agent's last frame, before its node is
    /// declared lost and its gangs requeued.
    pub lease_margin: Duration,
    /// Longest time between scheduling passes when nothing happens.
    pub sched_interval: Duration,
    /// Nodes whose GPUs are declared, not discovered.
    pub emulated_gpus: bool,
    /// The cluster's agent key, which job tokens are made with.
    pub job_token_key: String,
    /// The cluster's settings for its agents (configless).
    pub agent_settings: cadre_proto::agent::AgentSettings,
}

/// Where each step's events go: the answer stream of the `srun` that created it. Shared by
/// the engine (which attaches a step's stream when it creates the step, and ends it) and
/// the agents' connections (which pass output straight through, from the step's own nodes
/// only).
///
/// Also when each node's agent was last heard (any frame, pings included), which the
/// connections record and `GET /nodes` shows, without a trip through the engine.
///
/// And each connected node's latest GPU use ([`AgentMessage::GpuUsage`]), which the
/// metrics serve.
///
/// And the reads of tasks' output that wait for their agents' answers
/// ([`crate::output_reads`]).
///
/// [`AgentMessage::GpuUsage`]: cadre_proto::agent::AgentMessage::GpuUsage
#[derive(Clone, Default)]
pub struct IoHub {
    steps: Arc<Mutex<StepStreams>>,
    heard: Arc<Mutex<HashMap<String, u64>>>,
    gpus: Arc<Mutex<GpuUsageByNode>>,
    reads: crate::output_reads::OutputReads,
}

pub use crate::metrics::GpuUsageByNode;

/// Each step's answer stream and the nodes its tasks run on, by (job, step).
type StepStreams = HashMap<(JobId, u32), (UnboundedSender<StepEvent>, Vec<String>)>;

impl IoHub {
    /// Reads of tasks' output from their agents.
    pub fn reads(&self) -> &crate::output_reads::OutputReads {
        &self.reads
    }

    /// The agent of `node` was heard now.
    pub fn heard(&self, node: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Ok(mut heard) = self.heard.lock() {
            match heard.get_mut(node) {
                Some(at) => *at = now,
                None => {
                    heard.insert(node.to_owned(), now);
                }
            }
        }
    }

    /// The agent of `node` reported its GPUs' use: kept until the next report or until the
    /// agent goes. A report out of NVML's ranges (more than
    /// [`cadre_proto::agent::MAX_GPUS_PER_REPORT`] GPUs, a utilisation above 100%, more
    /// memory used than there is) is dropped whole.
    pub fn gpu_usage(&self, node: &str, gpus: Vec<cadre_proto::agent::GpuUsage>) {
        let sane = gpus.len() <= cadre_proto::agent::MAX_GPUS_PER_REPORT
            && gpus.iter().all(|g| {
                g.utilization_percent <= 100 && g.memory_used_bytes <= g.memory_total_bytes
            });
        if !sane {
            tracing::warn!(
                node,
                gpus = gpus.len(),
                "a GPU usage report out of range: dropped"
            );
            return;
        }
        if let Ok(mut usage) = self.gpus.lock() {
            usage.insert(node.to_owned(), gpus);
        }
    }

    /// The agent of `node` went: its GPUs' use is no longer known.
    pub fn forget_gpu_usage(&self, node: &str) {
        if let Ok(mut usage) = self.gpus.lock() {
            usage.remove(node);
        }
    }

    /// Every connected node's latest GPU use.
    pub fn gpu_usages(&self) -> GpuUsageByNode {
        self.gpus.lock().map(|u| u.clone()).unwrap_or_default()
    }

    /// When the agent of `node` was last heard, in seconds since 1970.
    pub fn last_heard(&self, node: &str) -> Option<u64> {
        self.heard.lock().ok()?.get(node).copied()
    }

    /// Passes a task's output to its step's stream, if anyone listens and the output comes
    /// from one of the step's nodes (no agent writes into another node's step).
    pub fn output(&self, chunk: OutputChunk, from_node: &str) {
        let Some(step) = chunk.run.step else {
            return;
        };
        let Ok(streams) = self.steps.lock() else {
            return;
        };
        match streams.get(&(chunk.run.job, step)) {
            Some((tx, nodes)) if nodes.iter().any(|n| n == from_node) => {
                let _ = tx.send(StepEvent::Output {
                    task: chunk.task,
                    stream: chunk.stream,
                    data: chunk.data,
                });
            }
            Some(_) => {
                tracing::warn!(job = %chunk.run.job, step, node = from_node, "output of a step from a node it does not run on: dropped");
            }
            None => {}
        }
    }

    fn attach(&self, job: JobId, step: u32, nodes: Vec<String>, tx: UnboundedSender<StepEvent>) {
        if let Ok(mut streams) = self.steps.lock() {
            streams.insert((job, step), (tx, nodes));
        }
    }

    /// Sends the step's last event and forgets its stream.
    fn finish(&self, job: JobId, step: u32, event: StepEvent) {
        let tx = self
            .steps
            .lock()
            .ok()
            .and_then(|mut s| s.remove(&(job, step)));
        if let Some((tx, _)) = tx {
            let _ = tx.send(event);
        }
    }
}

/// A request waiting for its answer.
enum Waiting {
    Ids(Reply<Vec<JobId>>),
    Unit(Reply<()>),
    /// A step's creation: its `srun`'s stream is attached when the answer is a step.
    Step(Reply<StepView>, UnboundedSender<StepEvent>),
    QueueObjects(Reply<QueueObjectsResponse>),
}

/// What the controller's effects act on.
struct World {
    store: Box<dyn Store>,
    metrics: Arc<Metrics>,
    io: IoHub,
    /// Each agent connection's outgoing messages.
    links: HashMap<u64, UnboundedSender<ControllerMessage>>,
    waiting: HashMap<ReplyTo, Waiting>,
    next_reply: u64,
}

impl World {
    fn wait(&mut self, w: Waiting) -> ReplyTo {
        self.next_reply += 1;
        let to = ReplyTo(self.next_reply);
        self.waiting.insert(to, w);
        to
    }
}

impl Comm for World {
    fn submit(&mut self, jobs: &[NewJob], keys: &[NewSubmitKey]) -> Result<Vec<JobId>, StoreError> {
        self.store.submit_batch_keyed(jobs, keys)
    }

    fn commit(&mut self, tx: &Transaction) -> Result<(), StoreError> {
        tx.apply_to(self.store.as_mut())
    }

    fn stored_job(&mut self, id: JobId) -> Result<Option<StoredJob>, StoreError> {
        self.store.job(id)
    }

    fn run_spec(&mut self, id: JobId) -> Result<Option<RunSpec>, StoreError> {
        self.store.run_spec(id)
    }

    fn stored_steps(&mut self, id: JobId) -> Result<Vec<StepRecord>, StoreError> {
        self.store.steps(&StepFilter {
            jobs: vec![id],
            unfinished: false,
        })
    }

    fn send(&mut self, conn: u64, msg: ControllerMessage) {
        if let Some(tx) = self.links.get(&conn) {
            let _ = tx.send(msg);
        }
    }

    fn reply(&mut self, to: ReplyTo, answer: Answer) {
        let Some(waiting) = self.waiting.remove(&to) else {
            tracing::error!(?to, "an answer to no request");
            return;
        };
        match (waiting, answer) {
            (Waiting::Ids(tx), Answer::Submitted(r)) => {
                let _ = tx.send(r);
            }
            (Waiting::Unit(tx), Answer::Done(r)) => {
                let _ = tx.send(r);
            }
            (Waiting::Step(tx, io), Answer::Step(r)) => {
                if let Ok(view) = &r {
                    let nodes = cadre_core::hostlist::expand(&view.nodes).unwrap_or_default();
                    self.io.attach(view.job, view.step, nodes, io);
                }
                let _ = tx.send(r);
            }
            (Waiting::QueueObjects(tx), Answer::QueueObjects(r)) => {
                let _ = tx.send(r);
            }
            (_, answer) => tracing::error!(?to, ?answer, "an answer of the wrong kind"),
        }
    }

    fn step_ended(&mut self, job: JobId, step: u32, event: StepEvent) {
        self.io.finish(job, step, event);
    }

    fn metric(&mut self, metric: Metric) {
        match metric {
            Metric::Submitted(n) => self.metrics.submitted(n),
            Metric::Waited(d) => self.metrics.observe_wait(d),
        }
    }
}

/// The engine: the controller and what its effects act on.
pub struct Engine {
    controller: Controller,
    world: World,
    sched_interval: Duration,
    /// The monotonic clock's origin.
    started: Instant,
    /// When the last pass ran, and how long it took.
    last_pass: Option<(Instant, Duration)>,
}

/// Seconds since the Unix epoch: the engine's clock, read once per batch.
pub fn wall_now() -> Time {
    Time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

impl Engine {
    /// Rebuilds the controller from the store: every unfinished job back into the
    /// scheduler, running ones adopted with the allocation they hold.
    pub fn recover(
        sched: Scheduler,
        mut store: Box<dyn Store>,
        config: EngineConfig,
        metrics: Arc<Metrics>,
        io: IoHub,
    ) -> Result<Engine, RecoverError> {
        let snapshot = Snapshot::load(store.as_mut(), wall_now())?;
        let started = Instant::now();
        let mut world = World {
            store,
            metrics,
            io,
            links: HashMap::new(),
            waiting: HashMap::new(),
            next_reply: 0,
        };
        let controller = Controller::recover(
            sched,
            ControllerConfig {
                node_lease: config.node_lease,
                lease_margin: config.lease_margin,
                emulated_gpus: config.emulated_gpus,
                job_token_key: config.job_token_key.clone(),
                agent_settings: config.agent_settings.clone(),
            },
            snapshot,
            Now {
                wall: wall_now(),
                mono: Duration::ZERO,
            },
            &mut world,
        )?;
        Ok(Engine {
            controller,
            world,
            sched_interval: config.sched_interval,
            started,
            last_pass: None,
        })
    }

    fn now(&self) -> Now {
        Now {
            wall: wall_now(),
            mono: self.started.elapsed(),
        }
    }

    /// Runs the engine until a shutdown command or a fatal store error.
    pub fn run(mut self, rx: Receiver<Command>) -> Result<(), StoreFailed> {
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
            let now = self.now();
            let mut shutdown = None;
            for cmd in batch.drain(..) {
                let input = match cmd {
                    Command::Shutdown { reply } => {
                        shutdown = Some(reply);
                        continue;
                    }
                    // In order with the batch's inputs, and not after its pass: a read
                    // waits for no scheduling.
                    Command::Read(f) => {
                        f(&self.controller);
                        continue;
                    }
                    other => self.input(other),
                };
                self.controller.handle(input, now, &mut self.world)?;
            }
            let pass = self.pass_due();
            let t0 = Instant::now();
            self.controller
                .handle(Input::Tick { pass }, now, &mut self.world)?;
            if pass {
                let took = t0.elapsed();
                self.world.metrics.observe_cycle(took);
                self.last_pass = Some((Instant::now(), took));
            }
            if let Some(reply) = shutdown {
                self.controller
                    .handle(Input::Shutdown, now, &mut self.world)?;
                tracing::info!("engine stopped");
                let _ = reply.send(());
                return Ok(());
            }
        }
    }

    /// A command as the controller's input; its reply channel waits in the world.
    fn input(&mut self, cmd: Command) -> Input {
        let w = &mut self.world;
        match cmd {
            Command::Submit {
                jobs,
                dry_run,
                key,
                reply,
            } => Input::Submit {
                jobs,
                dry_run,
                key,
                reply: w.wait(Waiting::Ids(reply)),
            },
            Command::Job {
                who,
                id,
                action,
                reply,
            } => Input::Job {
                who,
                id,
                action,
                reply: w.wait(Waiting::Unit(reply)),
            },
            Command::Node {
                who,
                name,
                action,
                reply,
            } => Input::Node {
                who,
                name,
                action,
                reply: w.wait(Waiting::Unit(reply)),
            },
            Command::StepCreate {
                who,
                id,
                request,
                io,
                reply,
            } => Input::StepCreate {
                who,
                id,
                request,
                reply: w.wait(Waiting::Step(reply, io)),
            },
            Command::StepCancel {
                who,
                id,
                step,
                signal,
                reply,
            } => Input::StepCancel {
                who,
                id,
                step,
                signal,
                reply: reply.map(|r| w.wait(Waiting::Unit(r))),
            },
            Command::QueueObjects {
                who,
                request,
                reply,
            } => Input::QueueObjects {
                who,
                request,
                reply: w.wait(Waiting::QueueObjects(reply)),
            },
            Command::AgentHello { conn, hello, tx } => {
                w.links.insert(conn, tx);
                Input::AgentHello { conn, hello }
            }
            Command::AgentEvent { conn, event } => Input::AgentEvent { conn, event },
            Command::AgentHealth { conn, problem } => Input::AgentHealth { conn, problem },
            Command::AgentGone { conn, last_heard } => {
                w.links.remove(&conn);
                Input::AgentGone {
                    conn,
                    last_heard: last_heard.saturating_duration_since(self.started),
                }
            }
            Command::Read(_) | Command::Shutdown { .. } => {
                unreachable!("reads and the shutdown are not the controller's inputs")
            }
        }
    }

    /// Time to wait for commands before the next pass is due, or an away node's lease and
    /// margin have passed (it is declared lost on time, not at the next pass).
    fn until_next_pass(&self) -> Duration {
        let pass = self.until_pass();
        match self.controller.next_loss_at() {
            Some(at) => pass.min(at.saturating_sub(self.started.elapsed())),
            None => pass,
        }
    }

    fn until_pass(&self) -> Duration {
        match self.last_pass {
            None => Duration::ZERO,
            Some((at, took)) => {
                let next = if self.controller.dirty() {
                    at + took
                } else {
                    at + self.sched_interval
                };
                next.saturating_duration_since(Instant::now())
                    .min(self.sched_interval)
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
                (self.controller.dirty() && since >= took) || since >= self.sched_interval
            }
        }
    }
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

    /// Runs `f` on the engine thread against the controller's live state.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Controller) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Read(Box::new(move |e| {
            let _ = tx.send(f(e));
        })))?;
        rx.await
            .map_err(|_| ApiError::new(ErrorCode::Unavailable, "the controller is shutting down"))
    }
}

#[cfg(test)]
mod tests {
    use super::IoHub;
    use cadre_proto::agent::{GpuUsage, MAX_GPUS_PER_REPORT};

    fn gpu(index: u32, utilization_percent: u32, used: u64) -> GpuUsage {
        GpuUsage {
            index,
            utilization_percent,
            memory_used_bytes: used,
            memory_total_bytes: 100,
        }
    }

    /// A report out of NVML's ranges is dropped whole, the last good one kept; a node's
    /// usage goes with its agent.
    #[test]
    fn gpu_usage_out_of_range_is_dropped_whole() {
        let hub = IoHub::default();
        hub.gpu_usage("n1", vec![gpu(0, 40, 10)]);
        hub.gpu_usage("n1", vec![gpu(0, 50, 10), gpu(1, 250, 10)]);
        hub.gpu_usage("n1", vec![gpu(0, 50, 101)]);
        hub.gpu_usage("n1", vec![gpu(0, 50, 10); MAX_GPUS_PER_REPORT + 1]);
        assert_eq!(hub.gpu_usages()["n1"], vec![gpu(0, 40, 10)]);
        hub.forget_gpu_usage("n1");
        assert!(hub.gpu_usages().is_empty());
    }
}
