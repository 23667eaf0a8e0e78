//! One pod template into the pieces of a task group: what each task runs (program,
//! environment, working directory, ports), what it asks for (CPU, memory, GPUs, NICs,
//! named resources), where it may run (node selectors, one task per node, topology), and
//! what is recorded. Every field of `PodSpec` and `Container` is handled here by an
//! exhaustive destructuring, so that a field added to Kubernetes' API fails the build until
//! it is decided: used, accepted and ignored (documented in the crate doc), or refused.

use crate::error::Refusals;
use crate::model::{
    EnvFrom, EnvSource, EnvVar, GroupRun, HostPathKind, PodIdentity, Port, Program, PullPolicy,
    TranslateOptions, Volume, VolumeKind,
};
use crate::quantity::Quantity;
use cadre_core::resources::TaskResources;
use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeSelectorRequirement, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// The annotation keys of Kueue's topology-aware scheduling on pod templates.
pub(crate) const TAS_REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
pub(crate) const TAS_PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";
pub(crate) const TAS_UNCONSTRAINED: &str = "kueue.x-k8s.io/podset-unconstrained-topology";
/// Kueue's queue label on a job.
pub(crate) const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's WorkloadPriorityClass label on a job.
pub(crate) const PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// The completion index as Indexed Jobs annotate and label their pods.
pub(crate) const COMPLETION_INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";
pub(crate) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Label and annotation prefixes of the schedulers cadre stands in for: a key under one of
/// them states scheduling intent, so it is either understood or refused, never recorded as
/// mere metadata.
const SCHEDULER_PREFIXES: &[&str] = &[
    "kueue.x-k8s.io/",
    "scheduling.k8s.io/",
    "scheduling.x-k8s.io/",
    "scheduling.volcano.sh/",
    "volcano.sh/",
    "kai.scheduler/",
    "scheduling.run.ai/",
    "yunikorn.apache.org/",
    "armadaproject.io/",
    "slurmjob.slinky.slurm.net/",
];

fn set_vec<T>(v: &Option<Vec<T>>) -> bool {
    v.as_ref().is_some_and(|v| !v.is_empty())
}

pub(crate) fn is_scheduler_key(key: &str) -> bool {
    SCHEDULER_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// How far apart the tasks of a job may be, as a topology annotation asks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SpanReq {
    /// All within one NVLink block (a `...block` level).
    Block,
    /// All under one leaf switch (a `...rack` level).
    Leaf,
    /// All on one node (`kubernetes.io/hostname`).
    Node,
}

/// Maps a Kueue topology level (a node label) onto cadre's topology.
pub(crate) fn span_of_level(label: &str) -> Option<SpanReq> {
    if label == HOSTNAME_LABEL {
        return Some(SpanReq::Node);
    }
    let last = label
        .rsplit('/')
        .next()
        .unwrap_or(label)
        .to_ascii_lowercase();
    if last.contains("rack") {
        Some(SpanReq::Leaf)
    } else if last.contains("block") {
        Some(SpanReq::Block)
    } else {
        None
    }
}

/// How the kind treats this pod template.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct PodRole {
    /// An MPIJob worker: with neither `command` nor `args` it runs `/usr/sbin/sshd -De`,
    /// as the MPI Operator makes it.
    pub mpi_worker: bool,
    /// Its tasks have a completion index (Indexed Job, JobSet child Job).
    pub indexed: bool,
}

/// What one pod template gives its task group.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodPieces {
    pub run: Option<GroupRun>,
    pub resources: TaskResources,
    pub node_selector: Vec<(String, String)>,
    pub one_task_per_node: bool,
    pub span: Option<SpanReq>,
    pub priority_class: Option<String>,
    /// `activeDeadlineSeconds` of the pod.
    pub deadline_secs: Option<u64>,
    pub kill_wait_secs: Option<u64>,
    pub restart_policy: Option<String>,
    pub subdomain: Option<String>,
    pub hostname: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// The pod's volumes that cadre gives, by name.
    pub volumes: BTreeMap<String, VolumeKind>,
    /// The pod's `securityContext` identity fields (a container's own override them).
    pub identity: PodIdentity,
}

/// Reads pod template `t` found at `path` (`spec.mpiReplicaSpecs.Worker.template`), for
/// the group whose annotations are prefixed `k8s.<group>.`, whose pods the kind's
/// controller labels with `implicit_labels`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_pod_template(
    t: &PodTemplateSpec,
    path: &str,
    group: &str,
    role: PodRole,
    implicit_labels: &[(&str, &str)],
    opts: &TranslateOptions,
    refusals: &mut Refusals,
    notes: &mut BTreeMap<String, String>,
) -> PodPieces {
    let mut pieces = PodPieces::default();
    // The labels the kind's controller puts on the pods, which selectors (pod
    // anti-affinity) and `fieldRef`s may name.
    for (k, v) in implicit_labels {
        pieces.labels.insert(k.to_string(), v.to_string());
    }
    let meta_path = format!("{path}.metadata");
    if let Some(meta) = &t.metadata {
        read_template_metadata(meta, &meta_path, group, &mut pieces, refusals, notes);
    }
    let spec_path = format!("{path}.spec");
    let Some(spec) = &t.spec else {
        refusals.refuse(spec_path, "a pod template needs a spec with a container");
        return pieces;
    };
    read_pod_spec(
        spec,
        &spec_path,
        group,
        role,
        opts,
        &mut pieces,
        refusals,
        notes,
    );
    if let Some(run) = pieces.run.as_mut() {
        run.labels = pieces.labels.clone();
    }
    pieces
}

