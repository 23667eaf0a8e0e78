//! Storage: `storage.k8s.io/v1` StorageClass and `v1` PersistentVolumeClaim, as
//! directories the agents make and mount.
//!
//! **Given** one object. **Decided**: what cadre makes of it:
//!
//! | object | field | cadre |
//! |---|---|---|
//! | StorageClass | `provisioner: cadre.io/shared-directory`, `parameters.path` | each claim is the directory `<path>/pvc-<uid>`, where `path` is the same shared file system on every node |
//! | | `provisioner: cadre.io/node-local`, `parameters.path` | each claim is the directory `<path>/pvc-<uid>` of each node it is used on: scratch, its files stay on their node |
//! | | annotation `storageclass.kubernetes.io/is-default-class: "true"` | the class of the claims that name none (one at most) |
//! | | `allowVolumeExpansion` | whether a claim's request may grow |
//! | | `reclaimPolicy: Retain` | kept (and the default: a deleted claim's directory is kept for an administrator to remove) |
//! | | `volumeBindingMode` | accepted (a directory is made when a task first uses it, which is `WaitForFirstConsumer`) |
//! | | `reclaimPolicy: Delete`, `mountOptions`, `allowedTopologies`, other provisioners and parameters | refused |
//! | PersistentVolumeClaim | `spec.storageClassName` (or the default class) | the claim's class, fixed when it is created |
//! | | `spec.accessModes` | recorded; `ReadOnlyMany` alone mounts it read-only |
//! | | `spec.resources.requests.storage` | recorded (a directory has no size of its own: it is not enforced) |
//! | | `spec.volumeMode: Filesystem` | accepted |
//! | | `storageClassName: ""`, `volumeName`, `selector`, `dataSource`, `dataSourceRef`, `volumeAttributesClassName`, `volumeMode: Block` | refused |
//!
//! **Must hold**: a claim belongs to the user who created it (the controller records its
//! owner and its `metadata.uid`); only that user's workloads mount it, and the directory is
//! theirs (mode 0700). A class's path must be an absolute path the agents check again
//! (owned by root all the way down, writable by root alone) before they make anything in
//! it as root.

use crate::document::Object;
use crate::error::Refusals;
use crate::names::{is_dns_subdomain, name_of};
use crate::namespaces::{Written, namespace_of};
use crate::quantity::Quantity;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

/// The provisioner of classes whose path is one shared file system on every node.
pub const SHARED_PROVISIONER: &str = "cadre.io/shared-directory";
/// The provisioner of classes whose path is each node's own (scratch).
pub const NODE_LOCAL_PROVISIONER: &str = "cadre.io/node-local";
/// The annotation that makes a class the default, as Kubernetes spells it.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// The annotation the controller records a claim's owner in (any given is replaced).
pub const OWNER_ANNOTATION: &str = "cadre.io/owner";

/// The owner the controller recorded in a kept object's manifest (JSON).
pub fn owner_of(manifest: &serde_json::Value) -> Option<&str> {
    manifest
        .get("metadata")?
        .get("annotations")?
        .get(OWNER_ANNOTATION)?
        .as_str()
}

/// Kubernetes' access modes.
pub const ACCESS_MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// Where a class's directories are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provisioning {
    /// One shared file system, at the same path on every node.
    Shared,
    /// Each node's own directory.
    NodeLocal,
}

impl Provisioning {
    pub fn provisioner(self) -> &'static str {
        match self {
            Provisioning::Shared => SHARED_PROVISIONER,
            Provisioning::NodeLocal => NODE_LOCAL_PROVISIONER,
        }
    }
}

/// A StorageClass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageClassConfig {
    pub name: String,
    pub provisioning: Provisioning,
    /// `parameters.path`: the directory the claims' directories are made in.
    pub path: String,
    pub default: bool,
    pub allow_expansion: bool,
    /// `volumeBindingMode` (`Immediate` when absent, Kubernetes' default).
    pub binding_mode: String,
}

/// A PersistentVolumeClaim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimConfig {
    pub namespace: String,
    pub name: String,
    /// `spec.storageClassName`; `None` until the controller gives it the default class.
    pub class: Option<String>,
    pub access_modes: Vec<String>,
    /// `spec.resources.requests.storage` (`None` only in a claim refused for lacking it).
    pub storage: Option<Written>,
    /// `metadata.uid`, given by the controller when the claim is created.
    pub uid: Option<String>,
    /// The user who created it, recorded by the controller.
    pub owner: Option<String>,
}

