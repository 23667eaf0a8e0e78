//! The REST API's bodies, under `/api/v1` (the controller serves their OpenAPI document at
//! `/api/v1/openapi.json`).
//!
//! Times are whole seconds since the Unix epoch; durations are whole seconds. Errors are
//! [`ErrorBody`] with a stable [`ErrorCode`] that scripts can match on and a message that
//! says what was wrong.

use cadre_core::alloc::Allocation;
use cadre_core::cluster::NodeAvail;
use cadre_core::job::{ArrayIndex, JobId, JobSpec, JobState};
use cadre_core::run::RunSpec;
use serde::{Deserialize, Serialize};

/// The API's version prefix.
pub const PREFIX: &str = "/api/v1";

/// One job to submit: what it asks for and what it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobSubmission {
    /// The job's spec. `user` is replaced by the caller's identity unless the caller is an
    /// administrator; `submit_time` is set by the controller.
    pub spec: JobSpec,
    pub run: RunSpec,
    /// For a task of a job array: the position in this request of the array's first task
    /// (whose own `array_of` is itself). The controller sets `spec.array.array_job` to
    /// that task's id (an array's id is its first task's, as in Slurm), which the submitter
    /// cannot know before the commit. A job with `spec.array` must have it: a job is a task
    /// only of an array submitted in the same request, never of an existing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_of: Option<usize>,
}

/// `POST /jobs`: one job, or several committed together (all, or none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub jobs: Vec<JobSubmission>,
    /// Check the jobs as a submission would (partition, QOS, dependencies, limits) and
    /// answer with no ids, committing nothing (`sbatch --test-only`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// The ids of the submitted jobs, in the order given. They are committed: they survive a
/// crash of the controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubmitResponse {
    pub job_ids: Vec<JobId>,
}

/// A job as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobView {
    pub id: JobId,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub state: JobState,
    /// Why a pending job waits, in Slurm's words (`Resources`, `Priority`, ...); `None`
    /// otherwise.
    pub reason: String,
    pub submit_time: u64,
    pub start_time: Option<u64>,
    pub end_time: Option<u64>,
    /// Seconds; 0: none.
    pub time_limit: u64,
    /// The nodes it runs or last ran on, as a hostlist (`node[001-004]`).
    pub nodes: String,
    pub tasks: u32,
    /// GPUs of the whole gang (fractions for shared GPUs).
    pub gpus: f64,
    pub exit_code: Option<i32>,
    pub requeues: u32,
    /// When backfill plans to start it, if it planned.
    pub expected_start: Option<u64>,
    pub priority: Option<u64>,
    pub held: bool,
    /// For a task of a job array: the array's id (its first task's) and this task's index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayIndex>,
    /// CPUs of the whole gang: allocated if it runs or ran, else asked for.
    #[serde(default)]
    pub cpus: u64,
    /// Present when asked for one job, or for a list with `detail=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
    /// What the job runs (its script, directory, output files), without the environment
    /// captured at submission. Present when asked for one job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunSpec>,
}

/// `GET /jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobList {
    pub jobs: Vec<JobView>,
}

/// `POST /jobs/{id}/cancel`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Send this signal to a running job's tasks instead of cancelling it (`scancel -s`).
    #[serde(default)]
    pub signal: Option<i32>,
}

/// `PATCH /jobs/{id}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobUpdate {
    /// New time limit in seconds (raising it needs an administrator).
    #[serde(default)]
    pub time_limit: Option<u64>,
    /// New nice value of a pending job (negative values need an administrator).
    #[serde(default)]
    pub nice: Option<i32>,
}

/// `POST /jobs/{id}/complete`: the client of an allocation (`salloc`, or `srun` outside
/// one) is done with it; the job ends with this exit code (COMPLETED for 0, FAILED
/// otherwise) and its steps are stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    #[serde(default)]
    pub exit_code: i32,
}

