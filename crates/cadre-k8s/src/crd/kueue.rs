//! Kueue: `kueue.x-k8s.io` ResourceFlavor, ClusterQueue, LocalQueue and Topology, in
//! versions `v1beta1` and `v1beta2` (which renamed ClusterQueue's `cohort` to `cohortName`;
//! Topology is also served as `v1alpha1`). The same structs read both versions; the
//! translation checks that each version uses its own field names.

use super::{K8sQuantity, ObjectMeta, Opaque};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use std::collections::BTreeMap;

/// ResourceFlavor: a kind of node, by its labels.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavor {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ResourceFlavorSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    #[serde(default)]
    pub node_labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub node_taints: Option<Vec<Taint>>,
    #[serde(default)]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default)]
    pub topology_name: Option<String>,
}

/// ClusterQueue: quotas per flavor, in a cohort.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueue {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterQueueSpec,
    #[serde(default)]
    pub status: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    #[serde(default)]
    pub resource_groups: Option<Vec<ResourceGroup>>,
    /// v1beta1's name of `cohortName`.
    #[serde(default)]
    pub cohort: Option<String>,
    #[serde(default)]
    pub cohort_name: Option<String>,
    #[serde(default)]
    pub queueing_strategy: Option<String>,
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    pub flavor_fungibility: Option<Opaque>,
    #[serde(default)]
    pub preemption: Option<ClusterQueuePreemption>,
    #[serde(default)]
    pub admission_checks: Option<Vec<String>>,
    #[serde(default)]
    pub admission_checks_strategy: Option<Opaque>,
    #[serde(default)]
    pub stop_policy: Option<String>,
    #[serde(default)]
    pub fair_sharing: Option<FairSharing>,
    #[serde(default)]
    pub admission_scope: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    #[serde(default)]
    pub covered_resources: Vec<String>,
    #[serde(default)]
    pub flavors: Vec<FlavorQuotas>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub resources: Vec<ResourceQuota>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    #[serde(default)]
    pub name: String,
    pub nominal_quota: K8sQuantity,
    #[serde(default)]
    pub borrowing_limit: Option<K8sQuantity>,
    #[serde(default)]
    pub lending_limit: Option<K8sQuantity>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueuePreemption {
    #[serde(default)]
    pub reclaim_within_cohort: Option<String>,
    #[serde(default)]
    pub borrow_within_cohort: Option<Opaque>,
    #[serde(default)]
    pub within_cluster_queue: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FairSharing {
    #[serde(default)]
    pub weight: Option<K8sQuantity>,
}

/// LocalQueue: a namespace's door to a ClusterQueue.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueue {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: LocalQueueSpec,
    #[serde(default)]
    pub status: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    #[serde(default)]
    pub cluster_queue: Option<String>,
    #[serde(default)]
    pub stop_policy: Option<String>,
    #[serde(default)]
    pub fair_sharing: Option<FairSharing>,
}

/// Topology: the node labels of the levels of a topology, coarsest first.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: TopologySpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    #[serde(default)]
    pub levels: Vec<TopologyLevel>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    #[serde(default)]
    pub node_label: String,
}
