//! cadre-k8s: Kubernetes manifests into cadre gangs, with the naming, environment and
//! hostfile contracts the workloads inside them rely on.
//!
//! What lives here: reading multi-document YAML into typed objects ([`document`]; Kubernetes'
//! own kinds through `k8s-openapi`, the custom resources through [`crd`]); translating a
//! workload into a [`cadre_core::job::JobSpec`] and what its tasks run ([`translate`],
//! [`model`]); the per-rank contracts computed once the gang is placed ([`contract`]); queue
//! objects into cadre's queues ([`queues`]); what a translated workload is submitted as, and
//! the versioned translation it carries for the agent ([`submission`]). What does not: talking to a Kubernetes API
//! server, submitting to the controller, launching tasks. Everything here is pure.
//!
//! # Kinds
//! | kind | becomes |
//! |---|---|
//! | `batch/v1` Job | one group `task` of `completions` tasks (`parallelism` must not be below it); Indexed: `JOB_COMPLETION_INDEX`, hostnames `<job>-<i>.<subdomain>` |
//! | `jobset.x-k8s.io/v1alpha2` JobSet | one group per replicated Job, `replicas x completions` tasks; child Jobs Indexed by default; hostnames `<jobset>-<rjob>-<j>-<i>.<subdomain>` |
//! | `kubeflow.org/v2beta1` MPIJob | groups `launcher` (1) and `worker` (replicas; one task per pod, `slotsPerWorker` in the hostfile); the job succeeds when the launcher does |
//! | `kubeflow.org/v1` PyTorchJob | groups `master` (1) and `worker`; `elasticPolicy.minReplicas` is the workers' elastic minimum; the job succeeds when the master does |
//! | `batch.volcano.sh/v1alpha1` Job | one group per task; `minAvailable` is the elastic minimum (see below); plugins `env`, `svc`, `ssh` |
//! | Kueue ResourceFlavor, ClusterQueue, LocalQueue, Topology; Volcano Queue | queues ([`queues`]) |
//! | `trainer.kubeflow.org/v1alpha1` ClusterTrainingRuntime | read, then refused: it only serves TrainJobs, which cadre does not run yet |
//!
//! Volcano's gang minimum: a task's `minAvailable` (default its replicas) is its group's
//! minimum; the job's `minAvailable` must equal the sum of the tasks' minimums, except for a
//! job of one task, whose minimum it is. (Volcano starts *any* `minAvailable` pods of any
//! task when it is below that sum; cadre keeps a minimum per group, so that is refused for
//! several tasks.)
//!
//! # Fields: used, recorded, or refused
//! A field cadre does not implement is refused with its path, never dropped. The rule: a
//! field is **used** when cadre does what it says; **accepted and ignored** only when it has
//! no meaning outside Kubernetes, or when cadre already behaves as it asks; **recorded, not
//! acted on** when the job runs correctly without it (hints, preferences, retries); refused
//! otherwise, including every field cadre does not know (through `serde_ignored`, for
//! Kubernetes' types as for the CRDs). Recorded values go to the job's annotations under
//! `k8s.` (`k8s.label/<key>`, `k8s.<group>.image`, `k8s.backoffLimit`, ...).
//!
//! Used: `metadata.name` (a DNS label, the base of every name), `namespace`, the
//! `kueue.x-k8s.io/queue-name` and `kueue.x-k8s.io/priority-class` labels, Kueue's
//! `podset-required-topology` annotation (`kubernetes.io/hostname`: the group on one node;
//! a `...rack` label: one leaf switch; a `...block` label: one NVLink block), container
//! `command`, `args`, `env` (literal values, `$(VAR)` references expanded as Kubernetes
//! does, `fieldRef` for `metadata.name`, `metadata.namespace`, `metadata.labels[...]`,
//! `status.podIP`/`hostIP` (the node's address), `spec.nodeName`, the completion index;
//! `resourceFieldRef` on the container's own CPU and memory), `workingDir`, `ports`,
//! `resources` (below), `nodeSelector`, required node affinity (one term of `In` with one
//! value each), required pod anti-affinity on `kubernetes.io/hostname` selecting the job's
//! own pods (one task per node), `priorityClassName`, `activeDeadlineSeconds` (the time
//! limit, the smallest given), `terminationGracePeriodSeconds` (the kill wait), `hostAliases`
//! (the job's hosts file), `suspend`/`runPolicy.suspend` (submitted held), Volcano's
//! `queue`, `priorityClassName`, task `topologyPolicy` (NUMA: `best-effort` preferred,
//! `restricted`/`single-numa-node` strict), `networkTopology` hard tier 1 (one leaf), the
//! `TaskCompleted -> CompleteJob` policy; Kubeflow's `runPolicy.schedulingPolicy.queue` and
//! `priorityClass`, `slotsPerWorker`, `mpiImplementation`, `runLauncherAsWorker`,
//! `sshAuthMountPath`, `elasticPolicy` (the environment), `nprocPerNode`; JobSet's
//! `network`, `successPolicy` (`All` with targets, `Any` of one task).
//!
//! Resources: a limit alone is also the request (Kubernetes' rule); cadre books the limit
//! where one is set, else the request. `cpu` in whole cores rounded up, at least 1 (`500m`
//! books a core: tasks are pinned to whole cores); `memory` in MiB rounded up; none given:
//! 1 core and no memory booked; `nvidia.com/gpu` whole GPUs; `nvidia.com/mig-<profile>` MIG
//! devices of that kind (`gpu_model = "mig-<profile>"`); `rdma/*` NICs; other
//! `domain/name` extended resources as named countable resources; `ephemeral-storage`
//! accepted and not booked.
//!
//! Accepted and ignored (no meaning outside Kubernetes, or already cadre's behaviour):
//! server-set metadata (`uid`, `resourceVersion`, `creationTimestamp`, `managedFields`,
//! `ownerReferences`, `finalizers`, `generation`), `status`, `imagePullPolicy`,
//! `imagePullSecrets`, `terminationMessagePath`/`Policy`, `resizePolicy`, `schedulerName`
//! (cadre is the scheduler), `dnsPolicy`, `enableServiceLinks`,
//! `automountServiceAccountToken`, `setHostnameAsFQDN`, `shareProcessNamespace`, `overhead`,
//! `hostNetwork`/`hostIPC`/`hostPID` (tasks use the node's), `hostPort`, tolerations
//! (permissions, and cadre's nodes have no taints; recorded), security contexts'
//! restrictions (seccomp, AppArmor, SELinux, capability drops: a task is an unprivileged
//! process of the submitting user; their identity fields are checked against that user on
//! the node, see [`PodIdentity`]), `ttlSecondsAfterFinished`, `cleanPodPolicy` (cadre always stops a finished
//! job's tasks; recorded), `runPolicy.schedulingPolicy.minResources` (cadre computes the
//! gang's total), Volcano `svc` plugin flags, `launcherCreationPolicy` (a gang starts at
//! once; the launcher's ssh retries), ResourceFlavor `tolerations`, ClusterQueue
//! `flavorFungibility` (one flavor).
//!
//! Recorded, not acted on: `backoffLimit`, replica `restartPolicy`, Volcano `maxRetry` and
//! restart policies, JobSet `failurePolicy.maxRestarts` (cadre does not restart a failed
//! gang: its first failed task fails the job), preferred node and pod (anti-)affinity,
//! Kueue's preferred and unconstrained topology annotations (cadre prefers compact
//! placements anyway), Volcano `networkTopology` soft mode, `elasticPolicy.metrics` and a
//! `maxReplicas` above `replicas` (cadre does not autoscale), `scheduleTimeoutSeconds`,
//! `runtimeClassName`, labels and annotations.
//!
//! Refused (each with its reason): volumes and volume mounts, `envFrom` and values from
//! ConfigMaps, Secrets or files, init, ephemeral and extra containers, probes, lifecycle
//! hooks, `stdin`/`tty`, privileged containers, added capabilities on the host (in images
//! they are carried, see [`GroupRun::capabilities`]; unknown names and `ALL` are refused),
//! service accounts,
//! `nodeName`, topology spread constraints, pod affinity, node affinity beyond one `In`
//! value, scheduling gates and groups, resource claims, pod-level resources, DNS config,
//! `priority` numbers, `preemptionPolicy: Never`, work-queue Jobs and `parallelism` below
//! `completions`, per-index Job policies, `generateName` where the caller generates no
//! suffix ([`TranslateOptions::generated_suffix`]), other controllers' `managedBy`,
//! ordered starts (`dependsOn`, `startupPolicy: InOrder`), Volcano `volumes`, partition
//! policies, other plugins and policies, `minSuccess` below the job's size, a container
//! without `command` when no container runtime is configured (its image's entrypoint cannot
//! be known), unknown scheduler labels and annotations (`kueue.x-k8s.io/...`,
//! `volcano.sh/...`, ...), and the queue features of [`queues`].
//!
//! # Contracts
//! See [`contract`]: names resolve to the node each rank runs on (a per-job hosts file);
//! the MPI Operator's hostfile and variables; the Training Operator's `MASTER_ADDR`,
//! `MASTER_PORT`, `WORLD_SIZE`, `RANK` and `PET_*`; Volcano's `VC_*`/`VK_*` and host files;
//! `JOB_COMPLETION_INDEX`.
//!
//! [`translate`]: mod@translate
//! [`submission`]: mod@submission

