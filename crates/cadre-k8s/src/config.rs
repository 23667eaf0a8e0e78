//! `v1 ConfigMap` and `v1 Secret` beside a workload: read here, kept by the controller, and
//! given to the workloads of the same apply, or applied after them, that use them
//! ([`crate::contract::attach_config`]; a Secret applied before comes with its keys alone,
//! and the controller puts in its values, for its owner's jobs only):
//! - a ConfigMap's values become the variables that name them (`configMapKeyRef`,
//!   `envFrom`), and the files of its volumes;
//! - a Secret's data is carried with the workload to its nodes only (the controller's store
//!   keeps it as it keeps the job; the API shows it to nobody: see
//!   [`redact_secrets`]), and becomes the variables and files of the tasks that name it
//!   when they start: in the task's environment (readable by its user and root), in files
//!   of the job's user alone, never on a command line (a Secret's variable is not expanded
//!   in `command` or `args`), never in `describe`, `get` or a log.

use crate::error::{K8sError, Refusals};
use std::collections::BTreeMap;

/// The most bytes a Secret's data holds, as Kubernetes bounds it.
pub const MAX_SECRET_BYTES: usize = 1 << 20;

/// A ConfigMap as cadre keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMap {
    pub name: String,
    pub namespace: String,
    pub data: BTreeMap<String, String>,
}

/// A Secret as cadre keeps it: each key's bytes, base64. Never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    pub name: String,
    pub namespace: String,
    pub data: BTreeMap<String, String>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A key of a ConfigMap or Secret: what Kubernetes allows (letters, digits, `-`, `_`,
/// `.`), which also makes it a file name of its own.
fn is_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check_keys(data: &BTreeMap<String, String>, r: &mut Refusals) {
    for k in data.keys().filter(|k| !is_key(k)) {
        r.refuse(
            format!("data[{k}]"),
            "a key is letters, digits, `-`, `_` and `.`",
        );
    }
}

fn name_and_namespace(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    default_namespace: &str,
    r: &mut Refusals,
) -> (String, String) {
    let name = meta.name.clone().unwrap_or_default();
    if name.is_empty() {
        r.refuse("metadata.name", "needs a name");
    }
    let namespace = meta
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace.to_string());
    (name, namespace)
}

pub fn read_config_map(
    cm: &k8s_openapi::api::core::v1::ConfigMap,
    default_namespace: &str,
) -> Result<ConfigMap, K8sError> {
    let mut r = Refusals::default();
    let (name, namespace) = name_and_namespace(&cm.metadata, default_namespace, &mut r);
    if cm.binary_data.as_ref().is_some_and(|b| !b.is_empty()) {
        r.refuse(
            "binaryData",
            "not supported yet: give text in `data` (or use a Secret, whose data may be any bytes)",
        );
    }
    let data = cm.data.clone().unwrap_or_default();
    check_keys(&data, &mut r);
    r.finish(
        &format!("ConfigMap `{name}`"),
        ConfigMap {
            name: name.clone(),
            namespace,
            data,
        },
    )
}

pub fn read_secret(
    s: &k8s_openapi::api::core::v1::Secret,
    default_namespace: &str,
) -> Result<Secret, K8sError> {
    use base64::Engine;
    let mut r = Refusals::default();
    let (name, namespace) = name_and_namespace(&s.metadata, default_namespace, &mut r);
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut data: BTreeMap<String, String> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), b64.encode(&v.0)))
        .collect();
    // `stringData` wins over `data`, as the API server merges them.
    for (k, v) in s.string_data.iter().flatten() {
        data.insert(k.clone(), b64.encode(v.as_bytes()));
    }
    check_keys(&data, &mut r);
    // Kubernetes' own bound on a Secret: each job that uses one carries its values.
    let bytes: usize = data.values().map(|v| v.len() / 4 * 3).sum();
    if bytes > MAX_SECRET_BYTES {
        r.refuse(
            "data",
            format!("Too long: must have at most {MAX_SECRET_BYTES} bytes"),
        );
    }
    r.finish(
        &format!("Secret `{name}`"),
        Secret {
            name: name.clone(),
            namespace,
            data,
        },
    )
}

/// Replaces every Secret value in a run spec's carried workload (`RunSpec::kubernetes`)
/// with `<redacted>`, for what the API shows.
pub fn redact_secrets(carried: &mut serde_json::Value) {
    if let Some(secrets) = carried
        .get_mut("workload")
        .and_then(|w| w.get_mut("secrets"))
        .and_then(serde_json::Value::as_object_mut)
    {
        for keys in secrets.values_mut() {
            if let Some(keys) = keys.as_object_mut() {
                for v in keys.values_mut() {
                    *v = serde_json::Value::String("<redacted>".into());
                }
            }
        }
    }
}
