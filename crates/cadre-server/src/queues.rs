//! Kubernetes queue objects in the controller: Kueue's ResourceFlavor, ClusterQueue,
//! LocalQueue and Topology, and Volcano's Queue, applied and deleted at runtime.
//!
//! **Given** the policy file's quotas (the base, fixed while the controller runs) and the
//! queue objects applied, as the store keeps them (their manifests, in the order first
//! applied). **Decided**: the quota configuration the scheduler runs with, the base's
//! queues then the objects' ([`cadre_k8s::QueueSet`]); the ClusterQueue a Kueue-labelled
//! job is routed to at its submission, with its flavor's node labels. **Must hold**:
//! - the objects applied make one valid configuration together with the base: a change
//!   that would not (a bad object, a queue name the policy file has, a ClusterQueue whose
//!   ResourceFlavor is not applied, a flavor deleted while a ClusterQueue uses it) is
//!   refused whole, naming what is wrong, and changes nothing;
//! - a change is committed to the store before the scheduler takes it (the engine does
//!   both on its thread), so a restarted controller rebuilds the same configuration,
//!   before it restores any job.
//!
//! A job is routed when it is submitted: its spec then names its ClusterQueue, and later
//! changes to its LocalQueue do not move it (Kueue would re-resolve a pending workload's
//! LocalQueue; cadre keeps the route the job was accepted with). What happens to jobs when
//! their queue changes or goes is the scheduler's (see `Event::SetQuotas`).

use cadre_core::policy::PriorityClassConfig;
use cadre_core::quota::QuotaConfig;
use cadre_k8s::{Object, QueueRef, QueueSet, queue_object_name};
use cadre_proto::api::{QueueObjectRef, QueueObjectResult};
use cadre_store::{QueueObjectKey, QueueObjectRecord};
use std::collections::{BTreeMap, BTreeSet};

/// The annotation a Kueue-labelled job's spec carries: `namespace/local-queue`.
pub const LOCAL_QUEUE_ANNOTATION: &str = "k8s.kueue.localQueue";

/// The queue objects applied, and the configuration they make with the policy's quotas.
#[derive(Clone, Debug)]
pub struct QueueObjects {
    base: QuotaConfig,
    records: Vec<QueueObjectRecord>,
    set: QueueSet,
}

/// A change of queue objects, checked and ready to commit.
#[derive(Clone, Debug)]
pub struct QueueChange {
    pub put: Vec<QueueObjectRecord>,
    pub delete: Vec<QueueObjectKey>,
    pub results: Vec<QueueObjectResult>,
    /// The objects after the change.
    pub next: QueueObjects,
}

fn key_of(r: &QueueObjectRecord) -> QueueObjectKey {
    r.key()
}

fn as_ref(k: &QueueObjectKey) -> QueueObjectRef {
    QueueObjectRef {
        kind: k.kind.clone(),
        namespace: k.namespace.clone(),
        name: k.name.clone(),
    }
}

/// Reads one stored or sent manifest: exactly one queue object.
fn read_object(manifest: &str, origin: &str) -> Result<Object, String> {
    let mut objects = cadre_k8s::parse_numbered(manifest, origin).map_err(|e| e.to_string())?;
    match (objects.pop(), objects.is_empty()) {
        (Some((_, o)), true) => Ok(o),
        _ => Err(format!("{origin}: expected one object")),
    }
}

impl QueueObjects {
    /// The policy's quotas alone.
    pub fn new(base: QuotaConfig) -> QueueObjects {
        QueueObjects {
            base,
            records: Vec::new(),
            set: QueueSet::default(),
        }
    }

    /// The policy's quotas and the stored objects, in their order; an error names the
    /// object this build cannot take back.
    pub fn load(base: QuotaConfig, records: Vec<QueueObjectRecord>) -> Result<Self, String> {
        let set = build(&records)?;
        let objects = QueueObjects { base, records, set };
        objects.quotas()?;
        Ok(objects)
    }

    pub fn records(&self) -> &[QueueObjectRecord] {
        &self.records
    }

    pub fn set(&self) -> &QueueSet {
        &self.set
    }

    /// The scheduler's quota configuration: the policy's queues and account limits, then
    /// the objects' queues and namespace quotas. A queue of the policy's name is an error.
    pub fn quotas(&self) -> Result<QuotaConfig, String> {
        let mut config = self.base.clone();
        let extra = self.set.quota_config().map_err(|e| e.to_string())?;
        for q in extra.queues {
            if config.queues.iter().any(|b| b.name == q.name) {
                return Err(format!(
                    "queue `{}` is defined in the policy file; a queue object may not replace it",
                    q.name
                ));
            }
            config.queues.push(q);
        }
        config.namespaces.extend(extra.namespaces);
        Ok(config)
    }

    /// The priority classes the PriorityClass objects make, for the scheduler.
    pub fn priority_classes(&self) -> Vec<PriorityClassConfig> {
        self.set
            .priority_classes
            .iter()
            .map(|c| c.config.clone())
            .collect()
    }

