//! The objects a platform team puts beside the workloads of a multi-tenant cluster:
//! `scheduling.k8s.io/v1` PriorityClass, and `v1` Namespace, ResourceQuota and LimitRange.
//!
//! **Given** one object. **Decided**: what cadre makes of it:
//!
//! | object | field | cadre |
//! |---|---|---|
//! | PriorityClass | `value`, `preemptionPolicy` | a priority class of that value, preempting unless `Never` (as the policy file's `[[priority_class]]`) |
//! | | `globalDefault: true` | the class of the workloads that name none |
//! | | `description` | kept |
//! | Namespace | `metadata.labels` | kept (`get namespaces`) |
//! | ResourceQuota | `spec.hard`: `requests.cpu`, `limits.cpu`, `cpu`; the same of `memory`; `requests.nvidia.com/gpu`; `requests.rdma/*` | a namespace quota: the running gangs of the namespace's workloads together within it (see below) |
//! | | `pods`, `count/pods`, `count/<resource>.<group>` of the workload kinds | object counts, checked at submission ([`ObjectQuota`]) |
//! | | `persistentvolumeclaims`, `services`, `configmaps`, `secrets` (or `count/` of them), `requests.storage` | counts of the objects the controller keeps and the claims' storage, checked when one is created (or a claim grows) |
//! | | `spec.scopes`, `spec.scopeSelector`, counts of other objects, other storage | refused |
//! | LimitRange | `spec.limits[]` of type `Container`: `default`, `defaultRequest`, `max`, `min`, `maxLimitRequestRatio` | applied to each container of the namespace's workloads when they are applied (below) |
//! | | types `Pod` and `PersistentVolumeClaim` | refused |
//!
//! **Must hold**: a value cadre cannot honour is refused by its path, never approximated.
//! cadre books one amount of each resource per task: the limit where one is set, else the
//! request (see `pod::read_resources`). A quota's `requests.X`, `limits.X` and `X` are
//! therefore all checked against that amount (a quota giving several takes the smallest);
//! CPU quotas are rounded down to whole cores and memory down to MiB, since a task's CPUs
//! are whole cores (a 3.5-core quota holds 3 of them).
//!
//! A LimitRange works as Kubernetes does, per container and per resource. The range is
//! defaulted as the API server defaults it (a missing `default` is `max`; a missing
//! `defaultRequest` is `default`, else `min`) and validated (min <= defaultRequest <=
//! default <= max, a ratio of at least 1). A container's missing request is its limit
//! (the API server's defaulting of a pod); then LimitRanger's: a missing limit takes
//! `default`, a missing request `defaultRequest`; then the request must be at least `min`,
//! the limit at most `max` (a container with neither limit nor default where `max` is set
//! is refused), and limit / request at most `maxLimitRequestRatio` (a container with no
//! limit or no request is refused when a ratio is set). The messages are Kubernetes'
//! own, with the range's name added.

use crate::error::Refusals;
use crate::names::{is_dns_label, name_of};
use crate::quantity::Quantity;
use cadre_core::policy::PriorityClassConfig;
use cadre_core::quota::{NamespaceQuotaConfig, QuotaAmounts};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota, ResourceRequirements};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use std::collections::BTreeMap;

/// The highest value of a PriorityClass that is not one of Kubernetes' own (system) classes.
pub const MAX_USER_PRIORITY: i32 = 1_000_000_000;

/// A PriorityClass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K8sPriorityClass {
    pub config: PriorityClassConfig,
    pub global_default: bool,
    pub preemption_policy: String,
    pub description: Option<String>,
}

/// A Namespace object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceObject {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// A quantity as the manifest wrote it (`512Mi`), and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub value: Quantity,
    pub text: String,
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// One resource's bounds of a LimitRange item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceBounds {
    pub default: Option<Written>,
    pub default_request: Option<Written>,
    pub max: Option<Written>,
    pub min: Option<Written>,
    pub max_ratio: Option<Written>,
}

