//! Multi-document YAML into typed objects.
//!
//! **Given** a file's text (documents separated by `---`). **Decided**: which kind each
//! non-empty document is (by `apiVersion` and `kind`), and its typed value. **Must hold**:
//! every field of a document is either read into the typed value or reported, by its path,
//! as unknown: serde's default of dropping unknown fields is turned into an error here
//! (through `serde_ignored`), for Kubernetes' own types as for the custom resources, so that
//! a misspelt or unsupported field never goes unnoticed. Empty documents (a trailing `---`,
//! a document of comments) are skipped; YAML merge keys (`<<:`) are applied as Kubernetes'
//! YAML reader does. A text that nests collections deeper than [`MAX_NESTING_DEPTH`] is
//! refused before it is parsed ([`crate::nesting`]).

use crate::crd::{jobset, kubeflow, kueue, trainer, volcano};
use crate::error::{K8sError, Problem};
use crate::nesting::{MAX_NESTING_DEPTH, find_too_deep};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// One object of a supported kind.
#[derive(Clone, Debug)]
pub enum Object {
    /// `batch/v1` Job (plain or Indexed).
    Job(Box<k8s_openapi::api::batch::v1::Job>),
    /// `jobset.x-k8s.io/v1alpha2` JobSet.
    JobSet(Box<jobset::JobSet>),
    /// `kubeflow.org/v2beta1` MPIJob.
    MpiJob(Box<kubeflow::MpiJob>),
    /// `kubeflow.org/v1` PyTorchJob.
    PyTorchJob(Box<kubeflow::PyTorchJob>),
    /// `batch.volcano.sh/v1alpha1` Job.
    VolcanoJob(Box<volcano::VolcanoJob>),
    /// `scheduling.volcano.sh/v1beta1` Queue.
    VolcanoQueue(Box<volcano::VolcanoQueue>),
    /// `kueue.x-k8s.io` ResourceFlavor.
    ResourceFlavor(Box<kueue::ResourceFlavor>),
    /// `kueue.x-k8s.io` ClusterQueue.
    ClusterQueue(Box<kueue::ClusterQueue>),
    /// `kueue.x-k8s.io` LocalQueue.
    LocalQueue(Box<kueue::LocalQueue>),
    /// `kueue.x-k8s.io` Topology.
    Topology(Box<kueue::Topology>),
    /// `trainer.kubeflow.org/v1alpha1` ClusterTrainingRuntime.
    ClusterTrainingRuntime(Box<trainer::ClusterTrainingRuntime>),
    /// `v1` Service (see [`crate::service`]).
    Service(Box<k8s_openapi::api::core::v1::Service>),
    /// `v1` ConfigMap (see [`crate::config`]).
    ConfigMap(Box<k8s_openapi::api::core::v1::ConfigMap>),
    /// `v1` Secret (see [`crate::config`]).
    Secret(Box<k8s_openapi::api::core::v1::Secret>),
    /// `scheduling.k8s.io/v1` PriorityClass (see [`crate::namespaces`]).
    PriorityClass(Box<k8s_openapi::api::scheduling::v1::PriorityClass>),
    /// `v1` Namespace.
    Namespace(Box<k8s_openapi::api::core::v1::Namespace>),
    /// `v1` ResourceQuota.
    ResourceQuota(Box<k8s_openapi::api::core::v1::ResourceQuota>),
    /// `v1` LimitRange.
    LimitRange(Box<k8s_openapi::api::core::v1::LimitRange>),
    /// `storage.k8s.io/v1` StorageClass (see [`crate::storage`]).
    StorageClass(Box<k8s_openapi::api::storage::v1::StorageClass>),
    /// `v1` PersistentVolumeClaim.
    PersistentVolumeClaim(Box<k8s_openapi::api::core::v1::PersistentVolumeClaim>),
}