    /// Where each queue comes from: `policy`, `ClusterQueue` or `Queue`.
    pub fn source_of(&self, queue: &str) -> &'static str {
        match self.set.queues.iter().find(|q| q.config.name == queue) {
            Some(q) if q.source == "ClusterQueue" => "ClusterQueue",
            Some(_) => "Queue",
            None => "policy",
        }
    }

    /// Checks a change: `put` manifests (JSON) replace objects of their name or come last,
    /// then `delete` removes objects, which must exist. `at`: the time of the apply. Who may
    /// make it is [`crate::claims::forbidden`]'s to say; `by` says who a new
    /// PersistentVolumeClaim belongs to and which claims running jobs use.
    pub fn change(
        &self,
        put: &[serde_json::Value],
        delete: &[QueueObjectRef],
        default_namespace: &str,
        at: cadre_core::time::Time,
        by: &Applier<'_>,
    ) -> Result<QueueChange, String> {
        let mut records = self.records.clone();
        let mut results = Vec::new();
        let mut problems = Vec::new();
        let mut puts = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, manifest) in put.iter().enumerate() {
            let origin = format!("object {}", i + 1);
            let mut object = match read_object(&manifest.to_string(), &origin) {
                Ok(o) => o,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            let mut manifest = manifest.clone();
            if cadre_k8s::storage::is_owned_kind(object.kind()) {
                let claim = matches!(object, Object::PersistentVolumeClaim(_));
                let name = queue_object_name(&object, default_namespace);
                let old = name.as_ref().and_then(|n| {
                    records.iter().find(|r| {
                        r.kind == n.kind && r.namespace == n.namespace && r.name == n.name
                    })
                });
                stamp(&mut manifest, old, &records, by.user, claim);
                object = match read_object(&manifest.to_string(), &origin) {
                    Ok(o) => o,
                    Err(e) => {
                        problems.push(e);
                        continue;
                    }
                };
            }
            let text = manifest.to_string();
            let Some(name) = queue_object_name(&object, default_namespace) else {
                problems.push(format!(
                    "{origin}: {} is not a queue or namespace object (ResourceFlavor, \
                     ClusterQueue, LocalQueue, Topology, Queue of scheduling.volcano.sh, \
                     PriorityClass, Namespace, ResourceQuota, LimitRange, StorageClass, \
                     PersistentVolumeClaim, Service, ConfigMap, Secret); workloads are \
                     submitted as jobs",
                    object.describe()
                ));
                continue;
            };
            let record = QueueObjectRecord {
                kind: name.kind.to_string(),
                namespace: name.namespace,
                name: name.name,
                api_version: object.api_version().to_string(),
                manifest: text,
                applied: at,
            };
            if !seen.insert(key_of(&record)) {
                problems.push(format!("{origin}: {} is given twice", object.describe()));
                continue;
            }
            let outcome = match records.iter_mut().find(|r| key_of(r) == key_of(&record)) {
                Some(old) if old.manifest == record.manifest => "unchanged",
                Some(old) => {
                    if let Err(e) = immutable(old, &object, &self.set) {
                        problems.push(format!("{origin}: {e}"));
                        continue;
                    }
                    *old = record.clone();
                    "configured"
                }
                None => {
                    records.push(record.clone());
                    "created"
                }
            };
            results.push(QueueObjectResult {
                object: as_ref(&key_of(&record)),
                outcome: outcome.into(),
            });
            if outcome != "unchanged" {
                puts.push(record);
            }
        }
        let mut deletes = Vec::new();
        for d in delete {
            let key = QueueObjectKey {
                kind: d.kind.clone(),
                namespace: d.namespace.clone(),
                name: d.name.clone(),
            };
            if key.kind == "PersistentVolumeClaim"
                && let Some(job) = (by.claim_user)(&key.namespace, &key.name)
            {
                problems.push(format!(
                    "PersistentVolumeClaim `{}` in namespace {} is mounted by {job}, which has \
                     not ended: delete it once no job uses it",
                    key.name, key.namespace
                ));
                continue;
            }
            if key.kind == "StorageClass" {
                let used: Vec<String> = records
                    .iter()
                    .filter(|r| {
                        r.kind == "PersistentVolumeClaim"
                            && claim_class(r) == Some(key.name.clone())
                    })
                    .map(|r| format!("{}/{}", r.namespace, r.name))
                    .collect();
                if !used.is_empty() {
                    problems.push(format!(
                        "StorageClass `{}` is the class of PersistentVolumeClaims {}: delete \
                         them first",
                        key.name,
                        used.join(", ")
                    ));
                    continue;
                }
            }
            if key.kind == "Namespace" {
                let held: Vec<String> = records
                    .iter()
                    .filter(|r| r.namespace == key.name)
                    .map(|r| format!("{} `{}`", r.kind, r.name))
                    .collect();
                if !held.is_empty() {
                    problems.push(format!(
                        "Namespace `{}` holds {}: delete them first",
                        key.name,
                        held.join(", ")
                    ));
                    continue;
                }
            }
            let before = records.len();
            records.retain(|r| key_of(r) != key);
            if records.len() == before {
                let ns = if key.namespace.is_empty() {
                    String::new()
                } else {
                    format!(" in namespace {}", key.namespace)
                };
                problems.push(format!("{} `{}`{ns} is not applied", key.kind, key.name));
                continue;
            }
            results.push(QueueObjectResult {
                object: d.clone(),
                outcome: "deleted".into(),
            });
            deletes.push(key);
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        let next = QueueObjects {
            base: self.base.clone(),
            set: build(&records)?,
            records,
        };
        next.set.check_references().map_err(|e| e.to_string())?;
        next.quotas()?;
        check_kept_quotas(&next, &results)?;
        Ok(QueueChange {
            put: puts,
            delete: deletes,
            results,
            next,
        })
    }

    /// The ClusterQueue a job labelled with LocalQueue `namespace/name` goes to, and the
    /// node labels of its flavor.
    pub fn route(&self, local_queue: &str) -> Result<(String, Vec<(String, String)>), String> {
        let (namespace, name) = local_queue.split_once('/').ok_or_else(|| {
            format!("annotation {LOCAL_QUEUE_ANNOTATION} `{local_queue}` is not namespace/name")
        })?;
        let queue = self
            .set
            .route(&QueueRef::Kueue {
                namespace: namespace.to_string(),
                local_queue: name.to_string(),
            })
            .map_err(|e| format!("metadata.labels[kueue.x-k8s.io/queue-name]: {e}"))?;
        let labels = self.set.node_selector(&queue);
        Ok((queue, labels))
    }
}