impl ClaimConfig {
    /// The name of its directory in its class's path (`pvc-<uid>`, the name Kubernetes'
    /// provisioners give a claim's volume).
    pub fn volume(&self) -> Option<String> {
        self.uid.as_ref().map(|u| format!("pvc-{u}"))
    }

    /// Whether every task mounts it read-only (`ReadOnlyMany` is its only mode).
    pub fn read_only(&self) -> bool {
        self.access_modes == ["ReadOnlyMany"]
    }
}

/// Whether `path` can be a class's path: absolute, of letters, digits, `/`, `.`, `_` and
/// `-` (the container runtime's options are joined with `:` and `,`), no `..`, and not
/// `/` itself nor under `/proc`, `/sys` or `/dev`.
pub fn class_path_ok(path: &str) -> bool {
    let p = std::path::Path::new(path);
    path.starts_with('/')
        && path.len() > 1
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
        && !path.split('/').any(|c| c == ".." || c == ".")
        && !["/proc", "/sys", "/dev"].iter().any(|r| p.starts_with(r))
}

/// Reads a StorageClass, with Kubernetes' checks and cadre's provisioners.
pub(crate) fn read_storage_class(s: &StorageClass, r: &mut Refusals) -> StorageClassConfig {
    let name = name_of(&s.metadata, r);
    if s.metadata.namespace.is_some() {
        r.refuse(
            "metadata.namespace",
            "a StorageClass is not in a namespace (it is cluster-scoped)",
        );
    }
    let provisioning = match s.provisioner.as_str() {
        SHARED_PROVISIONER => Provisioning::Shared,
        NODE_LOCAL_PROVISIONER => Provisioning::NodeLocal,
        "" => {
            r.refuse("provisioner", "Required value");
            Provisioning::Shared
        }
        other => {
            r.refuse(
                "provisioner",
                format!(
                    "`{other}` is not one of cadre's: `{SHARED_PROVISIONER}` (a directory of a \
                     file system every node mounts at the same path) or \
                     `{NODE_LOCAL_PROVISIONER}` (each node's own directory, for scratch)"
                ),
            );
            Provisioning::Shared
        }
    };
    let mut path = String::new();
    for (key, value) in s.parameters.iter().flatten() {
        if key == "path" {
            path = value.clone();
        } else {
            r.refuse(
                format!("parameters.{key}"),
                "not a parameter of cadre's provisioners (they take `path`)",
            );
        }
    }
    if path.is_empty() {
        r.refuse(
            "parameters.path",
            "Required value: the directory the claims' directories are made in",
        );
    } else if !class_path_ok(&path) {
        r.refuse(
            "parameters.path",
            format!(
                "`{path}`: an absolute path of letters, digits, `/`, `.`, `_` and `-`, not `/` \
                 nor under /proc, /sys or /dev"
            ),
        );
    }
    match s.reclaim_policy.as_deref() {
        None | Some("Retain") => {}
        Some("Delete") => r.refuse(
            "reclaimPolicy",
            "`Delete` is not supported: cadre keeps a deleted claim's directory (`Retain`) for \
             an administrator to remove",
        ),
        Some(other) => r.refuse(
            "reclaimPolicy",
            format!("Unsupported value: \"{other}\": supported values: \"Retain\""),
        ),
    }
    let binding_mode = s
        .volume_binding_mode
        .clone()
        .unwrap_or_else(|| "Immediate".into());
    if binding_mode != "Immediate" && binding_mode != "WaitForFirstConsumer" {
        r.refuse(
            "volumeBindingMode",
            format!(
                "Unsupported value: \"{binding_mode}\": supported values: \"Immediate\", \
                 \"WaitForFirstConsumer\""
            ),
        );
    }
    if s.mount_options.as_ref().is_some_and(|m| !m.is_empty()) {
        r.refuse(
            "mountOptions",
            "not supported: a claim is a directory bound into the task",
        );
    }
    if s.allowed_topologies.as_ref().is_some_and(|t| !t.is_empty()) {
        r.refuse(
            "allowedTopologies",
            "not supported: a class's path is on every node",
        );
    }
    let default = match s
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
        .map(String::as_str)
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            r.refuse(
                format!("metadata.annotations[{DEFAULT_CLASS_ANNOTATION}]"),
                format!("`{other}`: \"true\" or \"false\""),
            );
            false
        }
    };
    StorageClassConfig {
        name,
        provisioning,
        path,
        default,
        allow_expansion: s.allow_volume_expansion == Some(true),
        binding_mode,
    }
}