impl Object {
    /// The kind, as manifests write it (`Job` for both batch/v1 and Volcano Jobs).
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Job(_) | Object::VolcanoJob(_) => "Job",
            Object::JobSet(_) => "JobSet",
            Object::MpiJob(_) => "MPIJob",
            Object::PyTorchJob(_) => "PyTorchJob",
            Object::VolcanoQueue(_) => "Queue",
            Object::ResourceFlavor(_) => "ResourceFlavor",
            Object::ClusterQueue(_) => "ClusterQueue",
            Object::LocalQueue(_) => "LocalQueue",
            Object::Topology(_) => "Topology",
            Object::ClusterTrainingRuntime(_) => "ClusterTrainingRuntime",
            Object::Service(_) => "Service",
            Object::ConfigMap(_) => "ConfigMap",
            Object::Secret(_) => "Secret",
            Object::PriorityClass(_) => "PriorityClass",
            Object::Namespace(_) => "Namespace",
            Object::ResourceQuota(_) => "ResourceQuota",
            Object::LimitRange(_) => "LimitRange",
            Object::StorageClass(_) => "StorageClass",
            Object::PersistentVolumeClaim(_) => "PersistentVolumeClaim",
        }
    }

    /// The apiVersion it was read as.
    pub fn api_version(&self) -> &str {
        match self {
            Object::Job(_) => "batch/v1",
            Object::JobSet(o) => &o.api_version,
            Object::MpiJob(o) => &o.api_version,
            Object::PyTorchJob(o) => &o.api_version,
            Object::VolcanoJob(o) => &o.api_version,
            Object::VolcanoQueue(o) => &o.api_version,
            Object::ResourceFlavor(o) => &o.api_version,
            Object::ClusterQueue(o) => &o.api_version,
            Object::LocalQueue(o) => &o.api_version,
            Object::Topology(o) => &o.api_version,
            Object::ClusterTrainingRuntime(o) => &o.api_version,
            Object::Service(_)
            | Object::ConfigMap(_)
            | Object::Secret(_)
            | Object::Namespace(_)
            | Object::ResourceQuota(_)
            | Object::LimitRange(_)
            | Object::PersistentVolumeClaim(_) => "v1",
            Object::PriorityClass(_) => "scheduling.k8s.io/v1",
            Object::StorageClass(_) => "storage.k8s.io/v1",
        }
    }

    pub fn metadata(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Object::Job(o) => &o.metadata,
            Object::JobSet(o) => &o.metadata,
            Object::MpiJob(o) => &o.metadata,
            Object::PyTorchJob(o) => &o.metadata,
            Object::VolcanoJob(o) => &o.metadata,
            Object::VolcanoQueue(o) => &o.metadata,
            Object::ResourceFlavor(o) => &o.metadata,
            Object::ClusterQueue(o) => &o.metadata,
            Object::LocalQueue(o) => &o.metadata,
            Object::Topology(o) => &o.metadata,
            Object::ClusterTrainingRuntime(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::ConfigMap(o) => &o.metadata,
            Object::Secret(o) => &o.metadata,
            Object::PriorityClass(o) => &o.metadata,
            Object::Namespace(o) => &o.metadata,
            Object::ResourceQuota(o) => &o.metadata,
            Object::LimitRange(o) => &o.metadata,
            Object::StorageClass(o) => &o.metadata,
            Object::PersistentVolumeClaim(o) => &o.metadata,
        }
    }

    /// `metadata.name`, or `generateName` followed by `*`, or `?`.
    pub fn name(&self) -> String {
        describe_name(self.metadata())
    }

    /// How messages name it: ``MPIJob `pi` ``; Volcano's kinds get their group
    /// (``Job `x` (batch.volcano.sh)``) so that they are not mistaken for Kubernetes' own.
    pub fn describe(&self) -> String {
        let group = match self {
            Object::VolcanoJob(_) => " (batch.volcano.sh)",
            Object::VolcanoQueue(_) => " (scheduling.volcano.sh)",
            _ => "",
        };
        format!("{} `{}`{group}", self.kind(), self.name())
    }

    /// Whether this is a workload (something that runs) rather than a queue or template.
    pub fn is_workload(&self) -> bool {
        matches!(
            self,
            Object::Job(_)
                | Object::JobSet(_)
                | Object::MpiJob(_)
                | Object::PyTorchJob(_)
                | Object::VolcanoJob(_)
        )
    }
}

pub(crate) fn describe_name(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> String {
    match (&m.name, &m.generate_name) {
        (Some(n), _) => n.clone(),
        (None, Some(g)) => format!("{g}*"),
        (None, None) => "?".into(),
    }
}

/// Reads every non-empty document of `text` (named `origin` in messages: a path, or `-`).
///
/// Errors name the document (1-based) and, for a document of an unsupported kind, its
/// kind and apiVersion and the kinds cadre reads; for a document with unknown fields,
/// every unknown field by its path.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Object>, K8sError> {
    Ok(parse_numbered(text, origin)?
        .into_iter()
        .map(|(_, o)| o)
        .collect())
}

