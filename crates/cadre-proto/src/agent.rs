//! The agent protocol: one WebSocket per agent at `/agent/v1/connect`, JSON text messages.
//!
//! **Authenticated**: the upgrade request carries `Authorization: Bearer <cluster key>`
//! (the key in the controller's data directory, `agent.key`); anything else gets 401 before
//! any message. **Versioned**: the first message is the agent's [`AgentMessage::Hello`]
//! with [`PROTOCOL_VERSION`]; the controller answers [`ControllerMessage::Welcome`] or
//! [`ControllerMessage::Refused`] (and closes) when it cannot speak that version.
//! **Reconnecting**: the agent reconnects with backoff whenever the connection drops, and
//! nothing is lost in between:
//! - task events are numbered ([`AgentMessage::Event`] `seq`, increasing over the agent's
//!   life) and kept in the agent's outbox until the controller acknowledges them
//!   ([`ControllerMessage::Ack`]), which it does only after committing what they say;
//!   a new `Hello` carries the whole outbox again, and applying an event twice is harmless
//!   (events name the run they belong to, and a run ends once);
//! - the `Hello` lists every run still alive on the node, so that a restarted controller
//!   keeps what runs, stops what it no longer knows, and finishes or requeues runs whose
//!   tasks are gone.
//!
//! A run is one start of a job: `(job, run)` where `run` is the job's requeue count when it
//! started, so that a late event of an earlier run can never end a later one.

use cadre_core::alloc::Allocation;
use cadre_core::cluster::{NodeId, NodeShape};
use cadre_core::job::{JobId, JobSpec, JobState};
use cadre_core::run::RunSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version of this protocol. A controller refuses agents of another version.
pub const PROTOCOL_VERSION: u32 = 1;

/// The path of the agent's WebSocket on the controller.
pub const CONNECT_PATH: &str = "/agent/v1/connect";

/// One start of a job.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RunRef {
    pub job: JobId,
    /// The job's requeue count when this run started.
    pub run: u32,
}

/// What the agent found on its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    pub shape: NodeShape,
    /// Its GPUs are declared (`--gpus-per-node`), not discovered.
    pub emulated_gpus: bool,
    /// The host name the node's tasks can be reached at.
    pub address: String,
    /// Notes from discovery (why NVML is unavailable, ...).
    pub notes: Vec<String>,
}

/// Agent to controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    Hello(Box<Hello>),
    Event(SequencedEvent),
}

/// The first message of every connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    /// The node this agent serves.
    pub node: String,
    pub report: NodeReport,
    /// Runs alive on the node now.
    pub running: Vec<RunRef>,
    /// Events not yet acknowledged, oldest first.
    pub outbox: Vec<SequencedEvent>,
}

/// A task event with its place in the agent's outbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SequencedEvent {
    pub seq: u64,
    pub event: TaskEvent,
}

/// What happened to a run's tasks on this node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskEvent {
    /// Every task of the run on this node started.
    Started { run: RunRef },
    /// The run's tasks on this node did not all start; those that had were stopped.
    /// `permanent`: trying again cannot help (the user does not exist on the node, the
    /// working directory is missing), so the job should be held, not retried.
    LaunchFailed {
        run: RunRef,
        reason: String,
        permanent: bool,
    },
    /// Every task of the run on this node has ended.
    Ended {
        run: RunRef,
        /// The worst outcome of the node's tasks (a final job state).
        state: JobState,
        /// The exit code of the node's first task that failed, else of its first task.
        exit_code: Option<i32>,
        /// The signal that ended that task, if one did.
        signal: Option<i32>,
    },
}

impl TaskEvent {
    pub fn run(&self) -> RunRef {
        match self {
            TaskEvent::Started { run }
            | TaskEvent::LaunchFailed { run, .. }
            | TaskEvent::Ended { run, .. } => *run,
        }
    }
}

/// Controller to agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControllerMessage {
    Welcome {
        version: u32,
        /// The node's id in the controller's cluster (what allocations name).
        node_id: NodeId,
    },
    /// The connection is refused, and why; the controller closes it.
    Refused { reason: String },
    /// Events up to and including `seq` are committed: drop them from the outbox.
    Ack { seq: u64 },
    /// Start the run's tasks placed on this node, all or none.
    Launch(Box<LaunchOrder>),
    /// Stop the run's tasks: SIGTERM, then SIGKILL after `kill_wait_secs`.
    Stop { run: RunRef, kill_wait_secs: u64 },
    /// Send a signal to the run's tasks now (`scancel --signal`).
    Signal { run: RunRef, signal: i32 },
}

/// Everything an agent needs to start a run's tasks on its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchOrder {
    pub run: RunRef,
    pub spec: JobSpec,
    pub partition: String,
    pub allocation: Allocation,
    /// Names of every node of the allocation, for the job's node list.
    pub node_names: BTreeMap<NodeId, String>,
    pub run_spec: RunSpec,
    /// The wall-clock limit in milliseconds from the start; `None`: unlimited.
    pub time_limit_ms: Option<u64>,
}