/// `POST /jobs/{id}/steps`: a job step, `srun` inside the job's allocation. Every count
/// left out is the job's own (all its nodes, all its tasks, laid out as the job's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StepRequest {
    /// Program and arguments, run by every task.
    pub command: Vec<String>,
    /// Where the tasks start.
    pub work_dir: String,
    /// The environment the tasks start from (`srun`'s own).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// `--job-name`; default: the program's file name.
    #[serde(default)]
    pub name: Option<String>,
    /// `--nodes`: this many of the job's nodes, the first ones in node order.
    #[serde(default)]
    pub nodes: Option<u32>,
    /// `--nodelist`: these nodes of the job (a hostlist).
    #[serde(default)]
    pub nodelist: Option<String>,
    /// `--ntasks`.
    #[serde(default)]
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node`.
    #[serde(default)]
    pub ntasks_per_node: Option<u32>,
    /// `--cpus-per-task`.
    #[serde(default)]
    pub cpus_per_task: Option<u32>,
    /// `--gpus-per-task`: the GPUs of the job on each node are divided among its tasks
    /// there, this many each; default: every task sees all of them.
    #[serde(default)]
    pub gpus_per_task: Option<u32>,
    /// `--output` pattern (`%t` task, `%n` node index, `%N` node name, `%j`, ...); `None`:
    /// the output comes back in the answer.
    #[serde(default)]
    pub stdout: Option<String>,
    /// `--error` pattern; `None`: with `stdout`, into the same file; without, back in the
    /// answer.
    #[serde(default)]
    pub stderr: Option<String>,
    /// `--time`, seconds; at most what is left of the job's.
    #[serde(default)]
    pub time_limit: Option<u64>,
    /// Run the command inside the container of the job's task of this rank (a Kubernetes
    /// workload run in its images), with that container's user and environment, as
    /// `kubectl exec` would; the step must then be one task on that task's node.
    /// `cadre rsh` asks for it to start MPI's daemons in the workers' images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_task: Option<u32>,
    /// Processes the command leaves behind outlive the step, as they outlive an ssh
    /// session: when the command's own process ends, the rest of its process group (and
    /// cgroup) is not killed. `cadre rsh` asks for it: OpenMPI's `orted` detaches itself
    /// from its step (fork, then setsid), and killing the group as the parent exits would
    /// race the child's setsid.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leftovers_outlive: bool,
    /// The command's host name, in a UTS namespace of its own: a Kubernetes pod's, when
    /// `cadre rsh` reaches a pod of a workload run on the host (MPI's daemons, and the
    /// ranks they start, then say the pod's name). Letters, digits, `-` and `.`, at most
    /// 63 characters. Given only where the step gets the job's files mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// Whether `name` may be a step's host name ([`StepRequest::hostname`]).
pub fn is_step_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// The step number of a job's batch step (its script's own run, on its first node), as
/// Slurm numbers it.
pub const BATCH_STEP: u32 = 0xFFFF_FFFB;

/// A job step as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepView {
    pub job: JobId,
    pub step: u32,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub state: JobState,
    /// The step's nodes, a hostlist.
    pub nodes: String,
    pub num_nodes: u32,
    pub ntasks: u32,
    pub cpus: u64,
    pub start_time: u64,
    #[serde(default)]
    pub end_time: Option<u64>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    pub command: String,
    /// The job's time limit in seconds (0: none), which bounds the step's.
    pub time_limit: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepList {
    pub steps: Vec<StepView>,
}

/// The answer of `POST /jobs/{id}/steps`, streamed as JSON lines: `created` first, then
/// the tasks' output as it comes (when the step has no output files), then `ended`.
/// Closing the connection before `ended` cancels the step, as Slurm does when `srun` dies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StepEvent {
    Created {
        step: StepView,
    },
    Output {
        /// The task's rank in the step.
        task: u32,
        stream: crate::agent::OutputStream,
        data: String,
    },
    Ended {
        state: JobState,
        /// The highest exit code of the step's tasks.
        exit_code: Option<i32>,
        /// Why, when the step did not end by itself (its job ended, it was cancelled).
        #[serde(default)]
        reason: Option<String>,
    },
}

/// `GET /jobs/{id}/explain`: why a job waits, node by node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExplainView {
    pub id: JobId,
    pub state: JobState,
    pub reason: String,
    pub priority: u64,
    /// Priority factors by name (`age`, `fairshare`, ...), each in [0, 1].
    pub factors: Vec<(String, f64)>,
    pub expected_start: Option<u64>,
    /// A job the last pass found starving (waiting longer than the policy's
    /// `starvation_wait`) and put first in its partition, with a reservation of its own:
    /// when it became eligible (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starving_since: Option<u64>,
    /// It carries that mark because work has stopped arriving at its partition and it
    /// would end the backlog last (the policy's `drain_longest_first`), not for its wait.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ends_backlog: bool,
    /// Its `job_size` factor favours larger jobs: its partition's backlog drains within the
    /// policy's `largest_first_within`, or the small work left could not fill the gaps its
    /// gangs would leave (`largest_first_gaps_percent`; then `largest_first_for_gaps` too).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub largest_first: bool,
    /// Its `job_size` factor favours larger jobs for the gaps, not for a shallow backlog.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub largest_first_for_gaps: bool,
    /// For each node of the job's partition that cannot take it now, why not.
    pub nodes: Vec<(String, String)>,
    /// What the reason means in this job's case, when its name alone does not say: the
    /// quota or limit and by how much, the queue that does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One thing that happened to a job (Kubernetes' events, as `cadre describe` shows them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobEventView {
    pub at: u64,
    /// One word: `Submitted`, `Pending`, `Started`, `TasksFailed`, `NodeLost`,
    /// `LaunchFailed`, `Preempted`, `Requeued`, `Deleted`, or the final state
    /// (`Completed`, `Failed`, `Cancelled`, `Timeout`, ...).
    pub kind: String,
    /// Kubernetes would show it as a `Warning` rather than `Normal`.
    pub warning: bool,
    pub message: String,
}

/// `GET /jobs/{id}/output`: a piece of one task's output file, read from its node by its
/// agent (while the task runs, and for a while after it ends).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskOutput {
    pub job: u64,
    /// The task's rank over the job (`SLURM_PROCID`).
    pub task: u32,
    /// The node it runs on.
    pub node: String,
    pub stream: crate::agent::OutputStream,
    /// The piece: ask again from its `next_offset` to follow the output.
    #[serde(flatten)]
    pub piece: crate::agent::OutputPiece,
}

/// `GET /jobs/{id}/events`: the job's events, oldest first (see docs/kubernetes.md for
/// which are recorded and which are derived from the job's record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobEventList {
    pub id: JobId,
    pub events: Vec<JobEventView>,
}

/// Amounts of a queue, in the units `cadre get queues` shows: GPUs as (fractional) GPUs;
/// `None`: not managed (a quota) or not limited (a limit).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueAmountsView {
    pub cpus: Option<u64>,
    pub mem_mib: Option<u64>,
    pub gpus: Option<f64>,
    pub nics: Option<u64>,
}

/// A queue: its quota, what it uses and how many jobs it admitted and holds back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueView {
    pub name: String,
    /// Where it is defined: `policy` (the policy file), `ClusterQueue`
    /// (kueue.x-k8s.io) or `Queue` (scheduling.volcano.sh).
    pub source: String,
    pub cohort: Option<String>,
    pub weight: u32,
    /// Its ResourceFlavor (ClusterQueues).
    pub flavor: Option<String>,
    pub nominal: QueueAmountsView,
    pub borrowing_limit: Option<QueueAmountsView>,
    pub lending_limit: Option<QueueAmountsView>,
    pub capability: Option<QueueAmountsView>,
    pub used: QueueAmountsView,
    /// What it uses above its nominal quota (borrowed from its cohort).
    pub borrowed: QueueAmountsView,
    /// Running jobs counted in it.
    pub admitted: u64,
    /// Pending jobs naming it.
    pub pending: u64,
    /// Its use is above one of its limits (lowered while its jobs ran): it admits nothing
    /// new until enough of them end.
    pub over_quota: bool,
}

/// A Kueue LocalQueue: the queue name a namespace's jobs give, and its ClusterQueue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LocalQueueView {
    pub namespace: String,
    pub name: String,
    pub cluster_queue: String,
    /// Jobs routed through it that have not ended.
    pub pending: u64,
    pub admitted: u64,
}

/// A Kueue ResourceFlavor: the node labels of its nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlavorView {
    pub name: String,
    pub node_labels: Vec<(String, String)>,
}

/// `GET /queues`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueList {
    pub queues: Vec<QueueView>,
    pub local_queues: Vec<LocalQueueView>,
    pub flavors: Vec<FlavorView>,
    /// ResourceQuotas: each namespace quota and its namespace's use.
    #[serde(default)]
    pub namespace_quotas: Vec<NamespaceQuotaView>,
}

/// A namespace quota (ResourceQuota): its hard limits and what the namespace's running
/// gangs use, on the limited components.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamespaceQuotaView {
    pub namespace: String,
    pub name: String,
    pub hard: QueueAmountsView,
    pub used: QueueAmountsView,
}

/// A queue object by name: `kind` as manifests write it (`ClusterQueue`, `LocalQueue`,
/// `ResourceFlavor`, `Topology`, `Queue` for Volcano's); `namespace` only for LocalQueues.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueObjectRef {
    pub kind: String,
    #[serde(default)]
    pub namespace: String,
    pub name: String,
}

/// A queue object as applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueObjectView {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub applied: u64,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub manifest: serde_json::Value,
}

/// `GET /queue-objects`: every queue object applied, in the order first applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueObjectList {
    pub objects: Vec<QueueObjectView>,
}

/// `POST /queue-objects`: queue objects to put (as `kubectl apply` would: an object of an
/// existing kind and name replaces it) and to delete, all at once or none. Administrators
/// only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueObjectsRequest {
    /// Manifests (as JSON) of Kueue ResourceFlavors, ClusterQueues, LocalQueues,
    /// Topologies and Volcano Queues.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub put: Vec<serde_json::Value>,
    #[serde(default)]
    pub delete: Vec<QueueObjectRef>,
    /// The namespace of LocalQueues that name none (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Check everything, change nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// What happened to one object of a [`QueueObjectsRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueObjectResult {
    #[serde(flatten)]
    pub object: QueueObjectRef,
    /// kubectl's word: `created`, `configured`, `unchanged` or `deleted`.
    pub outcome: String,
}

