//! Queue objects into cadre's queues: Kueue's ResourceFlavor, ClusterQueue, LocalQueue and
//! Topology, and Volcano's Queue, mapped onto [`cadre_core::quota::QueueConfig`].
//!
//! **Given** queue objects in the order they are applied. **Decided**: one
//! [`QueueConfig`] per ClusterQueue and per Volcano Queue; the LocalQueue routes from a
//! namespace's queue name to its ClusterQueue; the node labels of each queue's flavor.
//! **Must hold**: a queue's quotas are those the object states, in cadre's units (whole
//! cores rounded up, MiB rounded up, GPUs in thousandths, `rdma/*` as NICs), and what cadre's
//! quota model cannot express is refused, never approximated:
//!
//! | object | field | cadre |
//! |---|---|---|
//! | ClusterQueue | `resourceGroups[].flavors[].resources[].nominalQuota` | `nominal` |
//! | | `borrowingLimit`, `lendingLimit` | `borrowing_limit`, `lending_limit` |
//! | | `cohort` (v1beta1), `cohortName` (v1beta2) | `cohort` (flat) |
//! | | `fairSharing.weight` | `weight` |
//! | | one flavor in all groups | the flavor's `nodeLabels` select the queue's nodes |
//! | | `namespaceSelector` | the namespaces (by their Namespace objects' labels) whose workloads it admits |
//! | | several flavors, `StrictFIFO`, admission checks, stop policies, per-queue preemption, admission fair sharing | refused |
//! | Volcano Queue | `weight` | `weight` |
//! | | `capability` | `capability` |
//! | | `deserved` | `nominal`, in the implicit cohort `volcano` of all Volcano queues that have one (idle deserved capacity is lent and reclaimed, as Volcano's capacity plugin does) |
//! | | `guarantee.resource` | `lending_limit = deserved - guarantee` (the guarantee is never lent) |
//! | | `parent`, the `volcano.sh/hierarchy` annotations, `priority`, `reclaimable: false`, `dequeueStrategy: fifo`, `affinity`, `extendClusters` | refused |
//!
//! The controller keeps the queue objects applied to it (in its store), builds one
//! [`QueueSet`] from them in the order they were first applied, adds the set's queues to
//! its policy file's, and gives the result to its scheduler, which replaces its quotas with
//! the running gangs kept (`cadre_core::scheduler::Event::SetQuotas`). This module only
//! produces the values ([`QueueSet::quota_config`], [`QueueSet::route`]) and checks what
//! holds between the objects (a ClusterQueue's ResourceFlavor must be applied:
//! [`QueueSet::check_references`]).

use crate::contract::Selector;
use crate::crd::ResourceList;
use crate::crd::kueue::{ClusterQueue, LocalQueue, ResourceFlavor, Topology};
use crate::crd::volcano::VolcanoQueue;
use crate::document::Object;
use crate::error::{K8sError, Refusals};
use crate::model::QueueRef;
use crate::names::name_of;
use crate::namespaces::{
    K8sPriorityClass, LimitRangeConfig, NamespaceObject, ObjectQuota, read_limit_range,
    read_namespace, read_priority_class, read_resource_quota,
};
use crate::pod::{HOSTNAME_LABEL, is_scheduler_key, span_of_level};
use crate::quantity::Quantity;
use crate::storage::{
    ClaimConfig, DEFAULT_CLASS_ANNOTATION, StorageClassConfig, read_claim, read_storage_class,
};
use cadre_core::quota::{NamespaceQuotaConfig, QueueConfig, QuotaAmounts, QuotaBook, QuotaConfig};
use std::collections::BTreeMap;

