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
//!   a new `Hello` carries the whole outbox again. The controller applies each event at
//!   most once: it remembers, per node, the last `seq` it applied in the agent's life
//!   ([`Hello::life`]) and skips the outbox's events up to it (still acknowledging
//!   them). Only a replay can repeat an event (each is sent by itself once), and a
//!   repeated `Ended` that drained its node must not drain it again after an
//!   administrator resumed it;
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
/// Version 2: launch orders carry the nodes' addresses and run specs may carry a Kubernetes
/// translation and completing groups; agents report [`TaskEvent::Completing`].
/// Version 3: job steps (a [`RunRef`] with a `step`, [`LaunchOrder::step`]), their output
/// relayed ([`AgentMessage::Output`]), allocations that run nothing by themselves, and
/// time limits changed while a run runs ([`ControllerMessage::SetTimeLimit`]).
/// Version 4: agents report their node's health ([`Hello::health`],
/// [`AgentMessage::Health`]); the welcome carries the controller's clock
/// ([`ControllerMessage::Welcome`] `now_ms`).
/// Version 5: no message changed, the lease did ([`LEASE_FROM_PINGS_VERSION`]).
/// Version 6: agents report their GPUs' utilisation and memory ([`AgentMessage::GpuUsage`]).
/// Version 7: the controller reads a running task's output from its agent
/// ([`ControllerMessage::ReadOutput`], [`AgentMessage::OutputRead`]).
pub const PROTOCOL_VERSION: u32 = 7;

/// From this version on, an agent answers [`ControllerMessage::ReadOutput`]; the controller
/// sends it to no older agent.
pub const READ_OUTPUT_VERSION: u32 = 7;

/// The most bytes of output one [`ControllerMessage::ReadOutput`] may ask for.
pub const MAX_OUTPUT_READ: u32 = 256 * 1024;

/// From this version on, an agent whose GPUs NVML can read reports their use
/// ([`AgentMessage::GpuUsage`]); it sends nothing of it to a controller that welcomed it in
/// an older version.
pub const GPU_USAGE_VERSION: u32 = 6;

/// GPUs a usage report may name at most (the most a node has is far fewer).
pub const MAX_GPUS_PER_REPORT: usize = 256;

/// From this version on the agent renews its lease ([`ControllerMessage::Welcome`]
/// `lease_ms`) only by the welcome, counted from when it sent its hello, and by WebSocket
/// pongs answering its own pings (each ping's payload its number, 8 bytes big-endian),
/// counted from when it sent the ping; no other frame renews it. It sends SIGTERM to every
/// run a third of the lease before the lease ends, and SIGKILL at the end. The controller
/// counts such an agent's lease from the last frame it heard from it. Before: any frame
/// renewed it from when it was heard, and SIGKILL came a third of the lease after its end;
/// the controller grants such agents less and counts from the disconnection (see
/// `cadre_server::controller::lease_for`).
pub const LEASE_FROM_PINGS_VERSION: u32 = 5;

/// The oldest agent protocol a controller still serves: an agent of version 3 reports no
/// health and is welcomed in its own version, an agent before version 5 holds a shorter
/// lease (see [`LEASE_FROM_PINGS_VERSION`]), so that agents can be upgraded after their
/// controller, one node at a time.
pub const OLDEST_AGENT_VERSION: u32 = 3;

/// The path of the agent's WebSocket on the controller.
pub const CONNECT_PATH: &str = "/agent/v1/connect";

/// One start of a job, or one job step of that start.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RunRef {
    pub job: JobId,
    /// The job's requeue count when this run started.
    pub run: u32,
    /// A job step (`srun` in the job's allocation): its number. A step is launched,
    /// reported on and stopped like a run of its own; `None`: the job's run itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
}

impl RunRef {
    /// The job's run itself (not a step).
    pub fn job_run(job: JobId, run: u32) -> RunRef {
        RunRef {
            job,
            run,
            step: None,
        }
    }
}

impl std::fmt::Display for RunRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            Some(s) => write!(f, "{}.{s} (run {})", self.job, self.run),
            None => write!(f, "{} (run {})", self.job, self.run),
        }
    }
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
    /// The node's container runtime, as its `--version` names it; `None`: none. Workloads
    /// whose containers run in their images are placed only on nodes that have one.
    #[serde(default)]
    pub container_runtime: Option<String>,
}