/// The answer to a [`QueueObjectsRequest`], one result per object in the order given
/// (puts, then deletes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueObjectsResponse {
    pub results: Vec<QueueObjectResult>,
}

/// A node as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeView {
    pub name: String,
    /// Slurm's node state: idle, mixed, allocated, draining, drained, down, unknown.
    pub state: String,
    pub avail: NodeAvail,
    pub reason: Option<String>,
    /// Whether its agent is connected now.
    pub connected: bool,
    pub partitions: Vec<String>,
    pub cpus: u64,
    pub cpus_alloc: u64,
    pub memory_mib: u64,
    pub memory_alloc_mib: u64,
    pub gpus: u64,
    pub gpus_alloc: f64,
    pub gpu_model: Option<String>,
    /// Its GPUs are declared (`--gpus-per-node`), not discovered.
    pub emulated_gpus: bool,
    /// The cluster's features of the node, and `container-runtime` while its agent has one.
    pub features: Vec<String>,
    /// The container runtime its agent reported (`podman version 4.3.1`); `None`: none,
    /// or the agent has not connected since the controller started.
    #[serde(default)]
    pub container_runtime: Option<String>,
    /// Where its tasks are reached, as its agent last reported.
    #[serde(default)]
    pub address: Option<String>,
    /// Its agent's version (cadre's) and protocol, as of its last hello.
    #[serde(default)]
    pub agent_version: Option<String>,
    #[serde(default)]
    pub agent_protocol: Option<u32>,
    /// When the controller last heard its agent (any frame, pings included), in seconds
    /// since 1970; `None`: not since the controller started.
    #[serde(default)]
    pub last_heard: Option<u64>,
    /// When the node's certificate expires (nodes enrolled with a join token), in seconds
    /// since 1970.
    #[serde(default)]
    pub cert_expires: Option<u64>,
    /// What its agent finds wrong with it (less than described, failing health checks),
    /// which drains it until a later report is clean.
    #[serde(default)]
    pub health: Option<String>,
}

