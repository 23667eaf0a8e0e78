//! JobSet: `jobset.x-k8s.io/v1alpha2`, a group of replicated Jobs run together (the base
//! of Kubeflow Trainer v2).

use super::{ObjectMeta, Opaque};
use k8s_openapi::api::batch::v1::JobTemplateSpec;
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSet {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: JobSetSpec,
    #[serde(default)]
    pub status: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    #[serde(default)]
    pub replicated_jobs: Vec<ReplicatedJob>,
    #[serde(default)]
    pub network: Option<Network>,
    #[serde(default)]
    pub success_policy: Option<SuccessPolicy>,
    #[serde(default)]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(default)]
    pub startup_policy: Option<StartupPolicy>,
    #[serde(default)]
    pub suspend: Option<bool>,
    #[serde(default)]
    pub coordinator: Option<Opaque>,
    #[serde(default)]
    pub managed_by: Option<String>,
    #[serde(default)]
    pub ttl_seconds_after_finished: Option<i32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub group_name: Option<String>,
    #[serde(default)]
    pub template: JobTemplateSpec,
    #[serde(default)]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub depends_on: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    #[serde(default, rename = "enableDNSHostnames")]
    pub enable_dns_hostnames: Option<bool>,
    #[serde(default)]
    pub subdomain: Option<String>,
    #[serde(default)]
    pub publish_not_ready_addresses: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub target_replicated_jobs: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    #[serde(default)]
    pub max_restarts: Option<i32>,
    #[serde(default)]
    pub restart_strategy: Option<String>,
    #[serde(default)]
    pub rules: Option<Vec<Opaque>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartupPolicy {
    #[serde(default)]
    pub startup_policy_order: Option<String>,
}