/// The set the records make, applied in order.
fn build(records: &[QueueObjectRecord]) -> Result<QueueSet, String> {
    let mut set = QueueSet::default();
    for r in records {
        let origin = format!("{} `{}`", r.kind, r.name);
        let object = read_object(&r.manifest, &origin)?;
        set.apply_in(&object, &r.namespace)
            .map_err(|e| e.to_string())?;
    }
    Ok(set)
}

/// Who applies a change, and which claims the jobs not ended mount.
pub struct Applier<'a> {
    /// The user a new PersistentVolumeClaim belongs to.
    pub user: &'a str,
    /// The job not ended that mounts claim `(namespace, name)`, as a message names it.
    pub claim_user: &'a dyn Fn(&str, &str) -> Option<String>,
}

/// Whether the objects a change created (or, for claims, grew) keep within their
/// namespaces' ResourceQuotas: counts of kept objects (`persistentvolumeclaims`,
/// `services`, `configmaps`, `secrets`) and `requests.storage`. As in Kubernetes, a quota
/// is checked when an object is created or grows: lowering one below what a namespace
/// holds removes nothing. The error is Kubernetes' `exceeded quota` message.
fn check_kept_quotas(next: &QueueObjects, results: &[QueueObjectResult]) -> Result<(), String> {
    let set = &next.set;
    let bytes = |c: &cadre_k8s::storage::ClaimConfig| {
        c.storage
            .as_ref()
            .map_or(0, |s| u64::try_from(s.value.ceil()).unwrap_or(u64::MAX))
    };
    for r in results
        .iter()
        .filter(|r| r.outcome != "unchanged" && r.outcome != "deleted")
    {
        let (kind, ns) = (r.object.kind.as_str(), r.object.namespace.as_str());
        for q in set.object_quotas.iter().filter(|q| q.namespace == ns) {
            if r.outcome == "created"
                && let Some(&limit) = q.kept.get(kind)
            {
                let count = next
                    .records
                    .iter()
                    .filter(|x| x.kind == kind && x.namespace == ns)
                    .count() as u64;
                if count > limit {
                    let key = cadre_k8s::namespaces::KEPT_RESOURCES
                        .iter()
                        .find(|(_, k)| *k == kind)
                        .map_or(kind, |(r, _)| r);
                    return Err(format!(
                        "{kind} `{}`: exceeded quota: {}, requested: {key}=1, used: {key}={}, \
                         limited: {key}={limit}",
                        r.object.name,
                        q.name,
                        count - 1
                    ));
                }
            }
            if kind == "PersistentVolumeClaim"
                && let Some(limit) = q.storage
            {
                let claims = set.claims.iter().filter(|c| c.namespace == ns);
                let total: u64 = claims.clone().map(bytes).fold(0, u64::saturating_add);
                if total > limit {
                    let mine = claims
                        .clone()
                        .find(|c| c.name == r.object.name)
                        .map_or(0, bytes);
                    return Err(format!(
                        "PersistentVolumeClaim `{}`: exceeded quota: {}, requested: \
                         requests.storage={mine}, used: requests.storage={}, limited: \
                         requests.storage={limit}",
                        r.object.name,
                        q.name,
                        total - mine
                    ));
                }
            }
        }
    }
    Ok(())
}

/// An owned object's manifest as it is recorded (see
/// [`cadre_k8s::storage::is_owned_kind`]): the uid and owner of the object it replaces
/// (`old`), and a claim's class; else a new uid, `user` as its owner and, for a claim that
/// names no class, the default class of `records`.
fn stamp(
    manifest: &mut serde_json::Value,
    old: Option<&QueueObjectRecord>,
    records: &[QueueObjectRecord],
    user: &str,
    claim: bool,
) {
    let old: Option<serde_json::Value> = old.and_then(|r| serde_json::from_str(&r.manifest).ok());
    match old {
        Some(o) => {
            let text = |p: &str| o.pointer(p).and_then(|v| v.as_str()).map(str::to_string);
            let class = text("/spec/storageClassName").filter(|_| claim);
            cadre_k8s::storage::stamp_claim(
                manifest,
                &text("/metadata/uid").unwrap_or_default(),
                cadre_k8s::storage::owner_of(&o).unwrap_or_default(),
                class.as_deref(),
            );
        }
        None => {
            let default = records
                .iter()
                .filter(|r| claim && r.kind == "StorageClass")
                .filter_map(|r| match read_object(&r.manifest, "a class") {
                    Ok(Object::StorageClass(c)) => Some(c),
                    _ => None,
                })
                .find(|c| {
                    c.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(cadre_k8s::storage::DEFAULT_CLASS_ANNOTATION))
                        .is_some_and(|v| v == "true")
                })
                .and_then(|c| c.metadata.name.clone());
            cadre_k8s::storage::stamp_claim(manifest, &new_uid(), user, default.as_deref());
        }
    }
}

/// A new object's `metadata.uid`: 128 random bits, written as a UUID (version 4).
fn new_uid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system's random source failed");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The class a stored claim was given.
fn claim_class(r: &QueueObjectRecord) -> Option<String> {
    match read_object(&r.manifest, "a claim") {
        Ok(Object::PersistentVolumeClaim(c)) => c.spec.and_then(|s| s.storage_class_name),
        _ => None,
    }
}