/// `GET /nodes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeList {
    pub nodes: Vec<NodeView>,
}

/// `POST /nodes/{name}/drain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    pub reason: String,
}

/// A partition as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionView {
    pub name: String,
    pub default: bool,
    pub up: bool,
    /// Its nodes as a hostlist.
    pub nodes: String,
    pub node_count: u32,
    pub max_time: Option<u64>,
    pub default_time: Option<u64>,
    pub priority_tier: u32,
    pub gpus: u64,
    pub gpus_alloc: f64,
}

/// `GET /partitions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionList {
    pub partitions: Vec<PartitionView>,
}

/// One row of the fair-share tree (`sshare`): an account, or a user under an account.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareView {
    pub account: String,
    /// Empty for an account's own row.
    pub user: String,
    pub parent: Option<String>,
    /// A number, or `parent` (the association stands for its account).
    pub raw_shares: String,
    pub norm_shares: f64,
    pub raw_usage: f64,
    pub effective_usage: f64,
    pub fairshare: f64,
}

/// `GET /shares`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareList {
    pub shares: Vec<ShareView>,
}

/// One run of a job, from the durable accounting (`sacct`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageView {
    pub job: JobId,
    pub run: u32,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub submit_time: u64,
    pub start_time: Option<u64>,
    pub end_time: u64,
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub gpus: f64,
    pub cpus: u64,
    pub nodes: String,
    /// GPU-seconds of the run.
    pub gpu_seconds: f64,
    /// For a task of a job array: the array's id and the task's index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayIndex>,
    /// The job's time limit in seconds; 0: none.
    #[serde(default)]
    pub time_limit: u64,
}

