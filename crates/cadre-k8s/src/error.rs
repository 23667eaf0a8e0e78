//! The errors of the Kubernetes front end: one enum, [`K8sError`], whose messages say what
//! was refused, where (file, document, object, field path) and why.
//!
//! A refusal of an object lists every problem found in it at once ([`Problem`]), so that a
//! user fixes a manifest in one pass rather than one field per try. The list of the kinds
//! cadre reads, which the refusal of any other names, is here too ([`SUPPORTED_KINDS`]).

use std::fmt;

/// The kinds cadre reads, as error messages list them.
pub const SUPPORTED_KINDS: &str = "batch/v1 Job; jobset.x-k8s.io/v1alpha2 JobSet; \
    kubeflow.org/v2beta1 MPIJob; kubeflow.org/v1 PyTorchJob; batch.volcano.sh/v1alpha1 Job; \
    scheduling.volcano.sh/v1beta1 Queue; kueue.x-k8s.io/v1beta1 and v1beta2 ResourceFlavor, \
    ClusterQueue, LocalQueue and Topology (also v1alpha1); \
    trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime; v1 Service, ConfigMap and Secret \
    (with the workloads that use them); scheduling.k8s.io/v1 PriorityClass; v1 Namespace, \
    ResourceQuota, LimitRange and PersistentVolumeClaim; storage.k8s.io/v1 StorageClass";

/// One thing cadre cannot do with an object: the field, as a path in the manifest
/// (`spec.template.spec.volumes[0]`), and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

fn list(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => format!(
            "{} problems:{}",
            many.len(),
            many.iter()
                .map(|p| format!("\n  - {p}"))
                .collect::<Vec<_>>()
                .concat()
        ),
    }
}

/// Everything that can go wrong reading or translating manifests.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// The text is not YAML.
    #[error("failed to parse {origin}: {source}")]
    Yaml {
        origin: String,
        #[source]
        source: yaml_serde::Error,
    },
    /// The text nests collections deeper than cadre reads (checked before any parsing).
    #[error(
        "{origin}, document {doc}: collections nested deeper than {limit} levels at line {line}; \
         cadre reads manifests nested at most {limit} levels deep"
    )]
    TooDeep {
        origin: String,
        doc: usize,
        line: usize,
        limit: usize,
    },
    /// A document is YAML but not a Kubernetes object (not a mapping, no `apiVersion`...).
    #[error("{origin}, document {doc}: {what}")]
    NotAnObject {
        origin: String,
        /// 1-based position of the document in the file.
        doc: usize,
        what: String,
    },
    /// A kind cadre does not read.
    #[error(
        "{origin}, document {doc}: kind `{kind}` of apiVersion `{api_version}` is not supported{}; \
         cadre reads {}",
        .hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default(),
        SUPPORTED_KINDS
    )]
    UnsupportedKind {
        origin: String,
        doc: usize,
        api_version: String,
        kind: String,
        /// Why this kind in particular, or what to use instead.
        hint: Option<String>,
    },
    /// A field has the wrong type or shape (`replicas: two`).
    #[error("{origin}, document {doc} ({object}): {path}: {problem}")]
    Schema {
        origin: String,
        doc: usize,
        /// `MPIJob `pi``.
        object: String,
        path: String,
        problem: String,
    },
    /// The object is understood, but cadre cannot run it as written.
    #[error("{object}: {}", list(.problems))]
    Refused {
        /// `MPIJob `pi``.
        object: String,
        problems: Vec<Problem>,
    },
    /// An error about one document of a file.
    #[error("{origin}, document {doc}: {source}")]
    InDocument {
        origin: String,
        doc: usize,
        #[source]
        source: Box<K8sError>,
    },
    /// The contract functions were asked about a rank or placement that does not fit the job.
    #[error("{what}")]
    Contract { what: String },
    /// A job's carried translation ([`crate::submission::WorkloadRun`]) cannot be read.
    #[error("the job's Kubernetes translation cannot be read: {what}")]
    Payload { what: String },
}

impl K8sError {
    /// The problems of a refusal (looking through [`K8sError::InDocument`]); empty for other
    /// errors.
    pub fn problems(&self) -> &[Problem] {
        match self {
            K8sError::Refused { problems, .. } => problems,
            K8sError::InDocument { source, .. } => source.problems(),
            _ => &[],
        }
    }
}

/// Collects the problems of one object while it is translated.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    problems: Vec<Problem>,
}

impl Refusals {
    pub(crate) fn refuse(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            reason: reason.into(),
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// `Ok(value)` when nothing was refused.
    pub(crate) fn finish<T>(self, object: &str, value: T) -> Result<T, K8sError> {
        if self.problems.is_empty() {
            Ok(value)
        } else {
            Err(K8sError::Refused {
                object: object.to_string(),
                problems: self.problems,
            })
        }
    }

    pub(crate) fn into_error(self, object: &str) -> K8sError {
        K8sError::Refused {
            object: object.to_string(),
            problems: self.problems,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_problem_on_one_line_several_as_a_list() {
        let mut r = Refusals::default();
        r.refuse("spec.a", "a is not supported");
        let e = r.into_error("MPIJob `pi`");
        assert_eq!(e.to_string(), "MPIJob `pi`: spec.a: a is not supported");
        let mut r = Refusals::default();
        r.refuse("spec.a", "no a");
        r.refuse("spec.b", "no b");
        let e = r.into_error("Job `j`");
        assert_eq!(
            e.to_string(),
            "Job `j`: 2 problems:\n  - spec.a: no a\n  - spec.b: no b"
        );
        assert_eq!(e.problems().len(), 2);
    }
}
