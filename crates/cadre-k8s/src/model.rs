//! What a workload manifest becomes: [`Translated`], a cadre [`JobSpec`] (the gang) plus
//! what the job's tasks run and the contract they expect (names, environment, files).
//!
//! Everything here is plain data computed once at submission; what depends on where the
//! tasks land (addresses, per-rank variables, host files) is computed from it by the pure
//! functions of [`crate::contract`] when the gang is placed.

use cadre_core::job::JobSpec;
use cadre_core::run::{Export, RunSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the caller knows that a manifest does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranslateOptions {
    /// The submitting user, who the tasks run as (a manifest's `runAsUser` never changes it).
    pub user: String,
    /// The account charged.
    pub account: String,
    /// Where tasks start when the container names no `workingDir`: the directory
    /// `cadre apply` ran in, as `sbatch` uses its submission directory. Absolute.
    pub submit_dir: PathBuf,
    /// Whether the workload's containers run in their images, in the container runtime of
    /// the nodes that have one (the job then requires [`CONTAINER_RUNTIME_FEATURE`]).
    /// Without, a container's program runs on the host (its image is recorded, not used),
    /// so a container that gives no `command` (it would run its image's entrypoint) is
    /// refused.
    pub container_runtime: bool,
    /// The namespace of objects that name none (kubectl's `default`).
    pub default_namespace: String,
    /// What follows `metadata.generateName` in the name of an object that gives no
    /// `metadata.name` (Kubernetes: five random letters and digits). Chosen by the caller
    /// (anew for each object), so that the translation stays a pure function; `None`: such
    /// an object is refused.
    pub generated_suffix: Option<String>,
    /// The submitting user's `PATH` (see [`Translated::host_path`]).
    pub path: Option<String>,
    /// The LimitRanges in force (those applied to the cluster and those of the same apply):
    /// each container of a workload in a range's namespace gets its defaults and is held to
    /// its bounds ([`crate::namespaces`]).
    pub limit_ranges: Vec<crate::namespaces::LimitRangeConfig>,
}

impl TranslateOptions {
    /// Options for `user` charging `account`, starting in `submit_dir`, without a container
    /// runtime, in namespace `default`.
    pub fn new(user: &str, account: &str, submit_dir: impl Into<PathBuf>) -> TranslateOptions {
        TranslateOptions {
            user: user.to_string(),
            account: account.to_string(),
            submit_dir: submit_dir.into(),
            container_runtime: false,
            default_namespace: "default".to_string(),
            generated_suffix: None,
            path: None,
            limit_ranges: Vec::new(),
        }
    }
}

/// The workload kinds, with what their contracts need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    /// `batch/v1` Job. Indexed: each task gets `JOB_COMPLETION_INDEX` and, when the pod
    /// template names a `subdomain`, the hostname `<job>-<index>` resolvable as
    /// `<job>-<index>.<subdomain>`.
    Job {
        indexed: bool,
        subdomain: Option<String>,
    },
    /// `jobset.x-k8s.io` JobSet: one task group per replicated Job; each child Job `j` of
    /// replicated Job `r` has `completions` pods; hostnames `<jobset>-<r>-<j>-<i>` under
    /// `subdomain` when DNS hostnames are enabled.
    JobSet {
        /// Per task group: the child Jobs' completions (tasks per child Job).
        completions: Vec<u32>,
        indexed: Vec<bool>,
        /// `None`: DNS hostnames disabled.
        subdomain: Option<String>,
    },
    /// `kubeflow.org/v2beta1` MPIJob: group 0 is the launcher, group 1 (if any) the workers.
    MpiJob {
        slots_per_worker: u32,
        implementation: MpiImplementation,
        run_launcher_as_worker: bool,
    },
    /// `kubeflow.org/v1` PyTorchJob: groups are `master` (if any) then `worker` (if any).
    PyTorchJob(Box<PyTorchContract>),
    /// `batch.volcano.sh/v1alpha1` Job: one group per task, in order.
    VolcanoJob {
        /// The `env` plugin: `VK_TASK_INDEX`, `VC_TASK_INDEX`.
        env_plugin: bool,
        /// The `svc` plugin: hostnames `<job>-<task>-<i>.<job>`, `/etc/volcano/<task>.host`,
        /// `VC_<TASK>_HOSTS`, `VC_<TASK>_NUM`.
        svc_plugin: bool,
        /// Per group: the pod template's own `hostname`/`subdomain`, which the svc plugin
        /// uses instead of its defaults.
        hostnames: Vec<Option<String>>,
        subdomains: Vec<Option<String>>,
    },
}

