//! Volcano: `batch.volcano.sh/v1alpha1` Job and `scheduling.volcano.sh/v1beta1` Queue.

use super::{ObjectMeta, Opaque, ResourceList};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `batch.volcano.sh/v1alpha1` Job.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoJob {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VolcanoJobSpec,
    #[serde(default)]
    pub status: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoJobSpec {
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub min_available: Option<i32>,
    #[serde(default)]
    pub volumes: Option<Vec<Opaque>>,
    #[serde(default)]
    pub tasks: Vec<TaskSpec>,
    #[serde(default)]
    pub policies: Option<Vec<LifecyclePolicy>>,
    /// Plugin name to its arguments (`ssh: []`, `svc: ["--publish-not-ready-addresses"]`).
    #[serde(default)]
    pub plugins: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    pub running_estimate: Option<Opaque>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub max_retry: Option<i32>,
    #[serde(default)]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub min_success: Option<i32>,
    #[serde(default)]
    pub network_topology: Option<NetworkTopology>,
}

/// One task (a replica type) of a Volcano Job.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub min_available: Option<i32>,
    #[serde(default)]
    pub template: PodTemplateSpec,
    #[serde(default)]
    pub policies: Option<Vec<LifecyclePolicy>>,
    #[serde(default)]
    pub topology_policy: Option<String>,
    #[serde(default)]
    pub max_retry: Option<i32>,
    #[serde(default)]
    pub depends_on: Option<Opaque>,
    #[serde(default)]
    pub partition_policy: Option<Opaque>,
}

/// An event (or events) and the action taken on it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecyclePolicy {
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub event: Option<String>,
    #[serde(default)]
    pub events: Option<Vec<String>>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub timeout: Option<String>,
}

/// `networkTopology` of a Job (HyperNode tiers).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopology {
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub highest_tier_allowed: Option<i32>,
    #[serde(default)]
    pub highest_tier_name: Option<String>,
}

/// `scheduling.volcano.sh/v1beta1` Queue.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoQueue {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VolcanoQueueSpec,
    #[serde(default)]
    pub status: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoQueueSpec {
    #[serde(default)]
    pub weight: Option<i32>,
    #[serde(default)]
    pub capability: Option<ResourceList>,
    #[serde(default)]
    pub deserved: Option<ResourceList>,
    #[serde(default)]
    pub guarantee: Option<Guarantee>,
    #[serde(default)]
    pub reclaimable: Option<bool>,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub dequeue_strategy: Option<String>,
    #[serde(default)]
    pub affinity: Option<Opaque>,
    #[serde(default)]
    pub extend_clusters: Option<Opaque>,
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Guarantee {
    #[serde(default)]
    pub resource: Option<ResourceList>,
}