/// A LimitRange: bounds per resource name for the containers of its namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitRangeConfig {
    pub namespace: String,
    pub name: String,
    pub resources: BTreeMap<String, ResourceBounds>,
}

pub(crate) fn namespace_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    default_namespace: &str,
    r: &mut Refusals,
) -> String {
    let ns = meta
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace.to_string());
    if !is_dns_label(&ns) {
        r.refuse("metadata.namespace", format!("`{ns}` is not a DNS label"));
    }
    ns
}

/// Reads a PriorityClass, with Kubernetes' checks of its value and name.
pub(crate) fn read_priority_class(p: &PriorityClass, r: &mut Refusals) -> K8sPriorityClass {
    let name = name_of(&p.metadata, r);
    if name.starts_with("system-") {
        r.refuse(
            "metadata.name",
            "Forbidden: priority class names with 'system-' prefix are reserved",
        );
    }
    let value = p.value.unwrap_or_else(|| {
        r.refuse("value", "Required value");
        0
    });
    if value > MAX_USER_PRIORITY {
        r.refuse(
            "value",
            format!(
                "Forbidden: maximum allowed value of a user defined priority is {MAX_USER_PRIORITY}"
            ),
        );
    }
    let policy = p
        .preemption_policy
        .clone()
        .unwrap_or_else(|| "PreemptLowerPriority".into());
    if policy != "PreemptLowerPriority" && policy != "Never" {
        r.refuse(
            "preemptionPolicy",
            format!(
                "Unsupported value: \"{policy}\": supported values: \"Never\", \
                 \"PreemptLowerPriority\""
            ),
        );
    }
    K8sPriorityClass {
        config: PriorityClassConfig {
            name,
            value,
            preempting: policy != "Never",
        },
        global_default: p.global_default == Some(true),
        preemption_policy: policy,
        description: p.description.clone(),
    }
}

/// Reads a Namespace.
pub(crate) fn read_namespace(n: &Namespace, r: &mut Refusals) -> NamespaceObject {
    let name = name_of(&n.metadata, r);
    if n.metadata.namespace.is_some() {
        r.refuse(
            "metadata.namespace",
            "a Namespace is not in a namespace (it is cluster-scoped)",
        );
    }
    if let Some(f) = n.spec.as_ref().and_then(|s| s.finalizers.as_ref())
        && !f.is_empty()
    {
        // Finalizers hold a namespace's deletion until controllers empty it; cadre refuses
        // to delete a namespace that still holds objects, which is what they ensure.
        r.refuse(
            "spec.finalizers",
            "not supported: cadre deletes a namespace only once it holds no object",
        );
    }
    NamespaceObject {
        name,
        labels: n.metadata.labels.clone().unwrap_or_default(),
    }
}