/// Kubernetes' immutable fields: a PriorityClass's `value` and `preemptionPolicy` (jobs
/// keep the value they were admitted with, and a restarted controller gives it back); a
/// StorageClass's provisioner and parameters; a claim's spec but a growing storage request
/// where its class allows it (`before_change`: the objects before the change).
fn immutable(
    old: &QueueObjectRecord,
    new: &Object,
    before_change: &QueueSet,
) -> Result<(), String> {
    let read = |o: &Object| {
        let mut set = QueueSet::default();
        set.apply_in(o, &old.namespace).map(|()| set)
    };
    match new {
        Object::StorageClass(_) | Object::PersistentVolumeClaim(_) => {
            let before = read_object(&old.manifest, "the applied object")?;
            let (Ok(before), Ok(after)) = (read(&before), read(new)) else {
                return Ok(());
            };
            if let (Some(a), Some(b)) = (
                before.storage_classes.first(),
                after.storage_classes.first(),
            ) {
                return cadre_k8s::storage::class_update(a, b);
            }
            if let (Some(a), Some(b)) = (before.claims.first(), after.claims.first()) {
                let class = before_change
                    .storage_classes
                    .iter()
                    .find(|c| Some(&c.name) == a.class.as_ref());
                return cadre_k8s::storage::claim_update(a, b, class);
            }
            return Ok(());
        }
        _ => {}
    }
    let Object::PriorityClass(p) = new else {
        return Ok(());
    };
    let Ok(Object::PriorityClass(o)) = read_object(&old.manifest, "the applied object") else {
        return Ok(());
    };
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let invalid = |what: String| {
        Err(format!(
            "PriorityClass.scheduling.k8s.io \"{name}\" is invalid: {what}"
        ))
    };
    if o.value != p.value {
        return invalid("value: Forbidden: may not be changed in an update.".into());
    }
    let policy = |x: &Option<String>| x.clone().unwrap_or_else(|| "PreemptLowerPriority".into());
    if policy(&o.preemption_policy) != policy(&p.preemption_policy) {
        return invalid(format!(
            "preemptionPolicy: Invalid value: \"{}\": field is immutable",
            policy(&p.preemption_policy)
        ));
    }
    Ok(())
}

/// Routes a job labelled for a Kueue LocalQueue: its spec gets the ClusterQueue and the
/// flavor's node labels (a label the job's own node selector gives otherwise is an error).
/// A Volcano Job in Volcano's `default` queue, which Volcano always has, is in no queue
/// unless a queue of that name is applied. Other jobs are left as they are.
pub fn route_job(
    objects: &QueueObjects,
    spec: &mut cadre_core::job::JobSpec,
) -> Result<(), String> {
    let volcano = spec
        .annotations
        .get("k8s.apiVersion")
        .is_some_and(|v| v.starts_with("batch.volcano.sh/"));
    if volcano && spec.queue.as_deref() == Some("default") {
        let defined = objects
            .quotas()
            .is_ok_and(|q| q.queues.iter().any(|x| x.name == "default"));
        if !defined {
            spec.queue = None;
        }
    }
    if spec.priority_class.is_none()
        && is_workload(spec)
        && let Some(class) = objects.set.default_priority_class()
    {
        spec.priority_class = Some(class.config.name.clone());
    }
    if spec.queue.is_some() {
        return Ok(());
    }
    let Some(local) = spec.annotations.get(LOCAL_QUEUE_ANNOTATION).cloned() else {
        return Ok(());
    };
    // A LocalQueue is its namespace's: a job of another namespace may not name it (nor
    // pass a ClusterQueue's namespaceSelector through it).
    if let (Some(ns), Some((queue_ns, _))) = (&spec.namespace, local.split_once('/'))
        && ns != queue_ns
    {
        return Err(format!(
            "the job is in namespace `{ns}`, but its LocalQueue `{local}` is in `{queue_ns}`"
        ));
    }
    match route_local(objects, &local, &spec.node_selector)? {
        Some((queue, node_selector)) => {
            spec.queue = Some(queue);
            spec.node_selector = node_selector;
        }
        // Waits, in a queue of the LocalQueue's own name, which no queue can have (`/` is
        // in no Kubernetes name), until the LocalQueue is applied ([`waiting_routes`]).
        None => spec.queue = Some(local),
    }
    Ok(())
}

/// Whether a job is a Kubernetes workload (`cadre apply` records its apiVersion).
pub fn is_workload(spec: &cadre_core::job::JobSpec) -> bool {
    spec.annotations.contains_key("k8s.apiVersion")
}

/// Whether a job is waiting for its Kueue LocalQueue (or the ClusterQueue it feeds) to be
/// applied, and why: Kubernetes' `Inadmissible` condition.
pub fn waiting_for_local_queue(
    objects: &QueueObjects,
    spec: &cadre_core::job::JobSpec,
) -> Option<String> {
    let local = waiting_on(spec)?;
    let (namespace, name) = local.split_once('/')?;
    let route = objects.set.route(&QueueRef::Kueue {
        namespace: namespace.to_string(),
        local_queue: name.to_string(),
    });
    Some(match route {
        Err(e) => format!("Inadmissible: {e}"),
        Ok(_) => match route_local(objects, local, &spec.node_selector) {
            Err(e) => format!("Inadmissible: {e}"),
            Ok(_) => format!("Inadmissible: LocalQueue `{local}` is being applied"),
        },
    })
}