fn read_template_metadata(
    meta: &ObjectMeta,
    path: &str,
    group: &str,
    pieces: &mut PodPieces,
    refusals: &mut Refusals,
    notes: &mut BTreeMap<String, String>,
) {
    let ObjectMeta {
        annotations,
        labels,
        name,
        namespace,
        // Set by the cluster; ignored as `kubectl apply` ignores them.
        creation_timestamp: _,
        deletion_grace_period_seconds: _,
        deletion_timestamp: _,
        finalizers: _,
        generate_name: _,
        generation: _,
        managed_fields: _,
        owner_references: _,
        resource_version: _,
        self_link: _,
        uid: _,
    } = meta;
    if let Some(n) = name {
        // The template's name is not the pods' (the controller names them); recorded.
        notes.insert(format!("k8s.{group}.templateName"), n.clone());
    }
    if namespace.is_some() {
        refusals.refuse(
            format!("{path}.namespace"),
            "a pod template's namespace is the job's; remove it",
        );
    }
    for (k, v) in labels.iter().flatten() {
        if is_scheduler_key(k) {
            refusals.refuse(
                format!("{path}.labels[{k}]"),
                "this scheduler label is not supported on a pod template",
            );
        } else {
            notes.insert(format!("k8s.{group}.label/{k}"), v.clone());
            pieces.labels.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in annotations.iter().flatten() {
        let p = format!("{path}.annotations[{k}]");
        match k.as_str() {
            TAS_REQUIRED => match span_of_level(v) {
                Some(s) => pieces.span = Some(s),
                None => refusals.refuse(
                    p,
                    format!(
                        "topology level `{v}` has no counterpart in cadre's topology, whose \
                         levels are the node (`kubernetes.io/hostname`), the leaf switch (a \
                         `...rack` label) and the NVLink block (a `...block` label)"
                    ),
                ),
            },
            // A preference: cadre's placement already prefers the most compact placement.
            TAS_PREFERRED | TAS_UNCONSTRAINED => {
                notes.insert(format!("k8s.{group}.annotation/{k}"), v.clone());
            }
            _ if is_scheduler_key(k) => refusals.refuse(
                p,
                "this scheduler annotation is not supported (cadre reads Kueue's \
                 podset-required-topology, podset-preferred-topology and \
                 podset-unconstrained-topology)",
            ),
            _ => {
                notes.insert(format!("k8s.{group}.annotation/{k}"), v.clone());
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn read_pod_spec(
    spec: &PodSpec,
    path: &str,
    group: &str,
    role: PodRole,
    opts: &TranslateOptions,
    pieces: &mut PodPieces,
    refusals: &mut Refusals,
    notes: &mut BTreeMap<String, String>,
) {
    let PodSpec {
        active_deadline_seconds,
        affinity,
        automount_service_account_token: _,
        containers,
        dns_config,
        dns_policy: _,
        enable_service_links: _,
        ephemeral_containers,
        host_aliases,
        host_ipc,
        host_network,
        host_pid,
        host_users,
        hostname,
        hostname_override,
        image_pull_secrets: _,
        init_containers,
        node_name,
        node_selector,
        os,
        overhead: _,
        preemption_policy,
        priority,
        priority_class_name,
        readiness_gates,
        resource_claims,
        resources,
        restart_policy,
        runtime_class_name,
        scheduler_name: _,
        scheduling_gates,
        scheduling_group,
        security_context,
        service_account,
        service_account_name,
        set_hostname_as_fqdn: _,
        share_process_namespace: _,
        subdomain,
        termination_grace_period_seconds,
        tolerations,
        topology_spread_constraints,
        volumes,
    } = spec;
    let at = |field: &str| format!("{path}.{field}");

    if let Some(s) = active_deadline_seconds {
        match u64::try_from(*s) {
            Ok(s) if s > 0 => pieces.deadline_secs = Some(s),
            _ => refusals.refuse(at("activeDeadlineSeconds"), "must be a positive number"),
        }
    }
    if let Some(a) = affinity {
        read_affinity(a, &at("affinity"), pieces, refusals, notes, group);
    }
    if dns_config.is_some() {
        refusals.refuse(
            at("dnsConfig"),
            "DNS settings are not supported: the job's names are resolved through its hosts file",
        );
    }
    if set_vec(ephemeral_containers) {
        refusals.refuse(
            at("ephemeralContainers"),
            "ephemeral containers are not supported",
        );
    }
    for (i, a) in host_aliases.iter().flatten().enumerate() {
        let names = a.hostnames.clone().unwrap_or_default();
        if names.is_empty() {
            refusals.refuse(format!("{path}.hostAliases[{i}]"), "no hostnames");
        }
        pieces_aliases(pieces).push((a.ip.clone(), names));
    }
    for (field, set) in [
        ("hostIPC", host_ipc),
        ("hostNetwork", host_network),
        ("hostPID", host_pid),
    ] {
        if *set == Some(true) {
            // Tasks run in the node's namespaces already.
            notes.insert(format!("k8s.{group}.{field}"), "true".into());
        }
    }
    if *host_users == Some(false) {
        refusals.refuse(
            at("hostUsers"),
            "user namespaces are not supported: tasks run as the submitting user on the node",
        );
    }
    if let Some(h) = hostname {
        pieces.hostname = Some(h.clone());
    }
    if hostname_override.is_some() {
        refusals.refuse(at("hostnameOverride"), "not supported");
    }
    if set_vec(init_containers) {
        refusals.refuse(
            at("initContainers"),
            "init containers are not supported (a cadre task runs one program); run the \
             steps at the start of the container's command",
        );
    }
    if node_name.is_some() {
        refusals.refuse(
            at("nodeName"),
            "binding a pod to a node by name bypasses the scheduler; use a nodeSelector on \
             `kubernetes.io/hostname`",
        );
    }
    for (k, v) in node_selector.iter().flatten() {
        pieces.node_selector.push((k.clone(), v.clone()));
    }
    if let Some(o) = os
        && o.name != "linux"
    {
        refusals.refuse(
            at("os.name"),
            format!("`{}`: cadre runs Linux tasks", o.name),
        );
    }
    match preemption_policy.as_deref() {
        None | Some("PreemptLowerPriority") => {}
        Some(other) => refusals.refuse(
            at("preemptionPolicy"),
            format!(
                "`{other}` is not supported: whether a job may preempt is its priority class's"
            ),
        ),
    }
    if priority.is_some() {
        refusals.refuse(
            at("priority"),
            "a numeric priority is set by the cluster from priorityClassName; give the class",
        );
    }
    if let Some(pc) = priority_class_name {
        pieces.priority_class = Some(pc.clone());
    }
    if set_vec(readiness_gates) {
        refusals.refuse(at("readinessGates"), "readiness gates are not supported");
    }
    if set_vec(resource_claims) {
        refusals.refuse(
            at("resourceClaims"),
            "dynamic resource allocation (DRA) claims are not supported; ask for devices in \
             the container's resources",
        );
    }
    if resources.is_some() {
        refusals.refuse(
            at("resources"),
            "pod-level resources are not supported; give them on the container",
        );
    }
    match restart_policy.as_deref() {
        None | Some("Never" | "OnFailure") => pieces.restart_policy = restart_policy.clone(),
        Some(other) => refusals.refuse(
            at("restartPolicy"),
            format!("`{other}`: a job's tasks end, so only Never and OnFailure apply"),
        ),
    }
    if let Some(rc) = runtime_class_name {
        notes.insert(format!("k8s.{group}.runtimeClassName"), rc.clone());
    }
    if set_vec(scheduling_gates) {
        refusals.refuse(
            at("schedulingGates"),
            "scheduling gates are not supported; submit the job held instead (spec.suspend)",
        );
    }
    if scheduling_group.is_some() {
        refusals.refuse(
            at("schedulingGroup"),
            "pod groups are not needed: cadre makes the gang from the job itself",
        );
    }
    if let Some(sc) = security_context {
        if set_vec(&sc.sysctls) {
            refusals.refuse(
                at("securityContext.sysctls"),
                "kernel parameters cannot be set per task",
            );
        }
        if sc.windows_options.is_some() {
            refusals.refuse(
                at("securityContext.windowsOptions"),
                "cadre runs Linux tasks",
            );
        }
        // runAsUser, runAsGroup, fsGroup, supplementalGroups, runAsNonRoot: checked on the
        // node against the submitting user (`PodIdentity`); seccomp, AppArmor, SELinux: a
        // task is an unprivileged process of that user.
        let field = |f: &str| at(&format!("securityContext.{f}"));
        let id = &mut pieces.identity;
        id.run_as_user = sc
            .run_as_user
            .and_then(|v| id_of(v, &field("runAsUser"), refusals));
        id.run_as_group = sc
            .run_as_group
            .and_then(|v| id_of(v, &field("runAsGroup"), refusals));
        id.fs_group = sc
            .fs_group
            .and_then(|v| id_of(v, &field("fsGroup"), refusals));
        for (i, g) in sc.supplemental_groups.iter().flatten().enumerate() {
            if let Some(g) = id_of(*g, &field(&format!("supplementalGroups[{i}]")), refusals) {
                id.supplemental_groups.push(g);
            }
        }
        id.run_as_non_root = sc.run_as_non_root == Some(true);
        if let Some(u) = sc.run_as_user {
            notes.insert(format!("k8s.{group}.runAsUser"), u.to_string());
        }
    }
    for (field, v) in [
        ("serviceAccountName", service_account_name),
        ("serviceAccount", service_account),
    ] {
        if let Some(sa) = v
            && sa != "default"
        {
            refusals.refuse(
                at(field),
                format!("`{sa}`: there is no Kubernetes API for a service account to use"),
            );
        }
    }
    if let Some(s) = subdomain {
        pieces.subdomain = Some(s.clone());
    }
    if let Some(g) = termination_grace_period_seconds {
        match u64::try_from(*g) {
            Ok(g) => pieces.kill_wait_secs = Some(g),
            Err(_) => refusals.refuse(at("terminationGracePeriodSeconds"), "must not be negative"),
        }
    }
    let tol: Vec<String> = tolerations
        .iter()
        .flatten()
        .map(|t| {
            format!(
                "{}{}{}{}",
                t.key.as_deref().unwrap_or("*"),
                match t.operator.as_deref() {
                    Some("Exists") => String::from(" exists"),
                    _ => format!("={}", t.value.as_deref().unwrap_or("")),
                },
                t.effect
                    .as_deref()
                    .map(|e| format!(":{e}"))
                    .unwrap_or_default(),
                t.toleration_seconds
                    .map(|s| format!(" for {s}s"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if !tol.is_empty() {
        // Tolerations permit, never require; cadre's nodes carry no taints to tolerate.
        notes.insert(format!("k8s.{group}.tolerations"), tol.join("; "));
    }
    if set_vec(topology_spread_constraints) {
        refusals.refuse(
            at("topologySpreadConstraints"),
            "topology spread constraints are not supported; use podAntiAffinity on \
             kubernetes.io/hostname for one task per node, or Kueue's topology annotations",
        );
    }
    for (i, v) in volumes.iter().flatten().enumerate() {
        let vpath = format!("{path}.volumes[{i}]");
        match read_volume(v, &vpath, refusals) {
            Some(kind) => {
                pieces.volumes.insert(v.name.clone(), kind);
            }
            None => continue,
        }
    }

    match containers.as_slice() {
        [] => refusals.refuse(at("containers"), "a pod needs a container"),
        [c] => {
            let cpath = format!("{path}.containers[0]");
            pieces.resources = read_resources(c.resources.as_ref(), &cpath, refusals);
            pieces.run = Some(read_container(
                c, &cpath, group, role, opts, pieces, refusals, notes,
            ));
        }
        [_, rest @ ..] => {
            for (i, c) in rest.iter().enumerate() {
                refusals.refuse(
                    format!("{path}.containers[{}]", i + 1),
                    format!(
                        "container `{}`: a pod of several containers is not supported (a \
                         cadre task runs one program)",
                        c.name
                    ),
                );
            }
        }
    }
}

/// A pod's volume: an `emptyDir` (on disk, or `medium: Memory` with its `sizeLimit`);
/// any other source is refused by name.
fn read_volume(
    v: &k8s_openapi::api::core::v1::Volume,
    path: &str,
    refusals: &mut Refusals,
) -> Option<VolumeKind> {
    let items = |list: &Option<Vec<k8s_openapi::api::core::v1::KeyToPath>>,
                 at: &str,
                 refusals: &mut Refusals|
     -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, it) in list.iter().flatten().enumerate() {
            if it.path.is_empty() || it.path.contains('/') || it.path == ".." || it.path == "." {
                refusals.refuse(
                    format!("{path}.{at}.items[{i}].path"),
                    format!(
                        "`{}`: a file name of its own (no directories) is supported",
                        it.path
                    ),
                );
                continue;
            }
            out.push((it.key.clone(), it.path.clone()));
        }
        out
    };
    if let Some(cm) = &v.config_map {
        return Some(VolumeKind::ConfigMap {
            name: cm.name.clone(),
            items: items(&cm.items, "configMap", refusals),
            optional: cm.optional == Some(true),
        });
    }
    if let Some(s) = &v.secret {
        let Some(name) = s.secret_name.clone().filter(|n| !n.is_empty()) else {
            refusals.refuse(format!("{path}.secret.secretName"), "missing");
            return None;
        };
        return Some(VolumeKind::Secret {
            name,
            items: items(&s.items, "secret", refusals),
            optional: s.optional == Some(true),
        });
    }
    if let Some(c) = &v.persistent_volume_claim {
        if !crate::names::is_dns_subdomain(&c.claim_name) {
            refusals.refuse(
                format!("{path}.persistentVolumeClaim.claimName"),
                format!("`{}`: a claim's name (an RFC 1123 subdomain)", c.claim_name),
            );
            return None;
        }
        return Some(VolumeKind::Claim {
            claim: c.claim_name.clone(),
            read_only: c.read_only == Some(true),
        });
    }
    if let Some(h) = &v.host_path {
        return read_host_path(h, &format!("{path}.hostPath"), refusals);
    }
    let Some(e) = &v.empty_dir else {
        let source = [
            (v.nfs.is_some(), "nfs"),
            (v.projected.is_some(), "projected"),
            (v.downward_api.is_some(), "downwardAPI"),
            (v.csi.is_some(), "csi"),
            (v.ephemeral.is_some(), "ephemeral"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
        .unwrap_or("this source");
        refusals.refuse(
            path,
            format!(
                "volume `{}`: {source} volumes are not supported yet (emptyDir, configMap, \
                 secret, persistentVolumeClaim and hostPath are; tasks see the node's file systems, so a shared path that exists \
                 on the nodes needs no volume)",
                v.name
            ),
        );
        return None;
    };
    let size_bytes = match &e.size_limit {
        None => None,
        Some(q) => match Quantity::parse(&q.0) {
            Ok(q) => match u64::try_from(q.ceil()) {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    refusals.refuse(
                        format!("{path}.emptyDir.sizeLimit"),
                        format!("`{}` is not a size cadre can give", q_text(&q)),
                    );
                    return None;
                }
            },
            Err(err) => {
                refusals.refuse(
                    format!("{path}.emptyDir.sizeLimit"),
                    format!("`{}`: {}", err.text, err.why),
                );
                return None;
            }
        },
    };
    match e.medium.as_deref().unwrap_or("") {
        "" => Some(VolumeKind::EmptyDir),
        "Memory" => Some(VolumeKind::Memory { size_bytes }),
        other => {
            refusals.refuse(
                format!("{path}.emptyDir.medium"),
                format!("`{other}` is not supported (\"\" for the node's disk, or Memory)"),
            );
            None
        }
    }
}

/// Whether mount paths `a` and `b` are one inside the other (or the same), by components.
pub fn nested(a: &str, b: &str) -> bool {
    let (a, b) = (std::path::Path::new(a), std::path::Path::new(b));
    a.starts_with(b) || b.starts_with(a)
}

/// A `hostPath` volume: its path (absolute, of the words a container runtime's options can
/// carry) and its type; devices and sockets are refused by type. Whether the workload may
/// have it at all is the controller's to say (an administrator's only).
fn read_host_path(
    h: &k8s_openapi::api::core::v1::HostPathVolumeSource,
    path: &str,
    refusals: &mut Refusals,
) -> Option<VolumeKind> {
    let p = h.path.trim_end_matches('/');
    let words = p
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'));
    if !p.starts_with('/') || p.split('/').any(|c| c == ".." || c == ".") || !words {
        refusals.refuse(
            format!("{path}.path"),
            format!(
                "`{}`: an absolute path of letters, digits, `/`, `.`, `_` and `-`, without `.` \
                 or `..` components, and not `/`",
                h.path
            ),
        );
        return None;
    }
    let kind = match h.type_.as_deref().unwrap_or("") {
        "" => None,
        "Directory" => Some(HostPathKind::Directory),
        "DirectoryOrCreate" => Some(HostPathKind::DirectoryOrCreate),
        "File" => Some(HostPathKind::File),
        other => {
            refusals.refuse(
                format!("{path}.type"),
                format!(
                    "`{other}` is not supported (none, Directory, DirectoryOrCreate and File \
                     are; a task sees the node's devices and sockets where they are)"
                ),
            );
            return None;
        }
    };
    Some(VolumeKind::HostPath {
        path: p.to_string(),
        kind,
        read_only: false,
    })
}

fn q_text(q: &Quantity) -> String {
    q.ceil().to_string()
}

fn pieces_aliases(pieces: &mut PodPieces) -> &mut Vec<(String, Vec<String>)> {
    // Aliases live on the run, which is made once the container is read; keep them on a
    // placeholder run until then.
    &mut pieces.run.get_or_insert_with(GroupRun::empty).host_aliases
}

fn read_affinity(
    a: &Affinity,
    path: &str,
    pieces: &mut PodPieces,
    refusals: &mut Refusals,
    notes: &mut BTreeMap<String, String>,
    group: &str,
) {
    let Affinity {
        node_affinity,
        pod_affinity,
        pod_anti_affinity,
    } = a;
    if let Some(na) = node_affinity {
        if let Some(required) = &na.required_during_scheduling_ignored_during_execution {
            let rpath = format!(
                "{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
            );
            match required.node_selector_terms.as_slice() {
                [term] => {
                    let tpath = format!("{rpath}[0]");
                    if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
                        refusals.refuse(
                            format!("{tpath}.matchFields"),
                            "matchFields is not supported",
                        );
                    }
                    for (i, e) in term.match_expressions.iter().flatten().enumerate() {
                        read_node_requirement(
                            e,
                            &format!("{tpath}.matchExpressions[{i}]"),
                            pieces,
                            refusals,
                        );
                    }
                }
                [] => {}
                _ => refusals.refuse(
                    rpath,
                    "several node selector terms (any of them) are not supported; cadre's node \
                     selector is one set of labels all nodes carry",
                ),
            }
        }
        if na
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .is_some_and(|p| !p.is_empty())
        {
            // A preference: the placement is correct without it.
            notes.insert(
                format!("k8s.{group}.preferredNodeAffinity"),
                "recorded, not used".into(),
            );
        }
    }
    if pod_affinity.is_some() {
        refusals.refuse(
            format!("{path}.podAffinity"),
            "pod affinity is not supported (cadre places a job's tasks together by its topology \
             requirement)",
        );
    }
    if let Some(anti) = pod_anti_affinity {
        let rpath =
            format!("{path}.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution");
        for (i, term) in anti
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let tpath = format!("{rpath}[{i}]");
            if term.topology_key != HOSTNAME_LABEL {
                refusals.refuse(
                    format!("{tpath}.topologyKey"),
                    format!(
                        "`{}`: pod anti-affinity is supported on `kubernetes.io/hostname` only \
                         (one task per node)",
                        term.topology_key
                    ),
                );
                continue;
            }
            // It must select the job's own pods: its labels must be among the template's.
            let own = term.label_selector.as_ref().is_some_and(|s| {
                s.match_expressions.as_ref().is_none_or(Vec::is_empty)
                    && s.match_labels.as_ref().is_some_and(|m| {
                        !m.is_empty() && m.iter().all(|(k, v)| pieces.labels.get(k) == Some(v))
                    })
            });
            let other = term.namespaces.as_ref().is_some_and(|n| !n.is_empty())
                || term.namespace_selector.is_some()
                || term
                    .match_label_keys
                    .as_ref()
                    .is_some_and(|n| !n.is_empty())
                || term
                    .mismatch_label_keys
                    .as_ref()
                    .is_some_and(|n| !n.is_empty());
            if own && !other {
                pieces.one_task_per_node = true;
            } else {
                refusals.refuse(
                    format!("{tpath}.labelSelector"),
                    "pod anti-affinity must select the job's own pods (matchLabels among the \
                     pod template's labels) to mean one task per node; keeping away from other \
                     jobs' pods is not supported",
                );
            }
        }
        if anti
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .is_some_and(|p| !p.is_empty())
        {
            notes.insert(
                format!("k8s.{group}.preferredPodAntiAffinity"),
                "recorded, not used".into(),
            );
        }
    }
}

fn read_node_requirement(
    e: &NodeSelectorRequirement,
    path: &str,
    pieces: &mut PodPieces,
    refusals: &mut Refusals,
) {
    match (e.operator.as_str(), e.values.as_deref()) {
        ("In", Some([one])) => pieces.node_selector.push((e.key.clone(), one.clone())),
        ("In", _) => refusals.refuse(
            path,
            format!(
                "`{} In` with several values (any of them) is not supported; give one value",
                e.key
            ),
        ),
        (op, _) => refusals.refuse(
            path,
            format!("operator `{op}` is not supported; cadre supports `In` with one value"),
        ),
    }
}

/// What a task asks for, from the container's requests and limits. Kubernetes semantics:
/// a limit alone is also the request. cadre books what a task may use: its limit where one
/// is set, else its request (a Guaranteed pod's shape); CPUs in whole cores, at least one.
pub(crate) fn read_resources(
    r: Option<&ResourceRequirements>,
    path: &str,
    refusals: &mut Refusals,
) -> TaskResources {
    let mut out = TaskResources {
        cpus: 1,
        ..TaskResources::default()
    };
    let Some(r) = r else {
        return out;
    };
    let rpath = format!("{path}.resources");
    if r.claims.as_ref().is_some_and(|c| !c.is_empty()) {
        refusals.refuse(
            format!("{rpath}.claims"),
            "resource claims (DRA) are not supported",
        );
    }
    let empty = BTreeMap::new();
    let requests = r.requests.as_ref().unwrap_or(&empty);
    let limits = r.limits.as_ref().unwrap_or(&empty);
    let mut names: Vec<&String> = requests.keys().chain(limits.keys()).collect();
    names.sort();
    names.dedup();
    let mut gpu_kinds: Vec<String> = Vec::new();
    for name in names {
        let parse =
            |m: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
             which: &str,
             refusals: &mut Refusals| {
                m.get(name).and_then(|q| match Quantity::parse(&q.0) {
                    Ok(q) => Some(q),
                    Err(e) => {
                        refusals.refuse(format!("{rpath}.{which}[{name}]"), e.to_string());
                        None
                    }
                })
            };
        let request = parse(requests, "requests", refusals);
        let limit = parse(limits, "limits", refusals);
        if let (Some(rq), Some(l)) = (request, limit)
            && l < rq
        {
            refusals.refuse(
                format!("{rpath}.limits[{name}]"),
                format!("the limit {l} is below the request {rq}"),
            );
            continue;
        }
        let Some(value) = limit.or(request) else {
            continue;
        };
        let which = if limit.is_some() {
            "limits"
        } else {
            "requests"
        };
        let p = format!("{rpath}.{which}[{name}]");
        let whole = |refusals: &mut Refusals| -> Option<u32> {
            match value.whole().map(u32::try_from) {
                Some(Ok(n)) => Some(n),
                Some(Err(_)) => {
                    refusals.refuse(p.clone(), "too many");
                    None
                }
                None => {
                    refusals.refuse(
                        p.clone(),
                        format!("{value} is not a whole number of devices"),
                    );
                    None
                }
            }
        };
        match name.as_str() {
            "cpu" => match u32::try_from(value.ceil()) {
                Ok(c) => out.cpus = c.max(1),
                Err(_) => refusals.refuse(p, "too many CPUs"),
            },
            "memory" => match u64::try_from(value.ceil_mib()) {
                Ok(m) => out.mem_mib = m,
                Err(_) => refusals.refuse(p, "too much memory"),
            },
            "ephemeral-storage" => {
                // Node-local disk is not booked by cadre; the task uses the node's file systems.
            }
            "nvidia.com/gpu" => {
                if let Some(n) = whole(refusals) {
                    out.gpus = n;
                    gpu_kinds.push(name.clone());
                }
            }
            n if n.starts_with("nvidia.com/mig-") => {
                if let Some(c) = whole(refusals) {
                    out.gpus = c;
                    out.gpu_model = Some(n.trim_start_matches("nvidia.com/").to_string());
                    gpu_kinds.push(name.clone());
                }
            }
            n if n.starts_with("rdma/") => {
                if let Some(c) = whole(refusals) {
                    out.nics = out.nics.saturating_add(c);
                }
            }
            n if n.starts_with("hugepages-") => {
                refusals.refuse(p, "huge pages are not booked by cadre")
            }
            n if n.starts_with("nvidia.com/") => refusals.refuse(
                p,
                "this NVIDIA resource is not supported (cadre books `nvidia.com/gpu` and MIG \
                 devices `nvidia.com/mig-<profile>`)",
            ),
            "amd.com/gpu" | "pods" => refusals.refuse(p, "not supported"),
            n if n.starts_with("gpu.intel.com/") => refusals.refuse(p, "not supported"),
            n if n.contains('/') => {
                if let Some(c) = whole(refusals) {
                    out.named.push((n.to_string(), u64::from(c)));
                }
            }
            _ => refusals.refuse(p, "unknown resource"),
        }
    }
    if gpu_kinds.len() > 1 {
        refusals.refuse(
            format!("{rpath}.limits"),
            format!(
                "a task asks for GPUs of one kind; this one asks for {}",
                gpu_kinds.join(" and ")
            ),
        );
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn read_container(
    c: &Container,
    path: &str,
    group: &str,
    role: PodRole,
    opts: &TranslateOptions,
    pieces: &mut PodPieces,
    refusals: &mut Refusals,
    notes: &mut BTreeMap<String, String>,
) -> GroupRun {
    let Container {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy: _,
        resources: _, // read by read_resources
        restart_policy,
        restart_policy_rules,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        termination_message_path: _,
        termination_message_policy: _,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    } = c;
    let at = |field: &str| format!("{path}.{field}");
    let args = args.clone().unwrap_or_default();
    let command = command.clone().filter(|c| !c.is_empty());
    let program = match command {
        _ if opts.container_runtime => Program::Image { command, args },
        Some(cmd) => Program::Argv(cmd.into_iter().chain(args).collect()),
        None if role.mpi_worker && args.is_empty() => {
            Program::Argv(vec!["/usr/sbin/sshd".into(), "-De".into()])
        }
        None => {
            refusals.refuse(
                at("command"),
                format!(
                    "no command, so the container would run its image's entrypoint{}{}; cadre \
                     cannot know an image's entrypoint without a container runtime, and none is \
                     configured: give the program in `command`",
                    image
                        .as_deref()
                        .map(|i| format!(" (image `{i}`)"))
                        .unwrap_or_default(),
                    if args.is_empty() {
                        String::new()
                    } else {
                        format!(" with args {args:?}")
                    }
                ),
            );
            Program::Argv(Vec::new())
        }
    };
    let mut pull_policy = None;
    if opts.container_runtime {
        match image.as_deref().filter(|i| !i.is_empty()) {
            None => refusals.refuse(at("image"), "a container needs an image"),
            Some(i) => {
                pull_policy = Some(match image_pull_policy.as_deref() {
                    None => PullPolicy::default_for(i),
                    Some("Always") => PullPolicy::Always,
                    Some("IfNotPresent") => PullPolicy::IfNotPresent,
                    Some("Never") => PullPolicy::Never,
                    Some(other) => {
                        refusals.refuse(
                            at("imagePullPolicy"),
                            format!("`{other}` is not Always, IfNotPresent or Never"),
                        );
                        PullPolicy::IfNotPresent
                    }
                })
            }
        }
    }
    if let Some(i) = image {
        notes.insert(format!("k8s.{group}.image"), i.clone());
    }
    let mut from_objects = Vec::new();
    for (i, f) in env_from.iter().flatten().enumerate() {
        let prefix = f.prefix.clone().unwrap_or_default();
        match (&f.config_map_ref, &f.secret_ref) {
            (Some(cm), None) => from_objects.push(EnvFrom {
                secret: false,
                name: cm.name.clone(),
                prefix,
                optional: cm.optional == Some(true),
            }),
            (None, Some(s)) => from_objects.push(EnvFrom {
                secret: true,
                name: s.name.clone(),
                prefix,
                optional: s.optional == Some(true),
            }),
            _ => refusals.refuse(
                format!("{path}.envFrom[{i}]"),
                "name one configMapRef or one secretRef",
            ),
        }
    }
    let mut vars = Vec::new();
    for (i, e) in env.iter().flatten().enumerate() {
        let p = format!("{path}.env[{i}]");
        if let Some(source) = read_env(e, &p, c, role, pieces, refusals) {
            vars.push(EnvVar {
                name: e.name.clone(),
                source,
            });
        }
    }
    if lifecycle.is_some() {
        refusals.refuse(
            at("lifecycle"),
            "postStart and preStop hooks are not supported",
        );
    }
    for (field, probe) in [
        ("livenessProbe", liveness_probe),
        ("readinessProbe", readiness_probe),
        ("startupProbe", startup_probe),
    ] {
        if probe.is_some() {
            refusals.refuse(
                at(field),
                "probes are not supported (cadre restarts nothing on a probe and the job's names \
                 resolve whether or not a task is ready)",
            );
        }
    }
    let mut port_list = Vec::new();
    for (i, p) in ports.iter().flatten().enumerate() {
        match u16::try_from(p.container_port) {
            Ok(port) if port > 0 => port_list.push(Port {
                name: p.name.clone(),
                port,
            }),
            _ => refusals.refuse(
                format!("{path}.ports[{i}].containerPort"),
                "not a port number",
            ),
        }
        if p.host_port.is_some() {
            // Tasks use the node's network: every port is a host port.
            notes.insert(format!("k8s.{group}.hostPort"), "recorded".into());
        }
    }
    if restart_policy.is_some() || restart_policy_rules.as_ref().is_some_and(|r| !r.is_empty()) {
        refusals.refuse(
            at("restartPolicy"),
            "per-container restart policies are not supported",
        );
    }
    let mut capabilities = Vec::new();
    let mut identity = pieces.identity.clone();
    if let Some(sc) = security_context {
        let field = |f: &str| at(&format!("securityContext.{f}"));
        if let Some(v) = sc.run_as_user {
            identity.run_as_user = id_of(v, &field("runAsUser"), refusals);
        }
        if let Some(v) = sc.run_as_group {
            identity.run_as_group = id_of(v, &field("runAsGroup"), refusals);
        }
        if let Some(v) = sc.run_as_non_root {
            identity.run_as_non_root = v;
        }
        capabilities = read_security_context(
            sc,
            &at("securityContext"),
            group,
            opts.container_runtime,
            refusals,
            notes,
        );
    }
    for (field, set) in [("stdin", stdin), ("stdinOnce", stdin_once), ("tty", tty)] {
        if *set == Some(true) {
            refusals.refuse(at(field), "a batch task has no terminal or standard input");
        }
    }
    let mut mounted: Vec<Volume> = Vec::new();
    for (i, v) in volume_mounts.iter().flatten().enumerate() {
        let mpath = format!("{path}.volumeMounts[{i}]");
        let Some(kind) = pieces.volumes.get(&v.name) else {
            refusals.refuse(
                format!("{mpath}.name"),
                format!("`{}` is not a volume of the pod that cadre gives", v.name),
            );
            continue;
        };
        if !v.mount_path.starts_with('/') || v.mount_path.split('/').any(|c| c == "..") {
            refusals.refuse(
                format!("{mpath}.mountPath"),
                format!("`{}` is not an absolute path", v.mount_path),
            );
            continue;
        }
        if !v
            .mount_path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
        {
            refusals.refuse(
                format!("{mpath}.mountPath"),
                format!(
                    "`{}`: a mount path of letters, digits, `/`, `.`, `_` and `-` is supported",
                    v.mount_path
                ),
            );
            continue;
        }
        if v.sub_path.as_deref().is_some_and(|s| !s.is_empty())
            || v.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty())
        {
            refusals.refuse(
                format!("{mpath}.subPath"),
                "not supported: a volume is mounted whole",
            );
        }
        if v.mount_propagation.as_deref().is_some_and(|m| m != "None") {
            refusals.refuse(
                format!("{mpath}.mountPropagation"),
                "not supported: a task's mounts never propagate",
            );
        }
        if v.read_only == Some(true)
            && matches!(kind, VolumeKind::EmptyDir | VolumeKind::Memory { .. })
        {
            refusals.refuse(
                format!("{mpath}.readOnly"),
                "an emptyDir mounted read-only stays empty: mount it writable",
            );
        }
        let at = v.mount_path.trim_end_matches('/');
        if at.is_empty() {
            refusals.refuse(
                format!("{mpath}.mountPath"),
                "a volume cannot be mounted over `/`",
            );
            continue;
        }
        if mounted.iter().any(|m| m.path == at) {
            refusals.refuse(
                format!("{mpath}.mountPath"),
                format!("`{}` is mounted twice", v.mount_path),
            );
            continue;
        }
        if let Some(other) = mounted.iter().find(|m| nested(&m.path, at)) {
            refusals.refuse(
                format!("{mpath}.mountPath"),
                format!(
                    "`{at}` and `{}` are one inside the other: nested volume mounts are not \
                     supported (what one volume holds would decide where the other lands)",
                    other.path
                ),
            );
            continue;
        }
        let mut kind = kind.clone();
        if let VolumeKind::Claim { read_only, .. } | VolumeKind::HostPath { read_only, .. } =
            &mut kind
        {
            *read_only |= v.read_only == Some(true);
        }
        mounted.push(Volume {
            name: v.name.clone(),
            path: at.to_string(),
            kind,
        });
    }
    if volume_devices.as_ref().is_some_and(|v| !v.is_empty()) {
        refusals.refuse(at("volumeDevices"), "volumes are not supported");
    }
    if let Some(w) = working_dir
        && !w.starts_with('/')
    {
        refusals.refuse(at("workingDir"), format!("`{w}` is not an absolute path"));
    }
    let aliases = pieces
        .run
        .take()
        .map(|r| r.host_aliases)
        .unwrap_or_default();
    GroupRun {
        replica_type: String::new(),
        container: name.clone(),
        image: image.clone(),
        pull_policy,
        program,
        env: vars,
        work_dir: working_dir.clone(),
        ports: port_list,
        host_aliases: aliases,
        capabilities,
        labels: BTreeMap::new(),
        volumes: mounted,
        env_from: from_objects,
        identity,
    }
}

/// A user or group id of a security context: refused when no Linux id can be it.
fn id_of(v: i64, path: &str, refusals: &mut Refusals) -> Option<u32> {
    match u32::try_from(v) {
        Ok(id) if i32::try_from(id).is_ok() => Some(id),
        _ => {
            refusals.refuse(
                path,
                format!("Invalid value: {v}: must be between 0 and 2147483647, inclusive"),
            );
            None
        }
    }
}

/// Reads a container's security context: the capabilities it adds, for a container run
/// in its image (`in_image`); on the host a task is an unprivileged process and none can
/// be added.
fn read_security_context(
    sc: &SecurityContext,
    path: &str,
    group: &str,
    in_image: bool,
    refusals: &mut Refusals,
    notes: &mut BTreeMap<String, String>,
) -> Vec<String> {
    if sc.privileged == Some(true) {
        refusals.refuse(
            format!("{path}.privileged"),
            "privileged tasks are not supported",
        );
    }
    if sc.allow_privilege_escalation == Some(true) {
        refusals.refuse(
            format!("{path}.allowPrivilegeEscalation"),
            "tasks run as unprivileged processes of the submitting user",
        );
    }
    let mut added = Vec::new();
    let asked = sc
        .capabilities
        .as_ref()
        .and_then(|c| c.add.as_ref())
        .filter(|a| !a.is_empty());
    match asked {
        None => {}
        Some(_) if !in_image => refusals.refuse(
            format!("{path}.capabilities.add"),
            "capabilities cannot be granted to tasks on the host (they run as unprivileged \
             processes of the submitting user); a container run in its image can have those \
             its node allows",
        ),
        Some(names) => {
            for (i, name) in names.iter().enumerate() {
                match crate::model::capability(name) {
                    Some(c) if !added.iter().any(|a| a == c) => added.push(c.to_string()),
                    Some(_) => {}
                    None => refusals.refuse(
                        format!("{path}.capabilities.add[{i}]"),
                        format!(
                            "`{name}` is not a Linux capability (name each one needed, such \
                             as IPC_LOCK or SYS_NICE; ALL is not granted)"
                        ),
                    ),
                }
            }
        }
    }
    if sc.proc_mount.as_deref().is_some_and(|p| p != "Default") {
        refusals.refuse(format!("{path}.procMount"), "not supported");
    }
    if sc.windows_options.is_some() {
        refusals.refuse(format!("{path}.windowsOptions"), "cadre runs Linux tasks");
    }
    if let Some(u) = sc.run_as_user {
        notes.insert(format!("k8s.{group}.runAsUser"), u.to_string());
    }
    added
}

fn read_env(
    e: &k8s_openapi::api::core::v1::EnvVar,
    path: &str,
    c: &Container,
    role: PodRole,
    pieces: &PodPieces,
    refusals: &mut Refusals,
) -> Option<EnvSource> {
    let Some(from) = &e.value_from else {
        return Some(EnvSource::Literal(e.value.clone().unwrap_or_default()));
    };
    let p = format!("{path}.valueFrom");
    if let Some(f) = &from.field_ref {
        let fp = f.field_path.as_str();
        let key = fp
            .strip_prefix("metadata.labels['")
            .or_else(|| fp.strip_prefix("metadata.annotations['"))
            .and_then(|k| k.strip_suffix("']"));
        return match (fp, key) {
            ("metadata.name", _) => Some(EnvSource::PodName),
            ("metadata.namespace", _) => Some(EnvSource::Namespace),
            ("status.podIP" | "status.podIPs", _) => Some(EnvSource::PodIp),
            ("status.hostIP" | "status.hostIPs", _) => Some(EnvSource::HostIp),
            ("spec.nodeName", _) => Some(EnvSource::NodeName),
            (_, Some(COMPLETION_INDEX_KEY)) if role.indexed => Some(EnvSource::CompletionIndex),
            (_, Some(k)) if fp.starts_with("metadata.labels") => Some(EnvSource::Literal(
                pieces.labels.get(k).cloned().unwrap_or_default(),
            )),
            _ => {
                refusals.refuse(
                    format!("{p}.fieldRef.fieldPath"),
                    format!(
                        "`{fp}` is not supported (cadre gives metadata.name, metadata.namespace, \
                         metadata.labels['...'], status.podIP, status.hostIP, spec.nodeName, \
                         and the completion index of Indexed Jobs)"
                    ),
                );
                None
            }
        };
    }
    if let Some(r) = &from.resource_field_ref {
        if r.container_name.as_ref().is_some_and(|n| n != &c.name) {
            refusals.refuse(
                format!("{p}.resourceFieldRef.containerName"),
                "another container",
            );
            return None;
        }
        let res = c.resources.as_ref();
        let (map, key) = match r.resource.split_once('.') {
            Some(("limits", k)) => (res.and_then(|r| r.limits.as_ref()), k),
            Some(("requests", k)) => (res.and_then(|r| r.requests.as_ref()), k),
            _ => (None, r.resource.as_str()),
        };
        let divisor = r
            .divisor
            .as_ref()
            .map(|d| Quantity::parse(&d.0))
            .transpose()
            .ok()
            .flatten();
        let value = map
            .and_then(|m| m.get(key))
            .and_then(|q| Quantity::parse(&q.0).ok());
        return match (key, value) {
            ("cpu" | "memory", Some(v)) => {
                // Kubernetes rounds up: ceil(value / divisor), divisor 1 by default.
                let (vn, dn) = (
                    v.ceil_milli(),
                    divisor.map_or(1000, |d| d.ceil_milli().max(1)),
                );
                Some(EnvSource::Literal(vn.div_ceil(dn).to_string()))
            }
            _ => {
                refusals.refuse(
                    format!("{p}.resourceFieldRef"),
                    format!(
                        "`{}`: cadre gives limits.cpu, limits.memory, requests.cpu and \
                         requests.memory when the container sets them",
                        r.resource
                    ),
                );
                None
            }
        };
    }
    if let Some(k) = &from.config_map_key_ref {
        return Some(EnvSource::ConfigMapKey {
            name: k.name.clone(),
            key: k.key.clone(),
            optional: k.optional == Some(true),
        });
    }
    if let Some(k) = &from.secret_key_ref {
        return Some(EnvSource::SecretKey {
            name: k.name.clone(),
            key: k.key.clone(),
            optional: k.optional == Some(true),
        });
    }
    refusals.refuse(
        p,
        "values from files are not supported; give the value, or take it from a ConfigMap or Secret",
    );
    None
}