pub mod config;
pub mod contract;
pub mod crd;
pub mod document;
pub mod error;
pub mod model;
mod names;
pub mod namespaces;
pub mod nesting;
mod pod;
pub mod quantity;
pub mod queues;
pub mod service;
pub mod storage;
pub mod submission;
pub mod translate;

pub use contract::{
    JobFile, PlacedTask, Placement, RSH_AGENT, Selector, discover_hosts, dns_names, holds_for_rsh,
    hostfile, hosts_file, job_files, pod_hostname, pod_labels, pod_name, rank_environment,
    rank_program, task_of_rank,
};
pub use document::{Object, documents_json, parse_documents, parse_numbered};
pub use error::{K8sError, Problem, SUPPORTED_KINDS};
pub use model::{
    CAPABILITIES, CONTAINER_RUNTIME_FEATURE, Completion, EnvSource, EnvVar, GroupRun, HostPathKind,
    MpiImplementation, PodIdentity, Program, PullPolicy, QueueRef, SshKeys, TranslateOptions,
    Translated, Volume, VolumeKind, WorkloadKind, capability,
};
pub use nesting::MAX_NESTING_DEPTH;
pub use pod::nested;
pub use queues::{QueueObjectName, QueueSet, queue_object_name};
pub use submission::{WORKLOAD_RUN_VERSION, WorkloadRun, submission, workload_of};
pub use translate::translate;