/// The LocalQueue (`namespace/name`) a job waits for: the one it is labelled for, when its
/// queue is still that LocalQueue's own name ([`route_job`]).
fn waiting_on(spec: &cadre_core::job::JobSpec) -> Option<&String> {
    spec.annotations
        .get(LOCAL_QUEUE_ANNOTATION)
        .filter(|local| spec.queue.as_ref() == Some(*local))
}

/// Whether the `new` jobs, submitted in order beside the `unended` ones, keep within the
/// object counts of their namespaces' ResourceQuotas (`pods`: ranks; `count/<resource>`:
/// workloads of a kind). Kubernetes counts objects as they are created; cadre counts the
/// workloads that have not ended (an ended one no longer counts, as if deleted at once).
/// The error is Kubernetes' `exceeded quota` message.
pub fn check_object_quotas<'a>(
    objects: &QueueObjects,
    unended: impl Iterator<Item = &'a cadre_core::job::JobSpec>,
    new: &[&cadre_core::job::JobSpec],
) -> Result<(), String> {
    let quotas = &objects.set.object_quotas;
    // Only the namespaces that have object counts are counted.
    let counting: BTreeSet<&str> = quotas
        .iter()
        .filter(|q| !q.is_empty())
        .map(|q| q.namespace.as_str())
        .collect();
    if counting.is_empty() {
        return Ok(());
    }
    let counted = |spec: &cadre_core::job::JobSpec| {
        let ns = spec
            .namespace
            .clone()
            .filter(|ns| counting.contains(ns.as_str()))?;
        let resource = cadre_k8s::namespaces::workload_resource(
            spec.annotations.get("k8s.kind")?,
            spec.annotations.get("k8s.apiVersion")?,
        )?;
        let pods: u64 = spec.groups.iter().map(|g| u64::from(g.count)).sum();
        Some((ns, resource, pods))
    };
    // Per namespace: ranks, and workloads by resource.
    type Used = BTreeMap<String, (u64, BTreeMap<&'static str, u64>)>;
    let add = |used: &mut Used, ns: String, resource: &'static str, pods: u64| {
        let u = used.entry(ns).or_default();
        u.0 = u.0.saturating_add(pods);
        *u.1.entry(resource).or_default() += 1;
    };
    let mut used = Used::new();
    for (ns, resource, pods) in unended.filter_map(counted) {
        add(&mut used, ns, resource, pods);
    }
    for spec in new {
        let Some((ns, resource, pods)) = counted(spec) else {
            continue;
        };
        let (used_pods, used_kinds) = used.get(&ns).cloned().unwrap_or_default();
        let used_kind = used_kinds.get(resource).copied().unwrap_or(0);
        for q in quotas.iter().filter(|q| q.namespace == ns) {
            let exceeded = |key: &str, requested: u64, used: u64, limit: u64| {
                Err(format!(
                    "exceeded quota: {}, requested: {key}={requested}, used: {key}={used}, \
                     limited: {key}={limit}",
                    q.name
                ))
            };
            if let Some(limit) = q.pods
                && used_pods.saturating_add(pods) > limit
            {
                return exceeded("pods", pods, used_pods, limit);
            }
            if let Some(&limit) = q.workloads.get(resource)
                && used_kind + 1 > limit
            {
                return exceeded(&format!("count/{resource}"), 1, used_kind, limit);
            }
        }
        add(&mut used, ns, resource, pods);
    }
    Ok(())
}

/// A job's queue and node selector.
pub type Route = (String, Vec<(String, String)>);

/// The queue and node selector a job labelled for LocalQueue `local` (`namespace/name`)
/// gets: its ClusterQueue, and `selector` with the flavor's node labels (a label the job
/// selects otherwise is an error). `None`: the LocalQueue, or the ClusterQueue it feeds,
/// is not applied (yet).
fn route_local(
    objects: &QueueObjects,
    local: &str,
    selector: &[(String, String)],
) -> Result<Option<Route>, String> {
    if !local.contains('/') {
        return Err(format!(
            "annotation {LOCAL_QUEUE_ANNOTATION} `{local}` is not namespace/name"
        ));
    }
    let Ok((queue, labels)) = objects.route(local) else {
        return Ok(None);
    };
    let mut selector = selector.to_vec();
    for (k, v) in labels {
        match selector.iter().find(|(x, _)| *x == k) {
            Some((_, mine)) if *mine != v => {
                return Err(format!(
                    "the job selects nodes with {k}={mine}, but its ClusterQueue `{queue}`'s \
                     ResourceFlavor gives {k}={v}"
                ));
            }
            Some(_) => {}
            None => selector.push((k, v)),
        }
    }
    Ok(Some((queue, selector)))
}

