//! cadre-k8s: Kubernetes manifests into cadre gangs, with the naming, environment and
//! hostfile contracts the workloads inside them rely on.
//!
//! This first part reads multi-document YAML into typed objects ([`document`]; Kubernetes'
//! own kinds through `k8s-openapi`, the custom resources through [`crd`]) and Kubernetes
//! quantities ([`quantity`]). Everything here is pure.

pub mod crd;
pub mod document;
pub mod error;
pub mod quantity;

pub use document::{Object, SUPPORTED_KINDS, parse_documents, parse_numbered};
pub use error::{K8sError, Problem};