/// How a queue object is named, as `kubectl apply` names objects: its kind as manifests
/// write it (`Queue` for Volcano's), its namespace (LocalQueues only; empty for the
/// cluster-scoped kinds) and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueObjectName {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// The name of a queue object (`None` for other objects); LocalQueues that name no
/// namespace are in `default_namespace`.
pub fn queue_object_name(object: &Object, default_namespace: &str) -> Option<QueueObjectName> {
    let namespace = match object {
        Object::LocalQueue(_)
        | Object::ResourceQuota(_)
        | Object::LimitRange(_)
        | Object::PersistentVolumeClaim(_)
        | Object::Service(_)
        | Object::ConfigMap(_)
        | Object::Secret(_) => object
            .metadata()
            .namespace
            .clone()
            .unwrap_or_else(|| default_namespace.to_string()),
        Object::ResourceFlavor(_)
        | Object::ClusterQueue(_)
        | Object::Topology(_)
        | Object::VolcanoQueue(_)
        | Object::PriorityClass(_)
        | Object::Namespace(_)
        | Object::StorageClass(_) => String::new(),
        _ => return None,
    };
    Some(QueueObjectName {
        kind: object.kind(),
        namespace,
        name: object.metadata().name.clone().unwrap_or_default(),
    })
}

/// The implicit cohort of Volcano queues that state a `deserved` share.
pub const VOLCANO_COHORT: &str = "volcano";

/// A ResourceFlavor: the nodes a queue's quota is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlavorConfig {
    pub name: String,
    /// The labels its nodes carry; a job admitted through a queue of this flavor runs on
    /// such nodes.
    pub node_labels: Vec<(String, String)>,
    /// Its Topology, by name.
    pub topology: Option<String>,
}

/// A queue and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K8sQueue {
    pub config: QueueConfig,
    /// Its ResourceFlavor (ClusterQueues).
    pub flavor: Option<String>,
    /// `ClusterQueue` or `Queue (scheduling.volcano.sh)`.
    pub source: &'static str,
    /// A ClusterQueue's `namespaceSelector`: the namespaces whose LocalQueues' workloads it
    /// admits (matched against their Namespace objects' labels); `None`: every namespace.
    pub namespace_selector: Option<Selector>,
}

/// A LocalQueue: the queue name a namespace's jobs give, and the ClusterQueue it feeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalQueueRoute {
    pub namespace: String,
    pub name: String,
    pub cluster_queue: String,
}

/// The queue objects applied so far, as cadre queues, with the namespace objects beside
/// them (PriorityClasses, Namespaces, ResourceQuotas, LimitRanges: see
/// [`crate::namespaces`]). Applying an object of a kind and name already present replaces
/// it, as `kubectl apply` does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueSet {
    pub queues: Vec<K8sQueue>,
    pub flavors: Vec<FlavorConfig>,
    pub local_queues: Vec<LocalQueueRoute>,
    /// Topologies by name: their node-label levels, coarsest first.
    pub topologies: BTreeMap<String, Vec<String>>,
    pub priority_classes: Vec<K8sPriorityClass>,
    pub namespaces: Vec<NamespaceObject>,
    pub resource_quotas: Vec<NamespaceQuotaConfig>,
    /// The ResourceQuotas' object counts, in the same order.
    pub object_quotas: Vec<ObjectQuota>,
    /// StorageClasses and PersistentVolumeClaims (see [`crate::storage`]).
    pub storage_classes: Vec<StorageClassConfig>,
    pub claims: Vec<ClaimConfig>,
    /// Services, ConfigMaps and Secrets applied on their own, for the workloads applied
    /// after them (see [`crate::contract::attach_services`], [`crate::contract::attach_config`]).
    pub services: Vec<crate::service::Service>,
    pub config_maps: Vec<crate::config::ConfigMap>,
    pub secrets: Vec<crate::config::Secret>,
    pub limit_ranges: Vec<LimitRangeConfig>,
}

fn amounts(list: &ResourceList, path: &str, r: &mut Refusals) -> QuotaAmounts {
    let mut out = QuotaAmounts::UNLIMITED;
    for (name, q) in list {
        quota_component(&mut out, name, &q.0, &format!("{path}[{name}]"), r);
    }
    out
}