/// Agent to controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    Hello(Box<Hello>),
    Event(SequencedEvent),
    /// Output of a step's task whose output goes back to its `srun`
    /// ([`StepContext::relay`]). Not kept in the outbox: output produced while the
    /// controller is unreachable is lost (the step's end is not).
    Output(OutputChunk),
    /// The node's health changed (version 4): what its checks find wrong, `None` when
    /// nothing. The controller drains the node with it until a later report is clean.
    Health {
        problem: Option<String>,
    },
    /// The node's GPUs' utilisation and memory now, as NVML reads them (version 6), sent
    /// every so often while connected. Not kept in the outbox: a sample missed is replaced
    /// by the next.
    GpuUsage {
        gpus: Vec<GpuUsage>,
    },
    /// The answer to [`ControllerMessage::ReadOutput`] `request` (version 7): a piece of
    /// the task's output, or why there is none.
    OutputRead {
        request: u64,
        #[serde(flatten)]
        answer: OutputReadAnswer,
    },
}

/// What an agent answers to a read of a task's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum OutputReadAnswer {
    Piece(OutputPiece),
    /// The agent keeps no output of that task: it does not run here, its output is not a
    /// file the agent could open (a pipe, a device, a path the user cannot read), it ended
    /// too long ago, or the agent restarted since it started. `why` says which.
    Unavailable {
        why: String,
    },
}

/// A piece of a task's output file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputPiece {
    /// Where in the file the piece starts (bytes).
    pub offset: u64,
    /// Where the next piece starts: `offset` plus the bytes the piece holds. A character
    /// cut at the end of the read is left for the next one.
    pub next_offset: u64,
    /// The file's size when it was read.
    pub size: u64,
    /// The bytes, as text (bytes that are not UTF-8 replaced).
    pub data: String,
    /// The task has ended: nothing more will be written by it.
    pub ended: bool,
}

/// One GPU's use, as NVML reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuUsage {
    /// NVML's index (the `gpu` label of the node's other GPU series).
    pub index: u32,
    /// Percent of the last sample period in which a kernel ran (NVML's GPU utilisation).
    pub utilization_percent: u32,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

/// A piece of a task's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputChunk {
    pub run: RunRef,
    /// The task's rank in its step (`SLURM_PROCID`).
    pub task: u32,
    pub stream: OutputStream,
    /// The bytes, as text (a chunk ends on a character boundary; bytes that are not UTF-8
    /// are replaced).
    pub data: String,
}

/// Which of a task's outputs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum OutputStream {
    Stdout,
    Stderr,
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
    /// What the node's health checks, run before this hello, find wrong (version 4);
    /// `None`: nothing (or an agent of version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// The agent's own version (cadre's), for `cadre nodes --long`; `None` from older ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Which life of the agent this is: the same in every hello until the agent restarts,
    /// another after (its first event's `seq`, numbered from its start time, so that a
    /// restarted agent's outbox begins afresh). `seq`s are compared only within one life:
    /// a new life may number lower (a clock stepped back). `None` from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub life: Option<u64>,
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
    /// Every task of the run on this node has ended. NODE_FAIL: stopped because the agent
    /// itself was shutting down (the job did nothing wrong and may be requeued).
    Ended {
        run: RunRef,
        /// The worst outcome of the node's tasks (a final job state).
        state: JobState,
        /// The exit code of the node's first task that failed, else of its first task.
        exit_code: Option<i32>,
        /// The signal that ended that task, if one did.
        signal: Option<i32>,
        /// Processes of the run's tasks survived SIGKILL past the agent's kill timeout:
        /// which, and where. The controller drains the node ("Kill task failed"): they
        /// may still hold its GPUs. Absent (an older agent): none were seen.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        drain: Option<String>,
    },
    /// For a run whose spec names completing groups
    /// ([`cadre_core::run::RunSpec::completing_groups`]): every task of those groups on this
    /// node has ended while other tasks of the node still run. The fields are as in
    /// `Ended`, over the node's tasks that have ended so far. The controller decides, once
    /// every node's completing tasks are done, whether the job has succeeded, and stops
    /// the rest; the node's `Ended` follows as usual.
    Completing {
        run: RunRef,
        state: JobState,
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
}