/// What a file of manifests amounts to.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The workloads, in file order, each with the Services of the file that select it.
    pub workloads: Vec<Translated>,
    /// The queue objects of the file, applied in order to an empty set.
    pub queues: QueueSet,
}

/// Adds the LimitRanges among `docs` to `opts`, in place of those of their names: a
/// file's ranges hold for all the workloads beside them, wherever they stand. A range with
/// a problem is left out here (it is refused where it stands).
pub fn add_limit_ranges(opts: &mut TranslateOptions, docs: &[(usize, Object)]) {
    let mut set = QueueSet {
        limit_ranges: std::mem::take(&mut opts.limit_ranges),
        ..QueueSet::default()
    };
    for (_, o) in docs {
        if matches!(o, Object::LimitRange(_)) {
            let _ = set.apply_in(o, &opts.default_namespace);
        }
    }
    opts.limit_ranges = set.limit_ranges;
}

/// Reads and translates every document of `text`: the workloads into gangs, the queue
/// objects into queues. The first error stops it, naming its document.
pub fn plan(text: &str, origin: &str, opts: &TranslateOptions) -> Result<Plan, K8sError> {
    let mut out = Plan::default();
    let mut services = Vec::new();
    let mut maps = Vec::new();
    let mut secrets = Vec::new();
    let docs = document::parse_numbered(text, origin)?;
    let mut opts = opts.clone();
    add_limit_ranges(&mut opts, &docs);
    let opts = &opts;
    for (doc, object) in docs {
        let in_doc = |source: K8sError| K8sError::InDocument {
            origin: origin.to_string(),
            doc,
            source: Box::new(source),
        };
        match &object {
            Object::ResourceFlavor(_)
            | Object::ClusterQueue(_)
            | Object::LocalQueue(_)
            | Object::Topology(_)
            | Object::VolcanoQueue(_)
            | Object::PriorityClass(_)
            | Object::Namespace(_)
            | Object::ResourceQuota(_)
            | Object::LimitRange(_) => out
                .queues
                .apply_in(&object, &opts.default_namespace)
                .map_err(in_doc)?,
            Object::Service(s) => {
                services.push(service::read_service(s, &opts.default_namespace).map_err(in_doc)?)
            }
            Object::ConfigMap(c) => {
                maps.push(config::read_config_map(c, &opts.default_namespace).map_err(in_doc)?)
            }
            Object::Secret(s) => {
                secrets.push(config::read_secret(s, &opts.default_namespace).map_err(in_doc)?)
            }
            _ => out
                .workloads
                .push(translate(&object, opts).map_err(in_doc)?),
        }
    }
    if let Some(s) = contract::attach_services(&mut out.workloads, services).first() {
        return Err(K8sError::Contract {
            what: service::selects_nothing(s),
        });
    }
    if let Some(p) = contract::attach_config(&mut out.workloads, &maps, &secrets).first() {
        return Err(K8sError::Contract { what: p.clone() });
    }
    Ok(out)
}
