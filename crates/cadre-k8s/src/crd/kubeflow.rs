//! Kubeflow: `kubeflow.org/v2beta1` MPIJob (MPI Operator) and `kubeflow.org/v1` PyTorchJob
//! (Training Operator), with their shared `runPolicy` and replica specs.

use super::{ObjectMeta, Opaque, ResourceList};
use k8s_openapi::api::autoscaling::v2::MetricSpec;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;

/// `runPolicy`, shared by the Kubeflow kinds.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    #[serde(default)]
    pub clean_pod_policy: Option<String>,
    #[serde(default)]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default)]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default)]
    pub backoff_limit: Option<i32>,
    #[serde(default)]
    pub scheduling_policy: Option<SchedulingPolicy>,
    #[serde(default)]
    pub suspend: Option<bool>,
    #[serde(default)]
    pub managed_by: Option<String>,
}

/// `runPolicy.schedulingPolicy`: gang hints for Volcano or scheduler-plugins.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    #[serde(default)]
    pub min_available: Option<i32>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub min_resources: Option<ResourceList>,
    #[serde(default)]
    pub priority_class: Option<String>,
    #[serde(default)]
    pub schedule_timeout_seconds: Option<i32>,
}

/// One replica type (`Launcher`, `Worker`, `Master`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    #[serde(default)]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub template: PodTemplateSpec,
    #[serde(default)]
    pub restart_policy: Option<String>,
}

/// `kubeflow.org/v2beta1` MPIJob.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiJob {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MpiJobSpec,
    /// Set by the cluster, never read.
    #[serde(default)]
    pub status: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiJobSpec {
    #[serde(default)]
    pub slots_per_worker: Option<i32>,
    #[serde(default)]
    pub run_launcher_as_worker: Option<bool>,
    #[serde(default)]
    pub run_policy: RunPolicy,
    #[serde(default)]
    pub mpi_replica_specs: MpiReplicaSpecs,
    #[serde(default)]
    pub ssh_auth_mount_path: Option<String>,
    #[serde(default)]
    pub launcher_creation_policy: Option<String>,
    #[serde(default)]
    pub mpi_implementation: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct MpiReplicaSpecs {
    #[serde(default, rename = "Launcher")]
    pub launcher: Option<ReplicaSpec>,
    #[serde(default, rename = "Worker")]
    pub worker: Option<ReplicaSpec>,
}

/// `kubeflow.org/v1` PyTorchJob.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PyTorchJob {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PyTorchJobSpec,
    #[serde(default)]
    pub status: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PyTorchJobSpec {
    #[serde(default)]
    pub run_policy: RunPolicy,
    #[serde(default)]
    pub elastic_policy: Option<ElasticPolicy>,
    #[serde(default)]
    pub pytorch_replica_specs: PyTorchReplicaSpecs,
    /// `auto`, `cpu`, `gpu` or a number, as a string.
    #[serde(default)]
    pub nproc_per_node: Option<IntOrString>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct PyTorchReplicaSpecs {
    #[serde(default, rename = "Master")]
    pub master: Option<ReplicaSpec>,
    #[serde(default, rename = "Worker")]
    pub worker: Option<ReplicaSpec>,
}

/// `elasticPolicy` (torchrun elastic).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    #[serde(default)]
    pub min_replicas: Option<i32>,
    #[serde(default)]
    pub max_replicas: Option<i32>,
    #[serde(default)]
    pub rdzv_backend: Option<String>,
    #[serde(default)]
    pub rdzv_port: Option<i32>,
    #[serde(default)]
    pub rdzv_host: Option<String>,
    #[serde(default)]
    pub rdzv_id: Option<String>,
    #[serde(default)]
    pub rdzv_conf: Option<Vec<RdzvConf>>,
    #[serde(default)]
    pub standalone: Option<bool>,
    /// Deprecated by `spec.nprocPerNode`.
    #[serde(default)]
    pub n_proc_per_node: Option<i32>,
    #[serde(default)]
    pub max_restarts: Option<i32>,
    /// Autoscaling (HPA) metrics.
    #[serde(default)]
    pub metrics: Option<Vec<MetricSpec>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct RdzvConf {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
}