impl TaskEvent {
    pub fn run(&self) -> RunRef {
        match self {
            TaskEvent::Started { run }
            | TaskEvent::LaunchFailed { run, .. }
            | TaskEvent::Ended { run, .. }
            | TaskEvent::Completing { run, .. } => *run,
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
        /// The agent's lease, in milliseconds: an agent that cannot renew it (see
        /// [`LEASE_FROM_PINGS_VERSION`]) stops every run it holds by its end (fencing),
        /// before the controller declares the node lost and requeues them elsewhere (the
        /// lease and a margin after the agent's last frame). `None` (an older
        /// controller): no lease.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_ms: Option<u64>,
        /// The controller's wall clock at the welcome, in milliseconds since 1970 (version
        /// 4), for the agent's check of its own clock.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        now_ms: Option<u64>,
        /// The cluster's settings for its agents (version 4, configless): what an agent's
        /// own command line does not set, it takes from here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings: Option<AgentSettings>,
    },
    /// The connection is refused, and why; the controller closes it.
    Refused { reason: String },
    /// Events up to and including `seq` are committed: drop them from the outbox.
    Ack { seq: u64 },
    /// Start the run's tasks placed on this node, all or none.
    Launch(Box<LaunchOrder>),
    /// Stop the run's tasks: SIGTERM, then SIGKILL after `kill_wait_secs`. Their `Ended`
    /// follows (CANCELLED unless they ended otherwise first). A run the agent does not know
    /// at all is answered with `Ended { state: CANCELLED }` at once, so that the controller
    /// always gets an end; one that recently ended there gets nothing more.
    Stop { run: RunRef, kill_wait_secs: u64 },
    /// Send a signal to the run's tasks now (`scancel --signal`).
    Signal { run: RunRef, signal: i32 },
    /// The run's time limit changed (`scontrol update TimeLimit=`): milliseconds from its
    /// start; `None`: unlimited.
    SetTimeLimit {
        run: RunRef,
        time_limit_ms: Option<u64>,
    },
    /// Read a task's output (version 7), answered by [`AgentMessage::OutputRead`] with the
    /// same `request`. Agents answer it in any state of the connection after their hello.
    ReadOutput {
        request: u64,
        #[serde(flatten)]
        read: OutputRequest,
    },
}

/// Which piece of a task's output to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRequest {
    pub run: RunRef,
    /// The task's `SLURM_PROCID`.
    pub task: u32,
    pub stream: OutputStream,
    /// From here; `None`: the last `max` bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// At most this many bytes (at most [`MAX_OUTPUT_READ`]).
    pub max: u32,
}

/// The cluster's settings for its nodes' agents, from the controller (Slurm's configless
/// mode): programs are paths on the nodes, run only where they are root's alone. Each
/// field the agent's own command line sets is the agent's; `None`: the agent's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prolog: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilog: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prolog_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_program: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_interval_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_timeout_secs: Option<u64>,
    /// Slurm's TaskProlog and TaskEpilog, run as the job's user around each task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_prolog: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_epilog: Option<String>,
}

impl AgentSettings {
    pub fn is_empty(&self) -> bool {
        *self == AgentSettings::default()
    }
}

/// Everything an agent needs to start a run's tasks on its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchOrder {
    pub run: RunRef,
    pub spec: JobSpec,
    pub partition: String,
    pub allocation: Allocation,
    /// Names of every node of the allocation, for the job's node list. In JSON an object
    /// keyed by the node id as a string (`{"7": "gpu007"}`).
    #[serde(deserialize_with = "node_names_from_string_keys")]
    pub node_names: BTreeMap<NodeId, String>,
    /// The address each node of the allocation reported in its `Hello` (where its tasks
    /// can be reached), keyed as `node_names`; a node without one is reached by its name.
    #[serde(default, deserialize_with = "node_names_from_string_keys")]
    pub node_addresses: BTreeMap<NodeId, String>,
    pub run_spec: RunSpec,
    /// The wall-clock limit in milliseconds from the start; `None`: unlimited.
    pub time_limit_ms: Option<u64>,
    /// For a job step: what it adds to the job's order. The allocation above is then the
    /// step's tasks (within the job's), and the run spec the step's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepContext>,
    /// The run's job token ([`crate::job_token`]), made by the controller: an agent that
    /// enrolled with a certificate holds no cluster key to make one. `None` (an older
    /// controller): the agent makes it with its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_token: Option<Secret>,
    /// The PersistentVolumeClaims the run's pods mount, as the controller resolved them from
    /// its own records (never from the job's own files): an agent mounts only these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimMount>,
    /// The node paths the run's pods mount (`hostPath` volumes), which the controller took
    /// from an administrator only: an agent mounts only these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_paths: Vec<String>,
}