/// Which of cadre's booked amounts a quota key limits, and how its value is read.
enum QuotaKey {
    Cpus,
    Memory,
    Gpus,
    Nics,
    /// `pods`, `count/pods`: a workload's ranks.
    Pods,
    /// `count/<resource>.<group>` of a workload kind.
    Workloads(&'static str),
    /// `persistentvolumeclaims`, `services`, `configmaps`, `secrets` (or `count/` of them):
    /// kept objects of a kind, by the kind.
    Kept(&'static str),
    /// `requests.storage`: the claims' storage requests, summed.
    Storage,
}

/// The kept objects a ResourceQuota counts: its key (as Kubernetes writes it, and the
/// `count/` form) and the kind.
pub const KEPT_RESOURCES: [(&str, &str); 4] = [
    ("persistentvolumeclaims", "PersistentVolumeClaim"),
    ("services", "Service"),
    ("configmaps", "ConfigMap"),
    ("secrets", "Secret"),
];

/// The workload kinds a ResourceQuota counts (`count/<resource>.<group>`), by kind and
/// API group.
pub const WORKLOAD_RESOURCES: [(&str, &str, &str); 5] = [
    ("Job", "batch", "jobs.batch"),
    ("MPIJob", "kubeflow.org", "mpijobs.kubeflow.org"),
    ("PyTorchJob", "kubeflow.org", "pytorchjobs.kubeflow.org"),
    ("JobSet", "jobset.x-k8s.io", "jobsets.jobset.x-k8s.io"),
    ("Job", "batch.volcano.sh", "jobs.batch.volcano.sh"),
];

/// What a namespace quota counts of objects (a ResourceQuota's object counts): checked
/// when a workload is submitted, over the namespace's workloads that have not ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectQuota {
    pub namespace: String,
    pub name: String,
    /// `pods`: ranks of the workloads.
    pub pods: Option<u64>,
    /// `count/<resource>.<group>`: workloads of a kind, by that resource name.
    pub workloads: BTreeMap<String, u64>,
    /// Kept objects of a kind (`persistentvolumeclaims`, ...), by the kind: checked when
    /// one is created.
    pub kept: BTreeMap<String, u64>,
    /// `requests.storage` in bytes: the namespace's claims' requests, summed, checked
    /// when a claim is created or grows.
    pub storage: Option<u64>,
}

impl ObjectQuota {
    /// Whether it counts anything.
    pub fn is_empty(&self) -> bool {
        self.pods.is_none()
            && self.workloads.is_empty()
            && self.kept.is_empty()
            && self.storage.is_none()
    }
}

fn quota_key(key: &str) -> Result<QuotaKey, String> {
    let bare = key
        .strip_prefix("requests.")
        .or_else(|| key.strip_prefix("limits."));
    match (key, bare) {
        ("cpu", _) | (_, Some("cpu")) => Ok(QuotaKey::Cpus),
        ("memory", _) | (_, Some("memory")) => Ok(QuotaKey::Memory),
        (_, Some("nvidia.com/gpu")) if key.starts_with("requests.") => Ok(QuotaKey::Gpus),
        (_, Some(n)) if n.starts_with("rdma/") && key.starts_with("requests.") => {
            Ok(QuotaKey::Nics)
        }
        ("nvidia.com/gpu", _) => Err(
            "Invalid value: an extended resource's quota is written `requests.nvidia.com/gpu`"
                .into(),
        ),
        (_, Some("nvidia.com/gpu")) => Err(
            "Invalid value: an extended resource's quota is written `requests.nvidia.com/gpu` \
             (limits of extended resources are not quota keys)"
                .into(),
        ),
        ("pods" | "count/pods", _) => Ok(QuotaKey::Pods),
        ("requests.storage", _) => Ok(QuotaKey::Storage),
        (k, _)
            if KEPT_RESOURCES
                .iter()
                .any(|(r, _)| k == *r || k.strip_prefix("count/") == Some(r)) =>
        {
            let bare = k.strip_prefix("count/").unwrap_or(k);
            KEPT_RESOURCES
                .iter()
                .find(|(r, _)| *r == bare)
                .map(|(_, kind)| QuotaKey::Kept(kind))
                .ok_or_else(|| format!("`{k}` is not counted"))
        }
        (k, _) if k.starts_with("count/") => {
            let resource = &k["count/".len()..];
            WORKLOAD_RESOURCES
                .iter()
                .find(|(_, _, r)| *r == resource)
                .map(|(_, _, r)| QuotaKey::Workloads(r))
                .ok_or_else(|| {
                    format!(
                        "cadre counts workloads ({}), pods, and the objects it keeps ({}); not \
                         `{resource}`",
                        WORKLOAD_RESOURCES.map(|(_, _, r)| r).join(", "),
                        KEPT_RESOURCES.map(|(r, _)| r).join(", ")
                    )
                })
        }
        (_, Some("storage" | "ephemeral-storage")) | ("ephemeral-storage", _) => {
            Err("storage is not booked by cadre, so it has no quota".into())
        }
        (k, _) if k.contains(".storageclass.storage.k8s.io/") => {
            Err("storage is not booked by cadre, so it has no quota".into())
        }
        _ => Err(
            "not supported: cadre's namespace quotas count cpu, memory, \
             requests.nvidia.com/gpu and requests.rdma/*"
                .into(),
        ),
    }
}

/// Reads a ResourceQuota into a namespace quota, and what it counts of objects.
pub(crate) fn read_resource_quota(
    q: &ResourceQuota,
    default_namespace: &str,
    r: &mut Refusals,
) -> (NamespaceQuotaConfig, ObjectQuota) {
    let name = name_of(&q.metadata, r);
    let namespace = namespace_of(&q.metadata, default_namespace, r);
    let mut hard = QuotaAmounts::UNLIMITED;
    let mut objects = ObjectQuota {
        namespace: namespace.clone(),
        name: name.clone(),
        ..ObjectQuota::default()
    };
    let spec = q.spec.clone().unwrap_or_default();
    if spec.scopes.as_ref().is_some_and(|s| !s.is_empty()) {
        r.refuse(
            "spec.scopes",
            "quota scopes are not supported: a cadre namespace quota counts every running gang \
             of the namespace",
        );
    }
    if spec.scope_selector.is_some() {
        r.refuse(
            "spec.scopeSelector",
            "quota scopes are not supported: a cadre namespace quota counts every running gang \
             of the namespace",
        );
    }
    let tighten = |slot: &mut Option<u64>, v: u128| {
        let v = u64::try_from(v).unwrap_or(u64::MAX);
        *slot = Some(slot.map_or(v, |old| old.min(v)));
    };
    for (key, value) in spec.hard.iter().flatten() {
        let path = format!("spec.hard[{key}]");
        let kind = match quota_key(key) {
            Ok(k) => k,
            Err(why) => {
                r.refuse(path, why);
                continue;
            }
        };
        let v = match Quantity::parse(&value.0) {
            Ok(v) => v,
            Err(e) => {
                r.refuse(path, e.to_string());
                continue;
            }
        };
        match kind {
            QuotaKey::Storage => tighten(&mut objects.storage, v.floor()),
            QuotaKey::Cpus => tighten(&mut hard.cpus, v.floor()),
            QuotaKey::Memory => tighten(&mut hard.mem_mib, v.floor_mib()),
            QuotaKey::Gpus
            | QuotaKey::Nics
            | QuotaKey::Pods
            | QuotaKey::Workloads(_)
            | QuotaKey::Kept(_) => {
                let Some(n) = v.whole() else {
                    r.refuse(path, format!("{v} is not a whole number"));
                    continue;
                };
                match kind {
                    QuotaKey::Gpus => tighten(&mut hard.gpu_milli, n.saturating_mul(1000)),
                    QuotaKey::Nics => tighten(&mut hard.nics, n),
                    QuotaKey::Pods => tighten(&mut objects.pods, n),
                    QuotaKey::Workloads(resource) => {
                        let mut slot = objects.workloads.get(resource).copied();
                        tighten(&mut slot, n);
                        objects
                            .workloads
                            .insert(resource.to_string(), slot.unwrap_or(0));
                    }
                    QuotaKey::Kept(kind) => {
                        let mut slot = objects.kept.get(kind).copied();
                        tighten(&mut slot, n);
                        objects.kept.insert(kind.to_string(), slot.unwrap_or(0));
                    }
                    QuotaKey::Cpus | QuotaKey::Memory | QuotaKey::Storage => {}
                }
            }
        }
    }
    if hard == QuotaAmounts::UNLIMITED && objects.is_empty() && r.is_empty() {
        r.refuse("spec.hard", "a ResourceQuota needs at least one limit");
    }
    let quota = NamespaceQuotaConfig {
        namespace,
        name,
        hard,
    };
    (quota, objects)
}

/// The `count/...` resource name of a workload of `kind` and `api_version`.
pub fn workload_resource(kind: &str, api_version: &str) -> Option<&'static str> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    WORKLOAD_RESOURCES
        .iter()
        .find(|(k, g, _)| *k == kind && *g == group)
        .map(|(_, _, r)| *r)
}