fn quota_component(out: &mut QuotaAmounts, name: &str, value: &str, path: &str, r: &mut Refusals) {
    let q = match Quantity::parse(value) {
        Ok(q) => q,
        Err(e) => {
            r.refuse(path, e.to_string());
            return;
        }
    };
    let fit = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let add = |slot: &mut Option<u64>, v: u64| *slot = Some(slot.unwrap_or(0).saturating_add(v));
    match name {
        "cpu" => add(&mut out.cpus, fit(q.ceil())),
        "memory" => add(&mut out.mem_mib, fit(q.ceil_mib())),
        "nvidia.com/gpu" => add(&mut out.gpu_milli, fit(q.ceil_milli())),
        n if n.starts_with("rdma/") => add(&mut out.nics, fit(q.ceil())),
        n => r.refuse(
            path,
            format!(
                "quota on `{n}` is not supported: cadre's quotas count cpu, memory, \
                 nvidia.com/gpu (MIG devices included) and rdma/* NICs"
            ),
        ),
    }
}

impl QueueSet {
    /// Applies one object (`default_namespace`: the namespace of a namespaced object that
    /// names none); objects that are neither queue nor namespace objects are refused.
    pub fn apply(&mut self, object: &Object) -> Result<(), K8sError> {
        self.apply_in(object, "default")
    }

    /// [`QueueSet::apply`] with the namespace of the objects that name none.
    pub fn apply_in(&mut self, object: &Object, default_namespace: &str) -> Result<(), K8sError> {
        let describe = object.describe();
        let mut r = Refusals::default();
        match object {
            Object::PriorityClass(p) => {
                let class = read_priority_class(p, &mut r);
                if class.global_default
                    && let Some(other) = self
                        .priority_classes
                        .iter()
                        .find(|c| c.global_default && c.config.name != class.config.name)
                {
                    r.refuse(
                        "globalDefault",
                        format!(
                            "Invalid value: true: PriorityClass {} is already marked as default. \
                             Only one default can exist",
                            other.config.name
                        ),
                    );
                }
                r.finish(&describe, ())?;
                self.priority_classes
                    .retain(|c| c.config.name != class.config.name);
                self.priority_classes.push(class);
            }
            Object::Namespace(n) => {
                let ns = read_namespace(n, &mut r);
                r.finish(&describe, ())?;
                self.namespaces.retain(|x| x.name != ns.name);
                self.namespaces.push(ns);
            }
            Object::ResourceQuota(q) => {
                let (quota, objects) = read_resource_quota(q, default_namespace, &mut r);
                r.finish(&describe, ())?;
                self.resource_quotas
                    .retain(|x| !(x.namespace == quota.namespace && x.name == quota.name));
                self.resource_quotas.push(quota);
                self.object_quotas
                    .retain(|x| !(x.namespace == objects.namespace && x.name == objects.name));
                self.object_quotas.push(objects);
            }
            Object::LimitRange(l) => {
                let range = read_limit_range(l, default_namespace, &mut r);
                r.finish(&describe, ())?;
                self.limit_ranges
                    .retain(|x| !(x.namespace == range.namespace && x.name == range.name));
                self.limit_ranges.push(range);
            }
            Object::StorageClass(c) => {
                let class = read_storage_class(c, &mut r);
                if class.default
                    && let Some(other) = self
                        .storage_classes
                        .iter()
                        .find(|c| c.default && c.name != class.name)
                {
                    r.refuse(
                        format!("metadata.annotations[{DEFAULT_CLASS_ANNOTATION}]"),
                        format!(
                            "StorageClass {} is already the default; one class at most is",
                            other.name
                        ),
                    );
                }
                r.finish(&describe, ())?;
                self.storage_classes.retain(|x| x.name != class.name);
                self.storage_classes.push(class);
            }
            Object::Service(o) => {
                let o = crate::service::read_service(o, default_namespace)?;
                self.services
                    .retain(|x| !(x.namespace == o.namespace && x.name == o.name));
                self.services.push(o);
            }
            Object::ConfigMap(o) => {
                let o = crate::config::read_config_map(o, default_namespace)?;
                self.config_maps
                    .retain(|x| !(x.namespace == o.namespace && x.name == o.name));
                self.config_maps.push(o);
            }
            Object::Secret(o) => {
                let o = crate::config::read_secret(o, default_namespace)?;
                self.secrets
                    .retain(|x| !(x.namespace == o.namespace && x.name == o.name));
                self.secrets.push(o);
            }
            Object::PersistentVolumeClaim(c) => {
                let claim = read_claim(c, default_namespace, &mut r);
                r.finish(&describe, ())?;
                self.claims
                    .retain(|x| !(x.namespace == claim.namespace && x.name == claim.name));
                self.claims.push(claim);
            }
            Object::ResourceFlavor(f) => {
                let flavor = read_flavor(f, &mut r);
                r.finish(&describe, ())?;
                self.flavors.retain(|x| x.name != flavor.name);
                self.flavors.push(flavor);
            }
            Object::Topology(t) => {
                let (name, levels) = read_topology(t, &mut r);
                r.finish(&describe, ())?;
                self.topologies.insert(name, levels);
            }
            Object::LocalQueue(q) => {
                let route = read_local_queue(q, default_namespace, &mut r);
                r.finish(&describe, ())?;
                self.local_queues
                    .retain(|x| !(x.namespace == route.namespace && x.name == route.name));
                self.local_queues.push(route);
            }
            Object::ClusterQueue(q) => {
                let queue = read_cluster_queue(q, &mut r);
                self.put(queue, r, &describe)?;
            }
            Object::VolcanoQueue(q) => {
                let queue = read_volcano_queue(q, &mut r);
                self.put(queue, r, &describe)?;
            }
            _ => {
                r.refuse("kind", "not a queue or namespace object");
                return Err(r.into_error(&describe));
            }
        }
        Ok(())
    }