/// A PersistentVolumeClaim a run mounts: the directory `volume` in `class_path`, the job's
/// user's alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimMount {
    /// The claim's name in the workload's namespace.
    pub name: String,
    /// Its StorageClass's `parameters.path`: a directory that must be root's all the way
    /// down (the agent checks).
    pub class_path: String,
    /// The claim's directory in it: `pvc-<uid>`.
    pub volume: String,
    /// Every task mounts it read-only (`ReadOnlyMany`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// A secret in a message: serialized as itself, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// What a job step's launch order adds to a job's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepContext {
    /// The job's node list (a compressed hostlist), node count, task count and tasks per
    /// node (Slurm's compressed counts): its tasks see these as `SLURM_JOB_*`, and the
    /// step's own as `SLURM_STEP_*`, `SLURM_NNODES`, `SLURM_NTASKS`.
    pub job_nodelist: String,
    pub job_num_nodes: u32,
    pub job_cpus_per_node: String,
    /// The tasks' output goes back to `srun` ([`AgentMessage::Output`]) rather than to
    /// files (the run spec then names none).
    pub relay: bool,
    /// The step's task runs inside the container of the job's task of this rank (see
    /// [`crate::api::StepRequest::in_task`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_task: Option<u32>,
    /// The processes the step's tasks leave behind outlive them (see
    /// [`crate::api::StepRequest::leftovers_outlive`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leftovers_outlive: bool,
    /// The step's host name (see [`crate::api::StepRequest::hostname`]), checked by the
    /// controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// Reads `LaunchOrder::node_names`, whose JSON keys are strings. Needed because serde reads