/// The MPI implementation of an MPIJob (its launcher's variables and hostfile format).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MpiImplementation {
    OpenMpi,
    Intel,
    Mpich,
}

/// What the Training Operator's PyTorchJob environment needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PyTorchContract {
    pub has_master: bool,
    /// Replicas of Master plus Worker, as written (WORLD_SIZE counts these).
    pub total_replicas: u32,
    pub worker_replicas: u32,
    /// `spec.nprocPerNode` as written (the operator defaults it to `auto`).
    pub nproc_per_node: String,
    /// The Master's `pytorchjob-port` (default 23456).
    pub master_port: u16,
    /// The Worker's `pytorchjob-port` (default 23456), the elastic rendezvous port's default.
    pub worker_port: u16,
    pub elastic: Option<ElasticContract>,
}

/// `elasticPolicy`, as the environment shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElasticContract {
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub rdzv_backend: String,
    pub rdzv_host: Option<String>,
    pub rdzv_port: Option<u16>,
    pub rdzv_id: Option<String>,
    pub rdzv_conf: Vec<(String, String)>,
    pub standalone: bool,
    pub max_restarts: Option<i32>,
    pub n_proc_per_node: Option<i32>,
}

/// The node feature of nodes whose agent has a container runtime: what a workload whose
/// containers run in their images requires.
pub const CONTAINER_RUNTIME_FEATURE: &str = "container-runtime";

/// How a task gets its program (with `$(VAR)` references still to expand per rank).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Program {
    /// On the host: `command` followed by `args`.
    Argv(Vec<String>),
    /// In a container of the group's image, as Kubernetes runs one: `command` replaces the
    /// image's entrypoint (and its default arguments), `args` replace the default
    /// arguments; with neither the image runs as built.
    Image {
        command: Option<Vec<String>>,
        args: Vec<String>,
    },
}

impl Program {
    /// The program as one line of words, for display: an image's program as
    /// `(image entrypoint)` and its arguments when the image's entrypoint runs.
    pub fn words(&self) -> Vec<String> {
        match self {
            Program::Argv(argv) => argv.clone(),
            Program::Image {
                command: Some(command),
                args,
            } => command.iter().chain(args).cloned().collect(),
            Program::Image {
                command: None,
                args,
            } => std::iter::once("(image entrypoint)".to_string())
                .chain(args.iter().cloned())
                .collect(),
        }
    }
}

/// When a group's image is fetched (`imagePullPolicy`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    /// Kubernetes' default: `Always` for an image tagged `latest` or untagged, else
    /// `IfNotPresent`.
    pub fn default_for(image: &str) -> PullPolicy {
        // The tag follows the last `:` after the last `/` (a registry's port is before it);
        // a digest pins the image.
        if image.contains('@') {
            return PullPolicy::IfNotPresent;
        }
        let last = image.rsplit('/').next().unwrap_or(image);
        match last.rsplit_once(':') {
            Some((_, "latest")) | None => PullPolicy::Always,
            Some(_) => PullPolicy::IfNotPresent,
        }
    }
}

