//! Typed structs for the custom resources cadre reads (Kubernetes' own kinds come from
//! `k8s-openapi`).
//!
//! They follow the projects' Go API types field for field, with the JSON names of the
//! manifests. Every field of a kind's schema is declared, so that a field missing here is
//! reported as unknown ([`crate::document`]) rather than dropped; fields that cadre always
//! refuses when they are set, and whose shape it therefore never reads, are kept as an
//! [`Opaque`] YAML value. Nothing here decides what a field means: that is
//! [`crate::translate`]'s and [`crate::queues`]'s.
//!
//! Sources: kubeflow/mpi-operator `pkg/apis/kubeflow/v2beta1/types.go`; kubeflow/trainer
//! `release-1.9` `pkg/apis/kubeflow.org/v1/{common,pytorch}_types.go` and
//! `pkg/apis/trainer/v1alpha1/trainingruntime_types.go`; volcano-sh/apis
//! `pkg/apis/{batch/v1alpha1/job.go,scheduling/v1beta1/types.go}`; kubernetes-sigs/kueue
//! `apis/kueue/v1beta2`; kubernetes-sigs/jobset `api/jobset/v1alpha2/jobset_types.go`.
//!
//! [`crate::translate`]: mod@crate::translate

pub mod jobset;
pub mod kubeflow;
pub mod kueue;
pub mod trainer;
pub mod volcano;

/// A value whose shape cadre does not read, because the field is refused whenever it is set.
pub type Opaque = yaml_serde::Value;

pub use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Resource amounts by name (`cpu: 8`, `nvidia.com/gpu: 1`).
pub type ResourceList = std::collections::BTreeMap<String, K8sQuantity>;