/// an internally tagged enum's variant ([`ControllerMessage::Launch`]) from buffered
/// content, where a key stays a string and no longer parses as a number by itself.
fn node_names_from_string_keys<'de, D>(d: D) -> Result<BTreeMap<NodeId, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    BTreeMap::<String, String>::deserialize(d)?
        .into_iter()
        .map(|(id, name)| match id.parse::<u32>() {
            Ok(n) => Ok((NodeId(n), name)),
            Err(_) => Err(D::Error::custom(format!(
                "node_names: `{id}` is not a node id"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::alloc::TaskAlloc;
    use cadre_core::resources::TaskResources;
    use cadre_core::time::Dur;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug>(
        value: &T,
    ) {
        let text = serde_json::to_string(value).unwrap();
        let back: T =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("cannot read back {text}: {e}"));
        assert_eq!(&back, value);
    }

    #[test]
    fn every_message_reads_back_as_it_was_written() {
        let run = RunRef::job_run(JobId(42), 1);
        let step = RunRef {
            step: Some(3),
            ..run
        };
        let order = LaunchOrder {
            run,
            spec: JobSpec::simple("alice", "physics", 2, TaskResources::default(), Dur(60)),
            partition: "gpu".into(),
            allocation: Allocation {
                tasks: vec![TaskAlloc {
                    group: 0,
                    rank: 0,
                    node: NodeId(7),
                    cores: vec![0, 1],
                    gpus: vec![1],
                    gpu_milli_each: 1000,
                    nics: vec![],
                    mem_mib: 1024,
                    named: vec![("license".into(), 1)],
                }],
                exclusive: false,
            },
            node_names: [(NodeId(7), "gpu007".into()), (NodeId(12), "gpu012".into())]
                .into_iter()
                .collect(),
            node_addresses: [(NodeId(7), "10.0.0.7".into())].into_iter().collect(),
            run_spec: RunSpec::command(vec!["true".into()], "/tmp".into()),
            time_limit_ms: Some(60_000),
            step: Some(StepContext {
                job_nodelist: "gpu[007,012]".into(),
                job_num_nodes: 2,
                job_cpus_per_node: "2(x2)".into(),
                relay: true,
                in_task: Some(3),
                leftovers_outlive: true,
                hostname: Some("pi-worker-1".into()),
            }),
            job_token: Some(Secret("cadre-job-7-0-00ff".into())),
            claims: Vec::new(),
            host_paths: Vec::new(),
        };
        for m in [
            ControllerMessage::Welcome {
                version: PROTOCOL_VERSION,
                node_id: NodeId(7),
                lease_ms: Some(15_000),
                now_ms: Some(1_795_000_000_000),
                settings: Some(AgentSettings {
                    prolog: Some("/etc/cadre/prolog".into()),
                    health_check_interval_secs: Some(30),
                    ..AgentSettings::default()
                }),
            },
            ControllerMessage::Refused {
                reason: "no".into(),
            },
            ControllerMessage::Ack { seq: 9 },
            ControllerMessage::Launch(Box::new(order)),
            ControllerMessage::Stop {
                run,
                kill_wait_secs: 30,
            },
            ControllerMessage::Signal { run, signal: 10 },
            ControllerMessage::SetTimeLimit {
                run: step,
                time_limit_ms: Some(5),
            },
            ControllerMessage::ReadOutput {
                request: 4,
                read: OutputRequest {
                    run: step,
                    task: 1,
                    stream: OutputStream::Stderr,
                    offset: Some(10),
                    max: 4096,
                },
            },
        ] {
            round_trip(&m);
        }
        // A read's fields sit beside its tag and request number on the wire.
        let read = serde_json::to_value(ControllerMessage::ReadOutput {
            request: 4,
            read: OutputRequest {
                run,
                task: 1,
                stream: OutputStream::Stdout,
                offset: None,
                max: 9,
            },
        })
        .unwrap();
        assert_eq!(read["type"], "read_output");
        assert_eq!(
            (read["request"].clone(), read["task"].clone()),
            (4.into(), 1.into())
        );
        assert_eq!(
            (read["stream"].clone(), read["max"].clone()),
            ("stdout".into(), 9.into())
        );
        assert!(
            read.get("offset").is_none() && read.get("read").is_none(),
            "{read}"
        );
        let events = vec![
            SequencedEvent {
                seq: 1,
                event: TaskEvent::Started { run },
            },
            SequencedEvent {
                seq: 2,
                event: TaskEvent::LaunchFailed {
                    run,
                    reason: "x".into(),
                    permanent: true,
                },
            },
            SequencedEvent {
                seq: 3,
                event: TaskEvent::Ended {
                    run,
                    state: JobState::Failed,
                    exit_code: Some(3),
                    signal: None,
                    drain: Some("processes [41] in /sys/fs/cgroup/x after SIGKILL".into()),
                },
            },
            SequencedEvent {
                seq: 4,
                event: TaskEvent::Completing {
                    run,
                    state: JobState::Completed,
                    exit_code: Some(0),
                    signal: None,
                },
            },
        ];
        let hello = Hello {
            version: PROTOCOL_VERSION,
            node: "gpu007".into(),
            report: NodeReport {
                shape: NodeShape::uniform("local", 8, 65536, 4, "h100", 2, 2),
                emulated_gpus: true,
                address: "gpu007.example".into(),
                notes: vec!["gpus: 4 EMULATED".into()],
                container_runtime: Some("podman version 4.3.1".into()),
            },
            running: vec![run],
            outbox: events.clone(),
            health: Some("only 12 MiB free for jobs in /var/lib/cadre-agent".into()),
            agent_version: Some("0.1.0".into()),
            life: Some(1_700_000_000_000_000),
        };
        round_trip(&AgentMessage::Hello(Box::new(hello)));
        round_trip(&AgentMessage::Health { problem: None });
        round_trip(&AgentMessage::Health {
            problem: Some("RDMA port mlx5_0/1 is no longer active".into()),
        });
        for e in events {
            round_trip(&AgentMessage::Event(e));
        }
        round_trip(&AgentMessage::Output(OutputChunk {
            run: step,
            task: 1,
            stream: OutputStream::Stderr,
            data: "épsilon\n".into(),
        }));
        round_trip(&AgentMessage::GpuUsage {
            gpus: vec![GpuUsage {
                index: 3,
                utilization_percent: 97,
                memory_used_bytes: 70 << 30,
                memory_total_bytes: 80 << 30,
            }],
        });
        // A run of version 2's form (no step) reads as the job's run.
        let old: RunRef = serde_json::from_str(r#"{"job":42,"run":1}"#).unwrap();
        assert_eq!(old, run);
    }

    #[test]
    fn node_names_are_an_object_keyed_by_node_id() {
        let names: BTreeMap<NodeId, String> = [(NodeId(7), "gpu007".to_string())].into();
        #[derive(Serialize, Deserialize)]
        struct Names {
            #[serde(deserialize_with = "node_names_from_string_keys")]
            n: BTreeMap<NodeId, String>,
        }
        let text = serde_json::to_string(&Names { n: names.clone() }).unwrap();
        assert_eq!(text, r#"{"n":{"7":"gpu007"}}"#);
        assert_eq!(serde_json::from_str::<Names>(&text).unwrap().n, names);
        let err = serde_json::from_str::<Names>(r#"{"n":{"x":"gpu007"}}"#)
            .err()
            .unwrap();
        assert!(err.to_string().contains("`x` is not a node id"), "{err}");
    }

    #[test]
    fn an_end_from_an_agent_that_knows_no_drain_processes_reads_as_none() {
        let json = r#"{"type":"event","seq":4,"event":{"kind":"ended","run":{"job":7,"run":0},"state":"COMPLETED","exit_code":0,"signal":null}}"#;
        let msg: AgentMessage = serde_json::from_str(json).expect("an older agent's end");
        let AgentMessage::Event(SequencedEvent {
            event: TaskEvent::Ended { drain, .. },
            ..
        }) = msg
        else {
            panic!("not an end: {msg:?}");
        };
        assert_eq!(drain, None);
    }
}