/// Of `pending` jobs, those waiting for their LocalQueue that `objects` now route, each
/// with its queue and node selector (for `Event::Route`); a job whose selector clashes
/// with its flavor's labels stays waiting, with the reason.
pub fn waiting_routes<'a>(
    objects: &QueueObjects,
    pending: impl Iterator<Item = (cadre_core::job::JobId, &'a cadre_core::job::JobSpec)>,
) -> Vec<(cadre_core::job::JobId, Result<Route, String>)> {
    pending
        .filter_map(|(id, spec)| {
            let local = waiting_on(spec)?;
            match route_local(objects, local, &spec.node_selector) {
                Ok(Some(route)) => Some((id, Ok(route))),
                Ok(None) => None,
                Err(e) => Some((id, Err(e))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// An administrator's change, while no job mounts a claim.
    fn root() -> Applier<'static> {
        Applier {
            user: "root",
            claim_user: &|_, _| None,
        }
    }
    use super::*;
    use cadre_core::job::{JobId, JobSpec};
    use cadre_core::quota::{QueueConfig, QuotaAmounts};
    use cadre_core::resources::TaskResources;
    use cadre_core::time::{Dur, Time};

    fn json(yaml: &str) -> Vec<serde_json::Value> {
        cadre_k8s::documents_json(yaml, "test")
            .unwrap()
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    const FLAVOR: &str = "apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: f}
spec: {nodeLabels: {pool: a}}
";

    fn cq(cpus: u32) -> String {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: f, resources: [{{name: cpu, nominalQuota: {cpus}}}]}}]
"
        )
    }

    const LQ: &str = "apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq}
spec: {clusterQueue: cq}
";

    fn policy_queue(name: &str) -> QuotaConfig {
        QuotaConfig {
            queues: vec![QueueConfig {
                name: name.into(),
                cohort: None,
                nominal: QuotaAmounts::gpus(1),
                borrowing_limit: None,
                lending_limit: None,
                capability: None,
                weight: 1,
                accounts: vec![],
                max_per_user: None,
                max_running_jobs_per_user: None,
            }],
            accounts: vec![],
            namespaces: Vec::new(),
        }
    }

    fn outcomes(c: &QueueChange) -> Vec<String> {
        c.results
            .iter()
            .map(|r| {
                format!(
                    "{}/{}/{} {}",
                    r.object.kind, r.object.namespace, r.object.name, r.outcome
                )
            })
            .collect()
    }

    #[test]
    fn a_change_creates_configures_keeps_and_deletes_like_kubectl_apply() {
        let base = QueueObjects::new(policy_queue("slurm"));
        let all = json(&format!("{FLAVOR}---\n{}---\n{LQ}", cq(4)));
        let c = base.change(&all, &[], "ml", Time(1), &root()).unwrap();
        assert_eq!(
            outcomes(&c),
            [
                "ResourceFlavor//f created",
                "ClusterQueue//cq created",
                "LocalQueue/ml/lq created"
            ]
        );
        let quotas = c.next.quotas().unwrap();
        let names: Vec<&str> = quotas.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["slurm", "cq"], "the policy's queues first");
        let objects = c.next;
        let c = objects
            .change(
                &json(&format!("{FLAVOR}---\n{}", cq(8))),
                &[],
                "ml",
                Time(2),
                &root(),
            )
            .unwrap();
        assert_eq!(
            outcomes(&c),
            ["ResourceFlavor//f unchanged", "ClusterQueue//cq configured"]
        );
        assert_eq!(c.put.len(), 1, "only what changed is written");
        let objects = c.next;
        assert_eq!(objects.records()[1].kind, "ClusterQueue", "kept its place");
        let lq = QueueObjectRef {
            kind: "LocalQueue".into(),
            namespace: "ml".into(),
            name: "lq".into(),
        };
        let c = objects
            .change(&[], &[lq], "default", Time(3), &root())
            .unwrap();
        assert_eq!(outcomes(&c), ["LocalQueue/ml/lq deleted"]);
        assert_eq!(c.next.records().len(), 2);
    }

    #[test]
    fn bad_changes_are_refused_whole_saying_why() {
        let base = QueueObjects::new(policy_queue("cq"));
        let err = base
            .change(
                &json(&format!("{FLAVOR}---\n{}", cq(4))),
                &[],
                "default",
                Time(1),
                &root(),
            )
            .unwrap_err();
        assert_eq!(
            err,
            "queue `cq` is defined in the policy file; a queue object may not replace it"
        );
        let base = QueueObjects::new(QuotaConfig::default());
        let err = base
            .change(&json(&cq(4)), &[], "default", Time(1), &root())
            .unwrap_err();
        assert!(
            err.contains("ClusterQueue `cq` uses ResourceFlavor `f`, which is not applied"),
            "{err}"
        );
        let objects = base
            .change(
                &json(&format!("{FLAVOR}---\n{}", cq(4))),
                &[],
                "default",
                Time(1),
                &root(),
            )
            .unwrap()
            .next;
        let flavor = QueueObjectRef {
            kind: "ResourceFlavor".into(),
            namespace: String::new(),
            name: "f".into(),
        };
        let err = objects
            .change(&[], &[flavor], "default", Time(2), &root())
            .unwrap_err();
        assert!(
            err.contains("uses ResourceFlavor `f`, which is not applied"),
            "{err}"
        );
        let job = "apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: i, command: ['true']}]}}}
";
        let err = objects
            .change(&json(job), &[], "default", Time(2), &root())
            .unwrap_err();
        assert!(
            err.contains("Job `j` is not a queue or namespace object"),
            "{err}"
        );
        let twice = json(&format!("{}---\n{}", cq(1), cq(2)));
        let err = objects
            .change(&twice, &[], "default", Time(2), &root())
            .unwrap_err();
        assert!(err.contains("ClusterQueue `cq` is given twice"), "{err}");
        let missing = QueueObjectRef {
            kind: "ClusterQueue".into(),
            namespace: String::new(),
            name: "nope".into(),
        };
        let err = objects
            .change(&[], &[missing], "default", Time(2), &root())
            .unwrap_err();
        assert_eq!(err, "ClusterQueue `nope` is not applied");
        let bad = json(
            "apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: bad}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 1, borrowingLimit: 1}]}]
",
        );
        let err = objects
            .change(&bad, &[], "default", Time(2), &root())
            .unwrap_err();
        assert!(err.contains("borrowing_limit but is in no cohort"), "{err}");
    }

    const CLASS: &str = "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
