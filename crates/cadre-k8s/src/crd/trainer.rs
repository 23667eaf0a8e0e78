//! Kubeflow Trainer v2: `trainer.kubeflow.org/v1alpha1` ClusterTrainingRuntime, the
//! template a TrainJob is run from (a JobSet spec plus an ML policy).

use super::jobset::JobSetSpec;
use super::{ObjectMeta, Opaque};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTrainingRuntime {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: TrainingRuntimeSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntimeSpec {
    #[serde(default)]
    pub ml_policy: Option<MlPolicy>,
    #[serde(default)]
    pub pod_group_policy: Option<Opaque>,
    #[serde(default)]
    pub template: JobSetTemplateSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetTemplateSpec {
    #[serde(default)]
    pub metadata: Option<ObjectMeta>,
    #[serde(default)]
    pub spec: JobSetSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MlPolicy {
    #[serde(default)]
    pub num_nodes: Option<i32>,
    #[serde(default)]
    pub torch: Option<TorchMlPolicy>,
    #[serde(default)]
    pub mpi: Option<MpiMlPolicy>,
    #[serde(default)]
    pub jax: Option<Opaque>,
    #[serde(default)]
    pub xgboost: Option<Opaque>,
    #[serde(default)]
    pub flux: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TorchMlPolicy {
    #[serde(default)]
    pub num_proc_per_node: Option<IntOrString>,
    #[serde(default)]
    pub elastic_policy: Option<Opaque>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiMlPolicy {
    #[serde(default)]
    pub num_proc_per_node: Option<i32>,
    #[serde(default)]
    pub mpi_implementation: Option<String>,
    #[serde(default)]
    pub ssh_auth_mount_path: Option<String>,
    #[serde(default)]
    pub run_launcher_as_node: Option<bool>,
}