/// `GET /usage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageList {
    pub runs: Vec<UsageView>,
}

/// The multifactor priority of one pending job (`sprio`): each factor in [0, 1], as the
/// scheduler computed it now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PriorityView {
    pub id: JobId,
    pub user: String,
    pub partition: String,
    pub priority: u64,
    pub age: f64,
    pub fairshare: f64,
    pub job_size: f64,
    /// The partition's factor (its priority job factor over the highest one).
    pub partition_factor: f64,
    pub qos: f64,
    /// cadre's expansion factor (how long the job waited against its time limit).
    #[serde(default)]
    pub expansion: f64,
    pub nice: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayIndex>,
}

/// The configured weights of the priority factors (`sprio -w`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PriorityWeightsView {
    pub age: u32,
    pub fairshare: u32,
    pub job_size: u32,
    pub partition: u32,
    pub qos: u32,
    #[serde(default)]
    pub expansion: u32,
}

/// `GET /priorities`: the weights, and every pending job's factors in id order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PriorityList {
    pub weights: PriorityWeightsView,
    pub jobs: Vec<PriorityView>,
}

/// `POST /tokens` (administrators).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub user: String,
    #[serde(default)]
    pub admin: bool,
}

/// `POST /nodes/join-tokens`: a one-time token a node enrols with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinTokenRequest {
    /// The one node it enrols (a node of the cluster); any node if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Seconds it stays valid (default one hour, at most 30 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
}

/// A join token: the secret is in this answer only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinTokenView {
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Seconds since the Unix epoch.
    pub expires_at: u64,
}