/// Reads a PersistentVolumeClaim (`default_namespace`: its namespace when it names none).
pub(crate) fn read_claim(
    c: &PersistentVolumeClaim,
    default_namespace: &str,
    r: &mut Refusals,
) -> ClaimConfig {
    let name = name_of(&c.metadata, r);
    if !name.is_empty() && !is_dns_subdomain(&name) {
        r.refuse(
            "metadata.name",
            format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower \
                 case alphanumeric characters, '-' or '.', and must start and end with an \
                 alphanumeric character"
            ),
        );
    }
    let namespace = namespace_of(&c.metadata, default_namespace, r);
    let spec = c.spec.clone().unwrap_or_default();
    let class = match spec.storage_class_name.as_deref() {
        Some("") => {
            r.refuse(
                "spec.storageClassName",
                "`\"\"` asks for a PersistentVolume made beforehand; cadre makes every claim's \
                 directory from a StorageClass (name one, or leave it out for the default)",
            );
            None
        }
        other => other.map(str::to_string),
    };
    let access_modes = spec.access_modes.clone().unwrap_or_default();
    if access_modes.is_empty() {
        r.refuse(
            "spec.accessModes",
            "Required value: at least 1 access mode is required",
        );
    }
    for m in &access_modes {
        if !ACCESS_MODES.contains(&m.as_str()) {
            r.refuse(
                "spec.accessModes",
                format!(
                    "Unsupported value: \"{m}\": supported values: \"ReadOnlyMany\", \
                     \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
                ),
            );
        }
    }
    if access_modes.len() > 1 && access_modes.iter().any(|m| m == "ReadWriteOncePod") {
        r.refuse(
            "spec.accessModes",
            "Forbidden: may not use ReadWriteOncePod with other access modes",
        );
    }
    let requests = spec
        .resources
        .as_ref()
        .and_then(|x| x.requests.clone())
        .unwrap_or_default();
    let storage = match requests.get("storage") {
        None => {
            r.refuse("spec.resources[storage]", "Required value");
            None
        }
        Some(q) => match Quantity::parse(&q.0) {
            Ok(v) if v.ceil() > 0 => Some(Written {
                value: v,
                text: q.0.clone(),
            }),
            Ok(_) => {
                r.refuse(
                    "spec.resources.requests.storage",
                    format!("Invalid value: \"{}\": must be greater than zero", q.0),
                );
                None
            }
            Err(e) => {
                r.refuse(
                    "spec.resources.requests.storage",
                    format!("`{}`: {}", e.text, e.why),
                );
                None
            }
        },
    };
    for key in requests.keys().filter(|k| *k != "storage") {
        r.refuse(
            format!("spec.resources.requests.{key}"),
            "a claim requests `storage` only",
        );
    }
    let unsupported = [
        (spec.volume_name.is_some(), "spec.volumeName"),
        (spec.selector.is_some(), "spec.selector"),
        (spec.data_source.is_some(), "spec.dataSource"),
        (spec.data_source_ref.is_some(), "spec.dataSourceRef"),
        (
            spec.volume_attributes_class_name.is_some(),
            "spec.volumeAttributesClassName",
        ),
    ];
    for (set, field) in unsupported {
        if set {
            r.refuse(
                field,
                "not supported: a claim is a new directory of its StorageClass",
            );
        }
    }
    match spec.volume_mode.as_deref() {
        None | Some("Filesystem") => {}
        Some(other) => r.refuse(
            "spec.volumeMode",
            format!("`{other}` is not supported (a claim is a directory: `Filesystem`)"),
        ),
    }
    let owner = c
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OWNER_ANNOTATION))
        .cloned();
    ClaimConfig {
        namespace,
        name,
        class,
        access_modes,
        storage,
        uid: c.metadata.uid.clone(),
        owner,
    }
}