    fn put(&mut self, queue: K8sQueue, mut r: Refusals, describe: &str) -> Result<(), K8sError> {
        if let Some(other) = self
            .queues
            .iter()
            .find(|q| q.config.name == queue.config.name && q.source != queue.source)
        {
            r.refuse(
                "metadata.name",
                format!(
                    "a {} of this name exists; queue names are shared",
                    other.source
                ),
            );
        }
        // The core's own checks (limits only in a cohort, lending within nominal, capability
        // at least nominal), on this queue alone.
        if r.is_empty()
            && let Err(e) = QuotaBook::new(&QuotaConfig {
                queues: vec![queue.config.clone()],
                accounts: Vec::new(),
                namespaces: Vec::new(),
            })
        {
            r.refuse("spec", e.to_string());
        }
        r.finish(describe, ())?;
        self.queues.retain(|q| q.config.name != queue.config.name);
        self.queues.push(queue);
        Ok(())
    }

    /// Checks what one object asks of others: every ClusterQueue's ResourceFlavor is
    /// applied (Kueue would keep such a queue inactive; cadre refuses it, so that a
    /// queue's nodes are always known), and so is every flavor's Topology and every
    /// claim's StorageClass.
    pub fn check_references(&self) -> Result<(), K8sError> {
        let mut problems = Vec::new();
        for q in &self.queues {
            if let Some(f) = &q.flavor
                && !self.flavors.iter().any(|x| &x.name == f)
            {
                problems.push(format!(
                    "ClusterQueue `{}` uses ResourceFlavor `{f}`, which is not applied (apply \
                     it too, or first)",
                    q.config.name
                ));
            }
        }
        for c in &self.claims {
            match &c.class {
                Some(class) if self.storage_classes.iter().any(|s| &s.name == class) => {}
                Some(class) => problems.push(format!(
                    "PersistentVolumeClaim `{}` in namespace {}: storageclass.storage.k8s.io \
                     \"{class}\" not found (an administrator applies it first)",
                    c.name, c.namespace
                )),
                None => problems.push(format!(
                    "PersistentVolumeClaim `{}` in namespace {} names no storageClassName, and \
                     no StorageClass is the default",
                    c.name, c.namespace
                )),
            }
        }
        for f in &self.flavors {
            if let Some(t) = &f.topology
                && !self.topologies.contains_key(t)
            {
                problems.push(format!(
                    "ResourceFlavor `{}` names Topology `{t}`, which is not applied",
                    f.name
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(K8sError::Contract {
                what: problems.join("; "),
            })
        }
    }

    /// The cadre queue a job's [`QueueRef`] names.
    pub fn route(&self, queue: &QueueRef) -> Result<String, K8sError> {
        let err = |what: String| K8sError::Contract { what };
        match queue {
            QueueRef::Direct { queue } => {
                if self.queues.iter().any(|q| &q.config.name == queue) {
                    Ok(queue.clone())
                } else {
                    Err(err(format!("queue `{queue}` does not exist")))
                }
            }
            QueueRef::Kueue {
                namespace,
                local_queue,
            } => {
                let route = self
                    .local_queues
                    .iter()
                    .find(|l| &l.namespace == namespace && &l.name == local_queue)
                    .ok_or_else(|| {
                        err(format!(
                            "LocalQueue `{local_queue}` does not exist in namespace `{namespace}`"
                        ))
                    })?;
                let Some(cq) = self
                    .queues
                    .iter()
                    .find(|q| q.config.name == route.cluster_queue)
                else {
                    return Err(err(format!(
                        "LocalQueue `{namespace}/{local_queue}` feeds ClusterQueue `{}`, which \
                         does not exist",
                        route.cluster_queue
                    )));
                };
                if let Some(sel) = &cq.namespace_selector
                    && !sel.matches(&self.namespace_labels(namespace))
                {
                    return Err(err(format!(
                        "namespace `{namespace}` does not match the namespaceSelector of \
                         ClusterQueue `{}` (its Namespace object's labels)",
                        route.cluster_queue
                    )));
                }
                Ok(route.cluster_queue.clone())
            }
        }
    }

    /// A namespace's labels, as selectors see them: its Namespace object's, and the
    /// `kubernetes.io/metadata.name` Kubernetes gives every namespace.
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        let mut labels = self
            .namespaces
            .iter()
            .find(|n| n.name == namespace)
            .map(|n| n.labels.clone())
            .unwrap_or_default();
        labels.insert("kubernetes.io/metadata.name".into(), namespace.to_string());
        labels
    }

    /// The StorageClass of the claims that name none.
    pub fn default_storage_class(&self) -> Option<&StorageClassConfig> {
        self.storage_classes.iter().find(|c| c.default)
    }

    /// The PriorityClass every workload that names none gets (`globalDefault: true`).
    pub fn default_priority_class(&self) -> Option<&K8sPriorityClass> {
        self.priority_classes.iter().find(|c| c.global_default)
    }

    /// The node labels of queue `queue`'s flavor (empty when it has none or it is not
    /// applied).
    pub fn node_selector(&self, queue: &str) -> Vec<(String, String)> {
        self.queues
            .iter()
            .find(|q| q.config.name == queue)
            .and_then(|q| q.flavor.as_ref())
            .and_then(|f| self.flavors.iter().find(|x| &x.name == f))
            .map(|f| f.node_labels.clone())
            .unwrap_or_default()
    }

    /// The quota section for the core's policy, checked by the core.
    pub fn quota_config(&self) -> Result<QuotaConfig, K8sError> {
        let config = QuotaConfig {
            queues: self.queues.iter().map(|q| q.config.clone()).collect(),
            accounts: Vec::new(),
            // A quota of object counts alone limits no resource.
            namespaces: self
                .resource_quotas
                .iter()
                .filter(|q| q.hard != QuotaAmounts::UNLIMITED)
                .cloned()
                .collect(),
        };
        QuotaBook::new(&config).map_err(|e| K8sError::Contract {
            what: format!("the queues do not make a valid quota configuration: {e}"),
        })?;
        Ok(config)
    }
}

fn refuse_scheduler_annotations(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    r: &mut Refusals,
) {
    for k in meta.annotations.iter().flatten().map(|(k, _)| k) {
        if k == "volcano.sh/hierarchy" || k == "volcano.sh/hierarchy-weights" {
            r.refuse(
                format!("metadata.annotations[{k}]"),
                "hierarchical queues (Volcano's hdrf) are not supported: cadre's queues are \
                 flat, sharing through cohorts",
            );
        } else if is_scheduler_key(k) {
            r.refuse(format!("metadata.annotations[{k}]"), "not supported");
        }
    }
}

fn read_flavor(f: &ResourceFlavor, r: &mut Refusals) -> FlavorConfig {
    refuse_scheduler_annotations(&f.metadata, r);
    let name = name_of(&f.metadata, r);
    if f.spec.node_taints.as_ref().is_some_and(|t| !t.is_empty()) {
        r.refuse(
            "spec.nodeTaints",
            "cadre's nodes carry no taints, so a flavor cannot keep jobs off them by taints",
        );
    }
    // spec.tolerations are injected into admitted pods; with no taints they change nothing.
    FlavorConfig {
        name,
        node_labels: f
            .spec
            .node_labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        topology: f.spec.topology_name.clone(),
    }
}

fn read_topology(t: &Topology, r: &mut Refusals) -> (String, Vec<String>) {
    let name = name_of(&t.metadata, r);
    let levels: Vec<String> = t.spec.levels.iter().map(|l| l.node_label.clone()).collect();
    if levels.is_empty() {
        r.refuse("spec.levels", "a topology needs levels");
    }
    for (i, l) in levels.iter().enumerate() {
        if span_of_level(l).is_none() {
            r.refuse(
                format!("spec.levels[{i}].nodeLabel"),
                format!(
                    "`{l}` has no counterpart in cadre's topology, whose levels are the NVLink \
                     block (a `...block` label), the leaf switch (`...rack`) and the node \
                     (`{HOSTNAME_LABEL}`)"
                ),
            );
        }
    }
    (name, levels)
}

fn read_local_queue(q: &LocalQueue, default_namespace: &str, r: &mut Refusals) -> LocalQueueRoute {
    refuse_scheduler_annotations(&q.metadata, r);
    let name = name_of(&q.metadata, r);
    if q.spec.fair_sharing.is_some() {
        r.refuse(
            "spec.fairSharing",
            "fair sharing between LocalQueues (Kueue's admission fair sharing) is not \
             supported; cadre's fair share is between accounts",
        );
    }
    if q.spec.stop_policy.as_deref().is_some_and(|p| p != "None") {
        r.refuse("spec.stopPolicy", "stopping a queue is not supported");
    }
    let cluster_queue = q.spec.cluster_queue.clone().unwrap_or_else(|| {
        r.refuse("spec.clusterQueue", "missing");
        String::new()
    });
    LocalQueueRoute {
        namespace: q
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| default_namespace.to_string()),
        name,
        cluster_queue,
    }
}

fn read_cluster_queue(q: &ClusterQueue, r: &mut Refusals) -> K8sQueue {
    refuse_scheduler_annotations(&q.metadata, r);
    let name = name_of(&q.metadata, r);
    let s = &q.spec;
    let v1beta1 = q.api_version.ends_with("/v1beta1");
    let cohort = match (v1beta1, &s.cohort, &s.cohort_name) {
        (true, c, None) => c.clone(),
        (false, None, c) => c.clone(),
        (true, _, Some(_)) => {
            r.refuse("spec.cohortName", "v1beta1 names the cohort `cohort`");
            None
        }
        (false, Some(_), _) => {
            r.refuse("spec.cohort", "v1beta2 names the cohort `cohortName`");
            None
        }
    };
    if s.queueing_strategy
        .as_deref()
        .is_some_and(|x| x != "BestEffortFIFO")
    {
        r.refuse(
            "spec.queueingStrategy",
            "StrictFIFO per queue is not supported: cadre's queues are best-effort FIFO with \
             backfill (strict order is the whole cluster's policy setting `strict_order`)",
        );
    }
    let namespace_selector = match s
        .namespace_selector
        .as_ref()
        .map(Selector::of_label_selector)
    {
        None => None,
        Some(Ok(sel)) => Some(sel),
        Some(Err(e)) => {
            r.refuse("spec.namespaceSelector", e);
            None
        }
    };
    if let Some(p) = &s.preemption {
        if p.reclaim_within_cohort
            .as_deref()
            .is_some_and(|x| x != "Never")
        {
            r.refuse(
                "spec.preemption.reclaimWithinCohort",
                "reclaiming lent quota is cadre's cluster-wide policy setting \
                 `[preemption] reclaim_within_cohort`, not a queue's",
            );
        }
        if p.borrow_within_cohort.is_some() {
            r.refuse("spec.preemption.borrowWithinCohort", "not supported");
        }
        if p.within_cluster_queue
            .as_deref()
            .is_some_and(|x| x != "Never")
        {
            r.refuse(
                "spec.preemption.withinClusterQueue",
                "preemption by priority is decided by cadre's priority classes, cluster-wide",
            );
        }
    }
    if s.admission_checks.as_ref().is_some_and(|a| !a.is_empty())
        || s.admission_checks_strategy.is_some()
    {
        r.refuse("spec.admissionChecks", "admission checks are not supported");
    }
    if s.stop_policy.as_deref().is_some_and(|p| p != "None") {
        r.refuse("spec.stopPolicy", "stopping a queue is not supported");
    }
    if s.admission_scope.is_some() {
        r.refuse(
            "spec.admissionScope",
            "admission fair sharing between LocalQueues is not supported; cadre's fair share \
             is between accounts",
        );
    }
    let mut weight = 1;
    if let Some(w) = s.fair_sharing.as_ref().and_then(|f| f.weight.as_ref()) {
        match Quantity::parse(&w.0)
            .ok()
            .and_then(|q| q.whole())
            .map(u32::try_from)
        {
            Some(Ok(w)) if w >= 1 => weight = w,
            _ => r.refuse(
                "spec.fairSharing.weight",
                format!("`{}`: cadre's queue weights are whole numbers from 1", w.0),
            ),
        }
    }
    let mut flavor: Option<String> = None;
    let mut nominal = QuotaAmounts::UNLIMITED;
    let mut borrowing = QuotaAmounts::UNLIMITED;
    let mut lending = QuotaAmounts::UNLIMITED;
    for (gi, g) in s.resource_groups.iter().flatten().enumerate() {
        for (fi, f) in g.flavors.iter().enumerate() {
            let fpath = format!("spec.resourceGroups[{gi}].flavors[{fi}]");
            match &flavor {
                Some(first) if first != &f.name => {
                    r.refuse(
                        format!("{fpath}.name"),
                        format!(
                            "flavor `{}` after `{first}`: cadre's queues have one flavor (several \
                             would need a per-flavor quota, which cadre does not keep)",
                            f.name
                        ),
                    );
                    continue;
                }
                _ => flavor = Some(f.name.clone()),
            }
            for (ri, res) in f.resources.iter().enumerate() {
                let rpath = format!("{fpath}.resources[{ri}]");
                if !g.covered_resources.contains(&res.name) {
                    r.refuse(
                        format!("{rpath}.name"),
                        "not among the group's coveredResources",
                    );
                }
                quota_component(
                    &mut nominal,
                    &res.name,
                    &res.nominal_quota.0,
                    &format!("{rpath}.nominalQuota"),
                    r,
                );
                if let Some(b) = &res.borrowing_limit {
                    quota_component(
                        &mut borrowing,
                        &res.name,
                        &b.0,
                        &format!("{rpath}.borrowingLimit"),
                        r,
                    );
                }
                if let Some(l) = &res.lending_limit {
                    quota_component(
                        &mut lending,
                        &res.name,
                        &l.0,
                        &format!("{rpath}.lendingLimit"),
                        r,
                    );
                }
            }
        }
    }
    let some = |a: QuotaAmounts| (a != QuotaAmounts::UNLIMITED).then_some(a);
    K8sQueue {
        config: QueueConfig {
            name,
            cohort,
            nominal,
            borrowing_limit: some(borrowing),
            lending_limit: some(lending),
            capability: None,
            weight,
            accounts: Vec::new(),
            max_per_user: None,
            max_running_jobs_per_user: None,
        },
        flavor,
        source: "ClusterQueue",
        namespace_selector,
    }
}

fn read_volcano_queue(q: &VolcanoQueue, r: &mut Refusals) -> K8sQueue {
    refuse_scheduler_annotations(&q.metadata, r);
    let name = name_of(&q.metadata, r);
    let s = &q.spec;
    let weight = match s.weight.map(u32::try_from) {
        None => 1,
        Some(Ok(w)) if (1..=65535).contains(&w) => w,
        Some(_) => {
            r.refuse("spec.weight", "Volcano queue weights are 1 to 65535");
            1
        }
    };
    let capability = s
        .capability
        .as_ref()
        .map(|c| amounts(c, "spec.capability", r));
    let deserved = s.deserved.as_ref().map(|d| amounts(d, "spec.deserved", r));
    let guarantee = s
        .guarantee
        .as_ref()
        .and_then(|g| g.resource.as_ref())
        .map(|g| amounts(g, "spec.guarantee.resource", r));
    let lending = match (&deserved, &guarantee) {
        (_, None) => None,
        (None, Some(_)) => {
            r.refuse(
                "spec.guarantee",
                "a guarantee is kept out of the queue's deserved share, so it needs `deserved`",
            );
            None
        }
        (Some(d), Some(g)) => {
            let sub = |d: Option<u64>, g: Option<u64>, what: &str, r: &mut Refusals| match (d, g) {
                (Some(d), Some(g)) if g <= d => Some(d - g),
                (_, None) => None,
                _ => {
                    r.refuse(
                        format!("spec.guarantee.resource[{what}]"),
                        "a guarantee above the deserved share",
                    );
                    None
                }
            };
            Some(QuotaAmounts {
                cpus: sub(d.cpus, g.cpus, "cpu", r),
                mem_mib: sub(d.mem_mib, g.mem_mib, "memory", r),
                gpu_milli: sub(d.gpu_milli, g.gpu_milli, "nvidia.com/gpu", r),
                nics: sub(d.nics, g.nics, "rdma", r),
            })
        }
    };
    if s.reclaimable == Some(false) {
        r.refuse(
            "spec.reclaimable",
            "a queue whose borrowed resources cannot be reclaimed is not supported",
        );
    }
    if s.parent.as_deref().is_some_and(|p| p != "root") {
        r.refuse(
            "spec.parent",
            "hierarchical queues are not supported: cadre's queues are flat, sharing through cohorts",
        );
    }
    if s.priority.is_some_and(|p| p != 0) {
        r.refuse("spec.priority", "queue priorities are not supported");
    }
    if s.dequeue_strategy
        .as_deref()
        .is_some_and(|d| d != "traverse")
    {
        r.refuse(
            "spec.dequeueStrategy",
            "strict FIFO per queue is not supported (cadre's queues are traversed with backfill)",
        );
    }
    if s.affinity.is_some() {
        r.refuse("spec.affinity", "queue affinity to nodes is not supported");
    }
    if s.extend_clusters.is_some() {
        r.refuse("spec.extendClusters", "cadre runs one cluster");
    }
    let cohort = deserved.is_some().then(|| VOLCANO_COHORT.to_string());
    K8sQueue {
        config: QueueConfig {
            name,
            cohort,
            nominal: deserved.unwrap_or(QuotaAmounts::UNLIMITED),
            borrowing_limit: None,
            lending_limit: lending,
            capability,
            weight,
            accounts: Vec::new(),
            max_per_user: None,
            max_running_jobs_per_user: None,
        },
        flavor: None,
        source: "Queue (scheduling.volcano.sh)",
        namespace_selector: None,
    }
}