globalDefault: true
";

    const QUOTA: &str = "apiVersion: v1
kind: ResourceQuota
metadata: {name: gpus}
spec: {hard: {requests.nvidia.com/gpu: 16}}
";

    #[test]
    fn namespace_objects_make_quotas_and_classes_and_keep_kubernetes_rules() {
        let base = QueueObjects::new(QuotaConfig::default());
        let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n";
        let c = base
            .change(
                &json(&format!("{CLASS}---\n{QUOTA}---\n{ns}")),
                &[],
                "team",
                Time(1),
                &root(),
            )
            .unwrap();
        assert_eq!(
            outcomes(&c),
            [
                "PriorityClass//high created",
                "ResourceQuota/team/gpus created",
                "Namespace//team created"
            ]
        );
        let objects = c.next;
        let quotas = objects.quotas().unwrap();
        assert_eq!(quotas.namespaces.len(), 1);
        assert_eq!(
            quotas.namespaces[0].namespace, "team",
            "the apply's namespace"
        );
        assert_eq!(quotas.namespaces[0].hard.gpu_milli, Some(16_000));
        assert_eq!(objects.priority_classes()[0].value, 1000);
        // Reloaded from the records, the quota keeps the namespace it was applied in.
        let again = QueueObjects::load(QuotaConfig::default(), objects.records().to_vec()).unwrap();
        assert_eq!(again.quotas().unwrap(), quotas);
        // value and preemptionPolicy are immutable; the rest may change.
        let err = objects
            .change(
                &json(&CLASS.replace("1000", "7")),
                &[],
                "team",
                Time(2),
                &root(),
            )
            .unwrap_err();
        assert_eq!(
            err,
            "object 1: PriorityClass.scheduling.k8s.io \"high\" is invalid: value: Forbidden: \
             may not be changed in an update."
        );
        let err = objects
            .change(
                &json(&format!("{CLASS}preemptionPolicy: Never\n")),
                &[],
                "team",
                Time(2),
                &root(),
            )
            .unwrap_err();
        assert!(
            err.contains("preemptionPolicy: Invalid value: \"Never\": field is immutable"),
            "{err}"
        );
        let c = objects
            .change(
                &json(&format!("{CLASS}description: the deadline\n")),
                &[],
                "team",
                Time(2),
                &root(),
            )
            .unwrap();
        assert_eq!(outcomes(&c), ["PriorityClass//high configured"]);
        // A namespace that holds objects is not deleted.
        let namespace = QueueObjectRef {
            kind: "Namespace".into(),
            namespace: String::new(),
            name: "team".into(),
        };
        let err = objects
            .change(
                &[],
                std::slice::from_ref(&namespace),
                "default",
                Time(3),
                &root(),
            )
            .unwrap_err();
        assert_eq!(
            err,
            "Namespace `team` holds ResourceQuota `gpus`: delete them first"
        );
        let quota = QueueObjectRef {
            kind: "ResourceQuota".into(),
            namespace: "team".into(),
            name: "gpus".into(),
        };
        let c = objects
            .change(&[], &[quota, namespace], "default", Time(3), &root())
            .unwrap();
        assert_eq!(c.next.records().len(), 1);
        // A Kubernetes workload naming no class gets the global default; others do not.
        let mut k8s = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        k8s.annotations
            .insert("k8s.apiVersion".into(), "batch/v1".into());
        route_job(&objects, &mut k8s).unwrap();
        assert_eq!(k8s.priority_class.as_deref(), Some("high"));
        let mut slurm = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        route_job(&objects, &mut slurm).unwrap();
        assert_eq!(slurm.priority_class, None);
    }

    /// The flavor, ClusterQueue `cq` with this `namespaceSelector` (YAML under it), and
    /// LocalQueue `lq`, applied in namespace `ml`.
    fn selective(selector: &str) -> Result<QueueObjects, String> {
        let queue = cq(4).replace(
            "spec:\n",
            &format!("spec:\n  namespaceSelector: {selector}\n"),
        );
        QueueObjects::new(QuotaConfig::default())
            .change(
                &json(&format!("{FLAVOR}---\n{queue}---\n{LQ}")),
                &[],
                "ml",
                Time(1),
                &root(),
            )
            .map(|c| c.next)
    }

    /// A job labelled for LocalQueue `ml/lq`, routed by `objects`.
    fn routed_in_ml(objects: &QueueObjects) -> JobSpec {
        let mut spec = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        spec.annotations
            .insert(LOCAL_QUEUE_ANNOTATION.into(), "ml/lq".into());
        route_job(objects, &mut spec).unwrap();
        spec
    }

    #[test]
    fn a_cluster_queue_s_namespace_selector_admits_by_the_namespace_s_labels() {
        let objects = selective("{matchLabels: {team: a}}").unwrap();
        let spec = routed_in_ml(&objects);
        assert_eq!(spec.queue.as_deref(), Some("ml/lq"), "waits");
        let why = waiting_for_local_queue(&objects, &spec).unwrap();
        assert!(
            why.contains(
                "namespace `ml` does not match the namespaceSelector of ClusterQueue `cq`"
            ),
            "{why}"
        );
        // Its Namespace labelled for the queue: the waiting job is routed.
        let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: a}}\n";
        let objects = objects
            .change(&json(ns), &[], "ml", Time(2), &root())
            .unwrap()
            .next;
        let routes = waiting_routes(&objects, std::iter::once((JobId(7), &spec)));
        let route = (
            "cq".to_string(),
            vec![("pool".to_string(), "a".to_string())],
        );
        assert_eq!(routes, [(JobId(7), Ok(route))]);
        // Kubernetes' own label of every namespace selects too.
        let objects = selective(
            "{matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [ml]}]}",
        )
        .unwrap();
        assert_eq!(routed_in_ml(&objects).queue.as_deref(), Some("cq"));
        let err = selective("{matchExpressions: [{key: team, operator: Exists, values: [a]}]}")
            .unwrap_err();
        assert!(err.contains("operator Exists takes none"), "{err}");
    }

    #[test]
    fn a_resource_quota_s_object_counts_hold_workloads_at_submission() {
        let quota = "apiVersion: v1
kind: ResourceQuota
metadata: {name: counts}
spec: {hard: {pods: 5, count/jobs.batch: 2}}
";
        let objects = QueueObjects::new(QuotaConfig::default())
            .change(&json(quota), &[], "team", Time(1), &root())
            .unwrap()
            .next;
        let job = |ns: &str, tasks: u32, kind: &str, api: &str| {
            let mut s = JobSpec::simple("u", "a", tasks, TaskResources::default(), Dur(10));
            s.namespace = Some(ns.into());
            s.annotations.insert("k8s.kind".into(), kind.into());
            s.annotations.insert("k8s.apiVersion".into(), api.into());
            s
        };
        let running = job("team", 2, "Job", "batch/v1");
        let mpi = job("team", 2, "MPIJob", "kubeflow.org/v2beta1");
        // 2 + 2 ranks of 5, one Job of 2: both fit.
        check_object_quotas(&objects, [&running].into_iter(), &[&mpi]).unwrap();
        // One more rank than is left.
        let big = job("team", 2, "Job", "batch/v1");
        let err = check_object_quotas(&objects, [&running, &mpi].into_iter(), &[&big]).unwrap_err();
        assert_eq!(
            err,
            "exceeded quota: counts, requested: pods=2, used: pods=4, limited: pods=5"
        );
        // The third Job, counted with the earlier ones of its own batch.
        let one = job("team", 1, "Job", "batch/v1");
        let err = check_object_quotas(&objects, [&running].into_iter(), &[&one, &one]).unwrap_err();
        assert_eq!(
            err,
            "exceeded quota: counts, requested: count/jobs.batch=1, used: count/jobs.batch=2, \
             limited: count/jobs.batch=2"
        );
        // Another namespace, and a job of no Kubernetes kind, are not counted.
        let other = job("other", 9, "Job", "batch/v1");
        let plain = JobSpec::simple("u", "a", 9, TaskResources::default(), Dur(10));
        check_object_quotas(&objects, [&running].into_iter(), &[&other, &plain]).unwrap();
    }

    #[test]
    fn jobs_are_routed_through_their_local_queue_onto_the_flavors_nodes() {
        let objects = QueueObjects::new(QuotaConfig::default())
            .change(
                &json(&format!("{FLAVOR}---\n{}---\n{LQ}", cq(4))),
                &[],
                "default",
                Time(1),
                &root(),
            )
            .unwrap()
            .next;
        let mut spec = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        spec.annotations
            .insert(LOCAL_QUEUE_ANNOTATION.into(), "default/lq".into());
        route_job(&objects, &mut spec).unwrap();
        assert_eq!(spec.queue.as_deref(), Some("cq"));
        assert_eq!(spec.node_selector, [("pool".to_string(), "a".to_string())]);
        let mut other = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        other
            .annotations
            .insert(LOCAL_QUEUE_ANNOTATION.into(), "ml/lq".into());
        // A job of another namespace may not name the LocalQueue.
        let mut stranger = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        stranger.namespace = Some("ml".into());
        stranger
            .annotations
            .insert(LOCAL_QUEUE_ANNOTATION.into(), "default/lq".into());
        let err = route_job(&objects, &mut stranger).unwrap_err();
        assert_eq!(
            err,
            "the job is in namespace `ml`, but its LocalQueue `default/lq` is in `default`"
        );
        // Its LocalQueue is not applied: it waits, in a queue of the LocalQueue's name.
        route_job(&objects, &mut other).unwrap();
        assert_eq!(other.queue.as_deref(), Some("ml/lq"));
        assert_eq!(
            waiting_for_local_queue(&objects, &other).as_deref(),
            Some("Inadmissible: LocalQueue `lq` does not exist in namespace `ml`")
        );
        assert_eq!(waiting_for_local_queue(&objects, &spec), None);
        let mut clash = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        clash
            .annotations
            .insert(LOCAL_QUEUE_ANNOTATION.into(), "default/lq".into());
        clash.node_selector.push(("pool".into(), "b".into()));
        let err = route_job(&objects, &mut clash).unwrap_err();
        assert!(err.contains("pool=b") && err.contains("pool=a"), "{err}");
        // Volcano's own `default` queue: no queue, unless one of that name is applied.
        let mut vc = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        vc.annotations
            .insert("k8s.apiVersion".into(), "batch.volcano.sh/v1alpha1".into());
        vc.queue = Some("default".into());
        route_job(&objects, &mut vc).unwrap();
        assert_eq!(vc.queue, None);
        let with_default = QueueObjects::new(policy_queue("default"));
        let mut vc2 = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur(10));
        vc2.annotations
            .insert("k8s.apiVersion".into(), "batch.volcano.sh/v1alpha1".into());
        vc2.queue = Some("default".into());
        route_job(&with_default, &mut vc2).unwrap();
        assert_eq!(vc2.queue.as_deref(), Some("default"));
    }
}