/// An owned object as the controller records it (a claim, Service, ConfigMap or Secret):
/// its uid, its owner and, for a claim, its class (the default class when it names none)
/// set in its manifest (JSON), replacing any the manifest gave.
pub fn stamp_claim(manifest: &mut serde_json::Value, uid: &str, owner: &str, class: Option<&str>) {
    let Some(object) = manifest.as_object_mut() else {
        return;
    };
    // A `metadata` or `annotations` that is no mapping (`null`) is replaced by one, so
    // that no claim is kept without its owner.
    let mapping = |v: &mut serde_json::Value| {
        if !v.is_object() {
            *v = serde_json::json!({});
        }
    };
    let meta = object
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}));
    mapping(meta);
    if let Some(meta) = meta.as_object_mut() {
        meta.insert("uid".into(), uid.into());
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| serde_json::json!({}));
        mapping(annotations);
        if let Some(a) = annotations.as_object_mut() {
            a.insert(OWNER_ANNOTATION.into(), owner.into());
        }
    }
    if let Some(class) = class {
        let spec = object
            .entry("spec")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(spec) = spec.as_object_mut()
            && spec.get("storageClassName").is_none_or(|c| c.is_null())
        {
            spec.insert("storageClassName".into(), class.into());
        }
    }
}

/// Kubernetes' rules for changing an applied claim: only its storage request may change,
/// growing only, and only where its class allows expansion.
pub fn claim_update(
    old: &ClaimConfig,
    new: &ClaimConfig,
    class: Option<&StorageClassConfig>,
) -> Result<(), String> {
    let invalid = |what: &str| {
        Err(format!(
            "PersistentVolumeClaim \"{}\" is invalid: {what}",
            new.name
        ))
    };
    if old.class != new.class || old.access_modes != new.access_modes {
        return invalid(
            "spec: Forbidden: spec is immutable after creation except resources.requests and \
             volumeAttributesClassName for bound claims",
        );
    }
    let bytes = |c: &ClaimConfig| c.storage.as_ref().map_or(0, |s| s.value.ceil());
    if bytes(new) < bytes(old) {
        return invalid(
            "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity",
        );
    }
    if bytes(new) > bytes(old) && !class.is_some_and(|c| c.allow_expansion) {
        return invalid(
            "spec.resources.requests.storage: Forbidden: only dynamically provisioned pvc can \
             be resized and the storageclass that provisions the pvc must support resize",
        );
    }
    Ok(())
}

/// Kubernetes' rules for changing an applied StorageClass: its provisioner, parameters,
/// reclaim policy and binding mode are fixed.
pub fn class_update(old: &StorageClassConfig, new: &StorageClassConfig) -> Result<(), String> {
    let invalid = |what: &str| {
        Err(format!(
            "StorageClass.storage.k8s.io \"{}\" is invalid: {what}",
            new.name
        ))
    };
    if old.provisioning != new.provisioning {
        return invalid("provisioner: Forbidden: updates to provisioner are forbidden.");
    }
    if old.path != new.path {
        return invalid("parameters: Forbidden: updates to parameters are forbidden.");
    }
    if old.binding_mode != new.binding_mode {
        return invalid("volumeBindingMode: Invalid value: field is immutable");
    }
    Ok(())
}

/// The claims a workload's pods mount, by name (each once).
pub fn claims_of(t: &crate::model::Translated) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for g in &t.groups {
        for v in &g.volumes {
            if let crate::model::VolumeKind::Claim { claim, .. } = &v.kind
                && !out.contains(claim)
            {
                out.push(claim.clone());
            }
        }
    }
    out
}

/// The node paths a workload's pods mount (`hostPath` volumes), each once.
pub fn host_paths_of(t: &crate::model::Translated) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for g in &t.groups {
        for v in &g.volumes {
            if let crate::model::VolumeKind::HostPath { path, .. } = &v.kind
                && !out.contains(path)
            {
                out.push(path.clone());
            }
        }
    }
    out
}

/// Whether objects of `kind` are a user's own (any user applies them; the controller
/// records who, and only they or an administrator change or delete them): claims, and the
/// Services, ConfigMaps and Secrets workloads use. Every other kind kept is an
/// administrator's.
pub fn is_owned_kind(kind: &str) -> bool {
    matches!(
        kind,
        "PersistentVolumeClaim" | "Service" | "ConfigMap" | "Secret"
    )
}

/// Whether an object is one of this module's kinds.
pub fn is_storage_object(o: &Object) -> bool {
    matches!(
        o,
        Object::StorageClass(_) | Object::PersistentVolumeClaim(_)
    )
}