/// Reads a LimitRange.
pub(crate) fn read_limit_range(
    l: &LimitRange,
    default_namespace: &str,
    r: &mut Refusals,
) -> LimitRangeConfig {
    let name = name_of(&l.metadata, r);
    let namespace = namespace_of(&l.metadata, default_namespace, r);
    let mut resources: BTreeMap<String, ResourceBounds> = BTreeMap::new();
    for (i, item) in l.spec.iter().flat_map(|s| &s.limits).enumerate() {
        let at = format!("spec.limits[{i}]");
        if item.type_ != "Container" {
            r.refuse(
                format!("{at}.type"),
                format!(
                    "`{}` limits are not supported: cadre applies LimitRanges of type \
                     Container (a cadre pod has one container, so its bounds are the pod's)",
                    item.type_
                ),
            );
            continue;
        }
        let fields: [(&str, &Option<BTreeMap<String, K8sQuantity>>); 5] = [
            ("default", &item.default),
            ("defaultRequest", &item.default_request),
            ("max", &item.max),
            ("min", &item.min),
            ("maxLimitRequestRatio", &item.max_limit_request_ratio),
        ];
        for (field, list) in fields {
            for (res, q) in list.iter().flatten() {
                let path = format!("{at}.{field}[{res}]");
                let v = match Quantity::parse(&q.0) {
                    Ok(v) => v,
                    Err(e) => {
                        r.refuse(path, e.to_string());
                        continue;
                    }
                };
                let b = resources.entry(res.clone()).or_default();
                let slot = match field {
                    "default" => &mut b.default,
                    "defaultRequest" => &mut b.default_request,
                    "max" => &mut b.max,
                    "min" => &mut b.min,
                    _ => &mut b.max_ratio,
                };
                if slot.is_some() {
                    r.refuse(path, "given by two items of type Container");
                }
                *slot = Some(Written {
                    value: v,
                    text: q.0.clone(),
                });
            }
        }
    }
    // Kubernetes' defaulting of a Container item: a missing default limit is the maximum,
    // a missing default request the default limit, else the minimum.
    for b in resources.values_mut() {
        if b.default.is_none() {
            b.default = b.max.clone();
        }
        if b.default_request.is_none() {
            b.default_request = b.default.clone().or_else(|| b.min.clone());
        }
    }
    // Then its validation, with its messages.
    for (res, b) in &resources {
        let at = |field: &str| format!("spec.limits.{field}[{res}]");
        let pairs = [
            (&b.min, &b.max, "min", "max value"),
            (
                &b.default_request,
                &b.default,
                "defaultRequest",
                "default limit value",
            ),
            (&b.min, &b.default_request, "min", "default request value"),
            (&b.default_request, &b.max, "defaultRequest", "max value"),
            (&b.min, &b.default, "min", "default value"),
            (&b.default, &b.max, "default", "max value"),
        ];
        for (low, high, field, what) in pairs {
            if let (Some(low), Some(high)) = (low, high)
                && low.value > high.value
            {
                r.refuse(
                    at(field),
                    format!(
                        "Invalid value: \"{low}\": must be less than or equal to {what} {high}"
                    ),
                );
            }
        }
        if let Some(ratio) = &b.max_ratio
            && ratio.value < Quantity::parse("1").expect("a quantity")
        {
            r.refuse(
                at("maxLimitRequestRatio"),
                format!("Invalid value: \"{ratio}\": ratio must be greater than or equal to 1"),
            );
        }
    }
    LimitRangeConfig {
        namespace,
        name,
        resources,
    }
}