/// `GET /status`: what this controller is, for `cadre status` (no authentication: it says
/// nothing about jobs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ControllerStatus {
    /// `single` (not replicated), `leader` or `standby`.
    pub role: String,
    /// cadre's version.
    pub version: String,
    /// This replica's name (`host:pid`), when replicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// The leader as the lease says (this replica when it leads), when one holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderStatus>,
}

/// The leader of replicated controllers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaderStatus {
    pub name: String,
    pub address: String,
    pub epoch: u64,
    /// Since when it leads, in seconds since the Unix epoch.
    pub since: u64,
}

/// The header of a request whose retries are one request (`POST /jobs`: a submission sent
/// again after a failover is committed once); at most [`MAX_IDEMPOTENCY_KEY`] of
/// `[A-Za-z0-9._:-]`.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const MAX_IDEMPOTENCY_KEY: usize = 128;

/// `POST /nodes/enrol`: a node's certificate request, with its join token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EnrolRequest {
    pub token: String,
    /// The node's name; empty (or absent): the one its join token was made for, else
    /// `host_node`.
    #[serde(default)]
    pub node: String,
    /// The machine's host name, the node's name when neither `node` nor the join token
    /// gives one (sent only with an empty `node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_node: Option<String>,
    /// A PKCS #10 certificate request in PEM, made on the node (its key stays there).
    pub csr_pem: String,
}

/// The node's certificate, and the cluster's CA to trust from now on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrolResponse {
    pub node: String,
    pub cert_pem: String,
    pub ca_pem: String,
    /// Seconds since the Unix epoch.
    pub expires_at: u64,
}

/// `POST /nodes/{name}/revoke`: how many live certificates of the node were revoked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokeResponse {
    pub node: String,
    pub revoked: u64,
}

/// A token as listed; the secret itself is shown once, at creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenView {
    pub id: u64,
    pub user: String,
    pub admin: bool,
    pub created: u64,
    pub revoked: Option<u64>,
    /// Only in the answer to `POST /tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// `GET /tokens`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
}

/// `GET /whoami`: who the controller takes the caller for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    pub user: String,
    pub admin: bool,
    /// How the caller was identified: `peer-credentials`, `token`, `job-token` or
    /// `session` (the dashboard's cookie).
    pub via: String,
}

/// `POST /ui/links`: a one-time login link to the dashboard for the caller (`cadre ui`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UiLinkView {
    /// The link's path and query on the controller's TCP listener
    /// (`/ui/login?once=...`): good for one login, until `expires`.
    pub path: String,
    /// When the link stops working (seconds since the epoch).
    pub expires: u64,
    /// The TCP address the controller serves the dashboard on (`--listen`), if any.
    pub listen: Option<String>,
    /// Whether that address serves TLS (the link is `https://`).
    #[serde(default)]
    pub tls: bool,
}

/// Stable error codes. Each maps to one HTTP status.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the request is malformed or a value is invalid.
    InvalidRequest,
    /// 401: no valid credentials.
    Unauthenticated,
    /// 403: the caller may not do this.
    Forbidden,
    /// 404: no such job, node, partition or token.
    NotFound,
    /// 409: the object is not in a state that allows this (cancel a finished job).
    Conflict,
    /// 503: the controller is shutting down or its store failed.
    Unavailable,
    /// 500: a bug; the message says what failed.
    Internal,
}

impl ErrorCode {
    /// The HTTP status of the code: the one place they are mapped.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
        }
    }
}

/// An error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// What went wrong, for programs: clients decide on this, never on the message.
    pub reason: ErrorReason,
    /// The one name or value the reason is about, where there is one (the partition of
    /// `unknown_partition`, the job of `dependency_not_found`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// What went wrong, for people.
    pub message: String,
}