/// Where an environment variable's value comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvSource {
    /// A literal `value` (may hold `$(VAR)` references, expanded per rank).
    Literal(String),
    /// `fieldRef: metadata.name`: the pod's name in the naming contract.
    PodName,
    /// `fieldRef: metadata.namespace`.
    Namespace,
    /// `fieldRef: status.podIP` / `status.podIPs`: the address of the task's node (tasks use
    /// the node's network).
    PodIp,
    /// `fieldRef: status.hostIP` / `status.hostIPs`: the node's address.
    HostIp,
    /// `fieldRef: spec.nodeName`: the node's name.
    NodeName,
    /// `fieldRef: metadata.annotations['batch.kubernetes.io/job-completion-index']` (and the
    /// label of the same name): the task's completion index.
    CompletionIndex,
    /// `configMapKeyRef`: a key of a ConfigMap of the apply (made a literal once the
    /// ConfigMaps are attached, [`crate::contract::attach_config`]).
    ConfigMapKey {
        name: String,
        key: String,
        #[serde(default)]
        optional: bool,
    },
    /// `secretKeyRef`: a key of a Secret of the apply, read from
    /// [`Translated::secrets`] when the task starts; never expanded in a command line.
    SecretKey {
        name: String,
        key: String,
        #[serde(default)]
        optional: bool,
    },
}

/// `envFrom`: every key of a ConfigMap or Secret as a variable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvFrom {
    pub secret: bool,
    pub name: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub optional: bool,
}

/// The data of the Secrets a workload uses, by name: each key's bytes, base64 as in a
/// manifest. Never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretData(pub BTreeMap<String, BTreeMap<String, String>>);

impl std::fmt::Debug for SecretData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.keys())
            .finish_non_exhaustive()
    }
}

impl SecretData {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Key `key` of Secret `name`, decoded.
    pub fn get(&self, name: &str, key: &str) -> Option<Vec<u8>> {
        use base64::Engine;
        let v = self.0.get(name)?.get(key)?;
        base64::engine::general_purpose::STANDARD.decode(v).ok()
    }
}

/// One environment variable of a container, in manifest order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub source: EnvSource,
}

/// A declared container port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Port {
    pub name: Option<String>,
    pub port: u16,
}

/// What the tasks of one group run: the parts of a pod template cadre uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupRun {
    /// The replica type or task as the manifest names it (`Launcher`, `Worker`, `Master`,
    /// a Volcano task's or JobSet replicated Job's name, `task` for a batch Job).
    pub replica_type: String,
    /// The container's name.
    pub container: String,
    /// The container's image: used with a container runtime, recorded otherwise.
    pub image: Option<String>,
    /// When the image is fetched, for a container that runs in it.
    #[serde(default)]
    pub pull_policy: Option<PullPolicy>,
    pub program: Program,
    pub env: Vec<EnvVar>,
    /// `workingDir`; `None`: [`TranslateOptions::submit_dir`].
    pub work_dir: Option<String>,
    pub ports: Vec<Port>,
    /// `hostAliases`: extra lines for the job's hosts file, `(address, names)`.
    pub host_aliases: Vec<(String, Vec<String>)>,
    /// `securityContext.capabilities.add` of a container that runs in its image, as
    /// [`capability`] names them (`IPC_LOCK`): given back to the container where the node
    /// allows them (every other one is dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// The labels of the group's pods: the template's, and those the kind's controller
    /// sets on every pod of the group (per-rank ones come from
    /// [`crate::contract::pod_labels`]). Empty in translations recorded before they were.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The volumes the container mounts (`emptyDir`), each a pod's own: one per task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// `envFrom`, in order (expanded into `env` once the objects are attached).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFrom>,
    /// The identity fields of the pod's and the container's `securityContext`, checked on
    /// the node against the submitting user ([`PodIdentity`]).
    #[serde(default, skip_serializing_if = "PodIdentity::is_empty")]
    pub identity: PodIdentity,
}

/// What a pod's `securityContext` (the container's over the pod's) says of who its task
/// is. A task is never more than the submitting user may be: `runAsGroup` becomes the
/// task's group only if the user is in that group on the node, `fsGroup` and
/// `supplementalGroups` must be groups of the user (who has them all already), and
/// `runAsNonRoot` refuses a job of root. `runAsUser` cannot make the user another: the
/// task runs as the submitting user whatever it says (it is recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodIdentity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub run_as_non_root: bool,
}