/// Applies the LimitRanges of a namespace to one container's resources: the defaults put
/// in, then the bounds checked (problems refused at `path`, the container's path).
pub(crate) fn limit_container(
    resources: Option<&ResourceRequirements>,
    ranges: &[&LimitRangeConfig],
    path: &str,
    r: &mut Refusals,
) -> Option<ResourceRequirements> {
    if ranges.is_empty() {
        return resources.cloned();
    }
    let mut out = resources.cloned().unwrap_or_default();
    // The API server's defaulting comes first: a request left out is the limit given.
    let given: Vec<(String, K8sQuantity)> = out
        .limits
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let requests = out.requests.get_or_insert_with(BTreeMap::new);
    for (res, limit) in given {
        requests.entry(res).or_insert(limit);
    }
    // Then LimitRanger's: a missing limit is the default, a missing request the default
    // request.
    for range in ranges {
        for (res, b) in &range.resources {
            let limits = out.limits.get_or_insert_with(BTreeMap::new);
            if !limits.contains_key(res)
                && let Some(d) = &b.default
            {
                limits.insert(res.clone(), K8sQuantity(d.text.clone()));
            }
            let requests = out.requests.get_or_insert_with(BTreeMap::new);
            if !requests.contains_key(res)
                && let Some(d) = &b.default_request
            {
                requests.insert(res.clone(), K8sQuantity(d.text.clone()));
            }
        }
    }
    let read = |m: &Option<BTreeMap<String, K8sQuantity>>, res: &str| {
        let text = m.as_ref().and_then(|m| m.get(res))?;
        Some(Written {
            value: Quantity::parse(&text.0).ok()?,
            text: text.0.clone(),
        })
    };
    for range in ranges {
        for (res, b) in &range.resources {
            let request = read(&out.requests, res);
            let limit = read(&out.limits, res);
            let forbidden =
                |what: String| format!("Forbidden: {what} (LimitRange `{}`)", range.name);
            let at = format!("{path}.resources");
            if let Some(min) = &b.min {
                match &request {
                    Some(q) if q.value < min.value => r.refuse(
                        format!("{at}.requests[{res}]"),
                        forbidden(format!(
                            "minimum {res} usage per Container is {min}, but request is {q}"
                        )),
                    ),
                    None => r.refuse(
                        format!("{at}.requests[{res}]"),
                        forbidden(format!(
                            "minimum {res} usage per Container is {min}.  No request is specified"
                        )),
                    ),
                    _ => {}
                }
            }
            if let Some(max) = &b.max {
                match &limit {
                    Some(l) if l.value > max.value => r.refuse(
                        format!("{at}.limits[{res}]"),
                        forbidden(format!(
                            "maximum {res} usage per Container is {max}, but limit is {l}"
                        )),
                    ),
                    None => r.refuse(
                        format!("{at}.limits[{res}]"),
                        forbidden(format!(
                            "maximum {res} usage per Container is {max}.  No limit is specified"
                        )),
                    ),
                    _ => {}
                }
            }
            if let Some(ratio) = &b.max_ratio {
                let refuse = |r: &mut Refusals, what: String| {
                    r.refuse(
                        format!("{at}.limits[{res}]"),
                        forbidden(format!(
                            "{res} max limit to request ratio per Container is {ratio}, but {what}"
                        )),
                    )
                };
                match (&limit, &request) {
                    (None, _) => refuse(r, "no limit is specified".into()),
                    (_, None) => refuse(r, "no request is specified or request is 0".into()),
                    (_, Some(q)) if q.value.is_zero() => {
                        refuse(r, "no request is specified or request is 0".into())
                    }
                    (Some(l), Some(q)) if l.value.ratio_above(&q.value, &ratio.value) => refuse(
                        r,
                        format!(
                            "provided ratio is {:.6}",
                            l.value.as_f64() / q.value.as_f64()
                        ),
                    ),
                    _ => {}
                }
            }
        }
    }
    Some(out)
}

/// Whether `kind` is one of this module's kinds.
pub fn is_namespace_kind(kind: &str) -> bool {
    matches!(
        kind,
        "PriorityClass" | "Namespace" | "ResourceQuota" | "LimitRange"
    )
}