/// Stable, machine-readable reasons of errors: finer than [`ErrorCode`], each with one
/// code (and so one HTTP status). The general ones (named as their codes) are for errors
/// no client tells apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorReason {
    /// 400, no finer reason.
    InvalidRequest,
    /// 400: the body is not the request's JSON.
    InvalidBody,
    /// 400: a job's spec is wrong (counts, sizes, times, fields that contradict each other).
    InvalidJobSpec,
    /// 400: a number is beyond what it may be (the message names the field and the bound).
    OutOfRange,
    /// 400: the partition named does not exist (`subject`: its name).
    UnknownPartition,
    /// 400: no partition named, and the cluster has no default one.
    NoDefaultPartition,
    /// 400: the QOS named does not exist (`subject`).
    UnknownQos,
    /// 400: the priority class named does not exist (`subject`).
    UnknownPriorityClass,
    /// 400: the queue named does not exist (`subject`); a Kubernetes workload waits for
    /// its queue instead.
    UnknownQueue,
    /// 400: a dependency names a job that does not exist (`subject`: its id).
    DependencyNotFound,
    /// 400: the user may not charge the account named.
    NoAssociation,
    /// 400: the cluster or its policy cannot take the request.
    PolicyRefused,
    /// 400: the node named is not in the cluster (`subject`: its name).
    UnknownNode,
    /// 401.
    Unauthenticated,
    /// 403, no finer reason.
    Forbidden,
    /// 403: a field the caller may not set to that value (a negative `nice`, a raised time
    /// limit, by a user who is not an administrator).
    ForbiddenField,
    /// 403: the join token does not enrol the node (unknown, used, expired, or another
    /// node's; `subject`: the node).
    JoinRefused,
    /// 403: the request carries a secret, and came over plain TCP: it must come over TLS
    /// or the Unix socket.
    TlsRequired,
    /// 404, no finer reason.
    NotFound,
    /// 409: the object is not in a state that allows this.
    Conflict,
    /// 503: the controller is stopping or its store failed.
    Unavailable,
    /// 503: this controller is a standby of replicated controllers (`subject`: the
    /// leader's address, when one leads).
    NotLeader,
    /// 500: a bug.
    Internal,
}

impl ErrorReason {
    /// The reason's code: the one place they are mapped.
    pub fn code(self) -> ErrorCode {
        use ErrorReason::*;
        match self {
            InvalidRequest | InvalidBody | InvalidJobSpec | OutOfRange | UnknownPartition
            | NoDefaultPartition | UnknownQos | UnknownPriorityClass | UnknownQueue
            | DependencyNotFound | NoAssociation | PolicyRefused | UnknownNode => {
                ErrorCode::InvalidRequest
            }
            Unauthenticated => ErrorCode::Unauthenticated,
            Forbidden | ForbiddenField | JoinRefused | TlsRequired => ErrorCode::Forbidden,
            NotFound => ErrorCode::NotFound,
            Conflict => ErrorCode::Conflict,
            Unavailable | NotLeader => ErrorCode::Unavailable,
            Internal => ErrorCode::Internal,
        }
    }

    /// The general reason of a code (for errors no client tells apart).
    pub fn of_code(code: ErrorCode) -> ErrorReason {
        match code {
            ErrorCode::InvalidRequest => ErrorReason::InvalidRequest,
            ErrorCode::Unauthenticated => ErrorReason::Unauthenticated,
            ErrorCode::Forbidden => ErrorReason::Forbidden,
            ErrorCode::NotFound => ErrorReason::NotFound,
            ErrorCode::Conflict => ErrorReason::Conflict,
            ErrorCode::Unavailable => ErrorReason::Unavailable,
            ErrorCode::Internal => ErrorReason::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_step_hostname;

    #[test]
    fn a_step_s_host_name_is_a_plain_name_of_at_most_63_characters() {
        for ok in ["pi-worker-0", "a", "pod.svc", &"a".repeat(63)] {
            assert!(is_step_hostname(ok), "{ok}");
        }
        for bad in ["", "a b", "a/b", "x\n1.2.3.4 evil", "é", &"a".repeat(64)] {
            assert!(!is_step_hostname(bad), "{bad:?}");
        }
    }
}