impl PodIdentity {
    pub fn is_empty(&self) -> bool {
        *self == PodIdentity::default()
    }
}

/// A volume a container mounts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// The pod's name for it.
    pub name: String,
    /// Where the container sees it (`mountPath`, absolute).
    pub path: String,
    pub kind: VolumeKind,
}

/// What a volume is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum VolumeKind {
    /// `emptyDir`: an empty directory of the task's own on the node's disk (in the run's
    /// directory), removed when the run ends.
    EmptyDir,
    /// `emptyDir` of `medium: Memory`: a private tmpfs of `size_bytes` (`sizeLimit`; `None`:
    /// the task's memory, else the kernel's default of half the node's), as `/dev/shm` is
    /// sized for NCCL.
    Memory { size_bytes: Option<u64> },
    /// A `configMap` volume: each key (or each of `items`, key to file name) a file.
    ConfigMap {
        name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        items: Vec<(String, String)>,
        #[serde(default)]
        optional: bool,
    },
    /// A `secret` volume: as a ConfigMap's, the files the job's user's alone.
    Secret {
        name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        items: Vec<(String, String)>,
        #[serde(default)]
        optional: bool,
    },
    /// A `persistentVolumeClaim` volume: the claim's directory (see [`crate::storage`]),
    /// which the controller names in the launch order; `read_only` from the volume's or the
    /// mount's `readOnly`.
    Claim {
        claim: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
    },
    /// A `hostPath` volume (an administrator's workloads only: the API refuses it of anyone
    /// else, and the controller names the paths it allows in the launch order): the node's
    /// `path`, checked as `kind` says.
    HostPath {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<HostPathKind>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
    },
}

/// What a `hostPath` volume's `type` asks of its path (none: a file or directory that
/// exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostPathKind {
    /// `Directory`: a directory that exists.
    Directory,
    /// `DirectoryOrCreate`: a directory, made (mode 0755, root's) if missing.
    DirectoryOrCreate,
    /// `File`: a file that exists.
    File,
}

impl GroupRun {
    /// A group that runs nothing yet: what a pod template's pieces fill in.
    pub fn empty() -> GroupRun {
        GroupRun {
            replica_type: String::new(),
            container: String::new(),
            image: None,
            pull_policy: None,
            program: Program::Argv(Vec::new()),
            env: Vec::new(),
            work_dir: None,
            ports: Vec::new(),
            host_aliases: Vec::new(),
            capabilities: Vec::new(),
            labels: std::collections::BTreeMap::new(),
            volumes: Vec::new(),
            env_from: Vec::new(),
            identity: PodIdentity::default(),
        }
    }
}

/// Linux's capabilities, by the names Kubernetes and container runtimes give them (without
/// `CAP_`), in the kernel's order.
pub const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capability `name` names (`IPC_LOCK`, `ipc_lock` or `CAP_IPC_LOCK`), as
/// [`CAPABILITIES`] spells it; `None` for anything else (`ALL` included: a capability is
/// granted by name).
pub fn capability(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    CAPABILITIES.iter().copied().find(|c| *c == bare)
}

/// When the job has succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Completion {
    /// When every task has exited 0 (batch Job, Volcano's default, JobSet's `All`).
    AllTasks,
    /// When every task of these groups has exited 0; the job's other tasks (MPI workers
    /// running `sshd`, parameter servers) are then stopped. MPIJob: the launcher; PyTorchJob
    /// with a Master: the master; Volcano `TaskCompleted -> CompleteJob`; JobSet's
    /// `successPolicy` targets.
    Groups(Vec<usize>),
}

/// Passwordless SSH between the job's tasks (MPI Operator's `<job>-ssh` Secret, Volcano's
/// `ssh` plugin): a key pair made for the job, visible to every task at `mount_path`
/// (`id_rsa`, `id_rsa.pub`, `authorized_keys`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshKeys {
    pub mount_path: String,
}