/// [`parse_documents`], each object with its 1-based document number in the file (empty
/// documents count), for messages about it later.
pub fn parse_numbered(text: &str, origin: &str) -> Result<Vec<(usize, Object)>, K8sError> {
    yaml_documents(text, origin)?
        .into_iter()
        .map(|(doc, value)| Ok((doc, parse_one(value, origin, doc)?)))
        .collect()
}

/// The non-empty YAML documents of `text`, merge keys applied, each with its 1-based number
/// in the file (empty documents count).
fn yaml_documents(text: &str, origin: &str) -> Result<Vec<(usize, yaml_serde::Value)>, K8sError> {
    let yaml = |source| K8sError::Yaml {
        origin: origin.to_string(),
        source,
    };
    // The parser's work grows with the square of the depth: refused before it starts.
    if let (Some(at), _) = find_too_deep(text, MAX_NESTING_DEPTH) {
        return Err(K8sError::TooDeep {
            origin: origin.to_string(),
            doc: at.doc,
            line: at.line,
            limit: MAX_NESTING_DEPTH,
        });
    }
    let mut out = Vec::new();
    for (i, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let mut value = yaml_serde::Value::deserialize(document).map_err(yaml)?;
        if value.is_null() {
            continue;
        }
        value.apply_merge().map_err(yaml)?;
        out.push((i + 1, value));
    }
    Ok(out)
}

/// The non-empty documents of `text` as JSON values (merge keys applied), each with its
/// 1-based number: what a client sends the controller for the objects applied there
/// (which the controller reads again with [`parse_numbered`]).
pub fn documents_json(
    text: &str,
    origin: &str,
) -> Result<Vec<(usize, serde_json::Value)>, K8sError> {
    yaml_documents(text, origin)?
        .into_iter()
        .map(|(doc, value)| {
            let json = serde_json::to_value(&value).map_err(|e| K8sError::NotAnObject {
                origin: origin.to_string(),
                doc,
                what: format!("not expressible as JSON: {e}"),
            })?;
            Ok((doc, json))
        })
        .collect()
}

fn field<'a>(value: &'a yaml_serde::Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(yaml_serde::Value::as_str)
}

