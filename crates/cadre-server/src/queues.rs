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

use cadre_core::quota::QuotaConfig;
use cadre_k8s::{Object, QueueRef, QueueSet, queue_object_name};
use cadre_proto::api::{QueueObjectRef, QueueObjectResult};
use cadre_store::{QueueObjectKey, QueueObjectRecord};
use std::collections::BTreeSet;

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
    /// the objects' queues. A queue of the policy's name is an error.
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
        Ok(config)
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
    /// then `delete` removes objects, which must exist. `at`: the time of the apply.
    pub fn change(
        &self,
        put: &[serde_json::Value],
        delete: &[QueueObjectRef],
        default_namespace: &str,
        at: cadre_core::time::Time,
    ) -> Result<QueueChange, String> {
        let mut records = self.records.clone();
        let mut results = Vec::new();
        let mut problems = Vec::new();
        let mut puts = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, manifest) in put.iter().enumerate() {
            let text = manifest.to_string();
            let origin = format!("object {}", i + 1);
            let object = match read_object(&text, &origin) {
                Ok(o) => o,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            let Some(name) = queue_object_name(&object, default_namespace) else {
                problems.push(format!(
                    "{origin}: {} is not a queue object (ResourceFlavor, ClusterQueue, \
                     LocalQueue, Topology, Queue of scheduling.volcano.sh); workloads are \
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
        set.apply(&object).map_err(|e| e.to_string())?;
    }
    Ok(set)
}

/// Routes a job labelled for a Kueue LocalQueue: its spec gets the ClusterQueue and the
/// flavor's node labels (a label the job's own node selector gives otherwise is an error).
/// Jobs without the annotation, or naming a queue already, are left as they are.
pub fn route_job(
    objects: &QueueObjects,
    spec: &mut cadre_core::job::JobSpec,
) -> Result<(), String> {
    if spec.queue.is_some() {
        return Ok(());
    }
    let Some(local) = spec.annotations.get(LOCAL_QUEUE_ANNOTATION).cloned() else {
        return Ok(());
    };
    let (queue, labels) = objects.route(&local)?;
    for (k, v) in labels {
        match spec.node_selector.iter().find(|(x, _)| *x == k) {
            Some((_, mine)) if *mine != v => {
                return Err(format!(
                    "the job selects nodes with {k}={mine}, but its ClusterQueue `{queue}`'s \
                     ResourceFlavor gives {k}={v}"
                ));
            }
            Some(_) => {}
            None => spec.node_selector.push((k, v)),
        }
    }
    spec.queue = Some(queue);
    Ok(())
}