/// The queue a manifest names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueRef {
    /// The `kueue.x-k8s.io/queue-name` label: a LocalQueue of the job's namespace, which
    /// [`crate::queues::QueueSet::route`] maps to its ClusterQueue.
    Kueue {
        namespace: String,
        local_queue: String,
    },
    /// A queue named directly: Volcano's `spec.queue`, Kubeflow's
    /// `runPolicy.schedulingPolicy.queue`.
    Direct { queue: String },
}

/// A workload manifest as cadre runs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Translated {
    pub kind: WorkloadKind,
    /// `metadata.name`: the base of every name in the naming contract.
    pub name: String,
    pub namespace: String,
    /// The gang: one task group per replica type, in the manifest's rank order. `queue` is
    /// set for queues named directly; a Kueue LocalQueue is resolved through
    /// [`crate::queues::QueueSet::route`].
    pub spec: JobSpec,
    /// Parallel to `spec.groups`.
    pub groups: Vec<GroupRun>,
    pub queue: Option<QueueRef>,
    pub completion: Completion,
    pub ssh: Option<SshKeys>,
    /// Seconds between SIGTERM and SIGKILL (`terminationGracePeriodSeconds`, default 30).
    pub kill_wait_secs: u64,
    /// Where tasks start when their container names no `workingDir`; with containers, where
    /// their output files are (the container starts in `workingDir` or its image's).
    pub submit_dir: PathBuf,
    /// Whether the containers run in their images (in the nodes' container runtime), rather
    /// than their programs on the host.
    #[serde(default)]
    pub containers: bool,
    /// For programs on the host: the submitting user's `PATH` when they applied the
    /// manifest, where a program named without a directory (`torchrun` of a virtual
    /// environment) is looked up, as `sbatch` exports it. A `PATH` of the manifest's own
    /// comes over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// The Services of the workload's apply that select its pods
    /// ([`crate::contract::attach_services`]): their names are in the job's hosts file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<crate::service::Service>,
    /// The ConfigMaps of the apply that its pods' volumes use, by name: key to text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// The Secrets of the apply that its pods use (variables, volumes).
    #[serde(default, skip_serializing_if = "SecretData::is_empty")]
    pub secrets: SecretData,
}

impl Translated {
    /// The launch description of group `group`'s tasks, with what does not depend on the
    /// rank: the program as written (its `$(VAR)` references are expanded per rank by
    /// [`crate::contract::rank_program`]), the working directory, no exported submitter
    /// environment (a pod sees only what its manifest and its contract give it), output in
    /// `<name>-<job id>-<rank>.out` under the working directory, and the kill wait. A
    /// container's program is shown as its words ([`Program::words`]) in the submission
    /// directory. `None` for a group that does not exist.
    pub fn run_spec(&self, group: usize) -> Option<RunSpec> {
        let g = self.groups.get(group)?;
        let mut run = RunSpec::command(g.program.words(), self.host_dir(group)?);
        run.export = Export::None;
        run.stdout = Some(format!("{}-%j-%t.out", self.name));
        run.kill_wait_secs = self.kill_wait_secs;
        run.env = g
            .env
            .iter()
            .filter_map(|e| match &e.source {
                EnvSource::Literal(v) => Some((e.name.clone(), v.clone())),
                _ => None,
            })
            .collect();
        Some(run)
    }

    /// The directory on the node a task of group `group` runs in, where its relative output
    /// paths are: its working directory on the host, the submission directory for a
    /// container (whose `workingDir` is inside its image).
    pub fn host_dir(&self, group: usize) -> Option<PathBuf> {
        if self.containers {
            self.groups.get(group)?;
            return Some(self.submit_dir.clone());
        }
        self.work_dir(group)
    }

    /// Where group `group`'s tasks start (on the host; see [`Translated::host_dir`]).
    pub fn work_dir(&self, group: usize) -> Option<PathBuf> {
        let g = self.groups.get(group)?;
        Some(
            g.work_dir
                .as_ref()
                .map(PathBuf::from)
                .unwrap_or_else(|| self.submit_dir.clone()),
        )
    }

    /// The annotations recorded on the job spec (labels, ignored fields' values).
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.spec.annotations
    }
}