fn parse_one(value: yaml_serde::Value, origin: &str, doc: usize) -> Result<Object, K8sError> {
    let not_an_object = |what: String| K8sError::NotAnObject {
        origin: origin.to_string(),
        doc,
        what,
    };
    if !value.is_mapping() {
        return Err(not_an_object(
            "not a Kubernetes object (expected a mapping with `apiVersion` and `kind`)".into(),
        ));
    }
    let (Some(api_version), Some(kind)) = (field(&value, "apiVersion"), field(&value, "kind"))
    else {
        return Err(not_an_object(
            "no `apiVersion` and `kind` (every Kubernetes object names both)".into(),
        ));
    };
    let (api_version, kind) = (api_version.to_string(), kind.to_string());
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name").or_else(|| m.get("generateName")))
        .and_then(yaml_serde::Value::as_str)
        .unwrap_or("?")
        .to_string();
    let object = format!("{kind} `{name}`");
    let ctx = Ctx {
        origin,
        doc,
        object: &object,
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let unsupported = |hint: Option<&str>| K8sError::UnsupportedKind {
        origin: origin.to_string(),
        doc,
        api_version: api_version.clone(),
        kind: kind.clone(),
        hint: hint.map(str::to_string),
    };
    Ok(match (group, version, kind.as_str()) {
        ("batch", "v1", "Job") => Object::Job(Box::new(ctx.typed(value)?)),
        ("", "v1", "Service") => Object::Service(Box::new(ctx.typed(value)?)),
        ("", "v1", "ConfigMap") => Object::ConfigMap(Box::new(ctx.typed(value)?)),
        ("", "v1", "Secret") => Object::Secret(Box::new(ctx.typed(value)?)),
        ("", "v1", "Namespace") => Object::Namespace(Box::new(ctx.typed(value)?)),
        ("", "v1", "ResourceQuota") => Object::ResourceQuota(Box::new(ctx.typed(value)?)),
        ("", "v1", "LimitRange") => Object::LimitRange(Box::new(ctx.typed(value)?)),
        ("", "v1", "PersistentVolumeClaim") => {
            Object::PersistentVolumeClaim(Box::new(ctx.typed(value)?))
        }
        ("storage.k8s.io", "v1", "StorageClass") => {
            Object::StorageClass(Box::new(ctx.typed(value)?))
        }
        ("scheduling.k8s.io", "v1", "PriorityClass") => {
            Object::PriorityClass(Box::new(ctx.typed(value)?))
        }
        ("jobset.x-k8s.io", "v1alpha2", "JobSet") => Object::JobSet(Box::new(ctx.typed(value)?)),
        ("kubeflow.org", "v2beta1", "MPIJob") => Object::MpiJob(Box::new(ctx.typed(value)?)),
        ("kubeflow.org", "v1", "PyTorchJob") => Object::PyTorchJob(Box::new(ctx.typed(value)?)),
        ("batch.volcano.sh", "v1alpha1", "Job") => Object::VolcanoJob(Box::new(ctx.typed(value)?)),
        ("scheduling.volcano.sh", "v1beta1", "Queue") => {
            Object::VolcanoQueue(Box::new(ctx.typed(value)?))
        }
        ("kueue.x-k8s.io", "v1beta1" | "v1beta2", "ResourceFlavor") => {
            Object::ResourceFlavor(Box::new(ctx.typed(value)?))
        }
        ("kueue.x-k8s.io", "v1beta1" | "v1beta2", "ClusterQueue") => {
            Object::ClusterQueue(Box::new(ctx.typed(value)?))
        }
        ("kueue.x-k8s.io", "v1beta1" | "v1beta2", "LocalQueue") => {
            Object::LocalQueue(Box::new(ctx.typed(value)?))
        }
        ("kueue.x-k8s.io", "v1alpha1" | "v1beta1" | "v1beta2", "Topology") => {
            Object::Topology(Box::new(ctx.typed(value)?))
        }
        ("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime") => {
            Object::ClusterTrainingRuntime(Box::new(ctx.typed(value)?))
        }
        ("kubeflow.org", "v1", "MPIJob") => {
            return Err(unsupported(Some(
                "the Training Operator's v1 MPIJob is deprecated, and its launcher reaches the \
                 workers through `kubectl exec`, which needs a Kubernetes API server; \
                 write it as a kubeflow.org/v2beta1 MPIJob, whose fields are the same",
            )));
        }
        ("kubeflow.org", _, "TFJob" | "XGBoostJob" | "PaddleJob" | "JAXJob" | "MXJob") => {
            return Err(unsupported(Some(
                "of the Training Operator's kinds cadre runs PyTorchJob and MPIJob (v2beta1)",
            )));
        }
        ("trainer.kubeflow.org", _, "TrainJob" | "TrainingRuntime") => {
            return Err(unsupported(Some(
                "Kubeflow Trainer v2 jobs are not run by cadre yet",
            )));
        }
        ("", "v1", "Pod") => {
            return Err(unsupported(Some(
                "a bare Pod is not a job; wrap it in a batch/v1 Job",
            )));
        }
        (
            "scheduling.volcano.sh" | "scheduling.x-k8s.io" | "scheduling.k8s.io",
            _,
            "PodGroup" | "Workload",
        ) => {
            return Err(unsupported(Some(
                "cadre makes the gang from the job itself; pod groups are not needed",
            )));
        }
        _ => return Err(unsupported(None)),
    })
}

struct Ctx<'a> {
    origin: &'a str,
    doc: usize,
    object: &'a str,
}

impl Ctx<'_> {
    /// Deserializes `value` into `T`, failing on the first field of the wrong type (with its
    /// path) and on every field `T` does not know (all listed).
    fn typed<T: DeserializeOwned>(&self, value: yaml_serde::Value) -> Result<T, K8sError> {
        let mut unknown: Vec<String> = Vec::new();
        let mut note = |path: serde_ignored::Path| unknown.push(ignored_path(&path));
        let result = {
            let ignoring = serde_ignored::Deserializer::new(value, &mut note);
            serde_path_to_error::deserialize::<_, T>(ignoring)
        };
        let typed = result.map_err(|e| K8sError::Schema {
            origin: self.origin.to_string(),
            doc: self.doc,
            object: self.object.to_string(),
            path: error_path(e.path()),
            problem: e.inner().to_string(),
        })?;
        if unknown.is_empty() {
            return Ok(typed);
        }
        Err(K8sError::InDocument {
            origin: self.origin.to_string(),
            doc: self.doc,
            source: Box::new(K8sError::Refused {
                object: self.object.to_string(),
                problems: unknown
                    .into_iter()
                    .map(|path| Problem {
                        path,
                        reason: "unknown field (not in this kind's schema as cadre reads it: \
                                 Kubernetes 1.36 and the CRDs' current versions)"
                            .into(),
                    })
                    .collect(),
            }),
        })
    }
}

/// `spec.template.spec.containers[0].foo` from serde_ignored's path.
fn ignored_path(path: &serde_ignored::Path) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => {
            let p = ignored_path(parent);
            if p.is_empty() {
                key.clone()
            } else {
                format!("{p}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// The same form from serde_path_to_error's path.
fn error_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    if out.is_empty() { "(top)".into() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_documents_are_skipped_and_kinds_recognised() {
        let text = "---\n# nothing\n---\napiVersion: kubeflow.org/v2beta1\nkind: MPIJob\n\
                    metadata: {name: pi}\nspec: {}\n---\n---\n\
                    apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n\
                    metadata: {name: q, namespace: team}\nspec: {clusterQueue: cq}\n---\n";
        let objects = parse_documents(text, "t.yaml").unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].describe(), "MPIJob `pi`");
        assert_eq!(objects[1].kind(), "LocalQueue");
        assert_eq!(objects[1].api_version(), "kueue.x-k8s.io/v1beta1");
    }

    #[test]
    fn unknown_kinds_name_the_document_the_kind_and_what_is_supported() {
        let text = "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: x}\n---\n\
                    apiVersion: example.com/v1\nkind: Thing\n";
        let err = parse_documents(text, "f.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with(
                "f.yaml, document 1: kind `PersistentVolume` of apiVersion `v1` is not supported; cadre reads batch/v1 Job;"
            ),
            "{err}"
        );
        let err = parse_documents("---\napiVersion: kubeflow.org/v1\nkind: MPIJob\n", "f")
            .unwrap_err()
            .to_string();
        assert!(err.contains("document 1"), "{err}");
        assert!(err.contains("`kubectl exec`"), "{err}");
    }

    #[test]
    fn unknown_fields_are_listed_by_path() {
        let text = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        image: i\n        comand: [x]\n        resources: {limit: {cpu: 1}}\n  paralelism: 2\n";
        let err = parse_documents(text, "j.yaml").unwrap_err();
        let paths: Vec<&str> = err.problems().iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.template.spec.containers[0].comand",
                "spec.template.spec.containers[0].resources.limit",
                "spec.paralelism"
            ]
        );
        assert!(
            err.to_string()
                .starts_with("j.yaml, document 1: Job `j`: 3 problems:")
        );
    }

    #[test]
    fn wrong_types_name_their_path() {
        let text = "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: pi}\nspec:\n  mpiReplicaSpecs:\n    Worker:\n      replicas: two\n";
        let err = parse_documents(text, "m.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with("m.yaml, document 1 (MPIJob `pi`): spec.mpiReplicaSpecs.Worker.replicas: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn non_objects_and_bad_yaml_are_errors() {
        assert!(
            parse_documents("- a\n- b\n", "l")
                .unwrap_err()
                .to_string()
                .contains("document 1: not a Kubernetes object")
        );
        assert!(
            parse_documents("kind: Job\n", "k")
                .unwrap_err()
                .to_string()
                .contains("no `apiVersion` and `kind`")
        );
        let err = parse_documents("a: [1\n", "y").unwrap_err();
        assert!(matches!(err, K8sError::Yaml { .. }), "{err}");
    }

    #[test]
    fn merge_keys_apply() {
        let text = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  <<: {name: lq}\n  namespace: ns\nspec: {clusterQueue: cq}\n";
        let objects = parse_documents(text, "m").unwrap();
        assert_eq!(objects[0].name(), "lq");
    }
}
