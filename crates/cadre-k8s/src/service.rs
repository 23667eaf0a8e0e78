//! `v1 Service` beside a workload, the standard way a job's ranks find rank 0: read
//! ([`read_service`]), kept by the controller, and given to the workloads of the same apply,
//! or applied after it, whose pods it selects ([`crate::contract::attach_services`]), where the job's hosts file gives its names
//! ([`crate::contract::hosts_file`]).
//!
//! What a Service means under cadre, where tasks use their nodes' network (no virtual IP,
//! no proxy):
//! - **headless** (`clusterIP: None`): the names of the selected pods whose `subdomain` is
//!   the Service resolve as they do in a cluster (`<pod>.<svc>.<ns>.svc.cluster.local`),
//!   and so does the Service's own name;
//! - **with a cluster IP** (or none given): the Service's name resolves too. Its ports are
//!   recorded; a port is the same number on the node (there is no `targetPort`
//!   translation: tasks listen on their nodes' ports).
//!
//! The rule for a Service's own name when it selects several pods: it resolves to the node
//! of the selected pod of the lowest rank (rank 0 of an Indexed Job or a PyTorchJob's
//! master, usually what the Service is for). A Service that selects no pod yet is kept for
//! the workloads to come ([`crate::plan`], which reads one file alone, refuses it).

use crate::error::{K8sError, Refusals};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A Service as cadre keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub name: String,
    pub namespace: String,
    /// `clusterIP: None`.
    pub headless: bool,
    pub selector: BTreeMap<String, String>,
    pub ports: Vec<ServicePort>,
}

/// One port of a Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePort {
    pub name: Option<String>,
    pub port: u16,
    pub protocol: String,
}

/// Reads a Service: what cadre cannot give it is refused by field, with why.
pub fn read_service(
    s: &k8s_openapi::api::core::v1::Service,
    default_namespace: &str,
) -> Result<Service, K8sError> {
    let mut r = Refusals::default();
    let meta = &s.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let object = format!("Service `{name}`");
    if name.is_empty() {
        r.refuse("metadata.name", "a Service needs a name");
    }
    let namespace = meta
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace.to_string());
    let Some(spec) = &s.spec else {
        r.refuse("spec", "missing");
        return Err(r.into_error(&object));
    };
    let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
    if kind != "ClusterIP" {
        r.refuse(
            "spec.type",
            format!(
                "`{kind}` is not supported: tasks use their nodes' network, so a Service is a \
                 name for its pods (ClusterIP or headless), with no node port, load balancer \
                 or external name"
            ),
        );
    }
    let headless = spec.cluster_ip.as_deref() == Some("None");
    if let Some(ip) = spec.cluster_ip.as_deref().filter(|ip| *ip != "None") {
        r.refuse(
            "spec.clusterIP",
            format!(
                "`{ip}`: cadre gives a Service no virtual address (its name resolves to its \
                 pod's node); leave it out, or `None` for a headless Service"
            ),
        );
    }
    if spec.external_ips.as_ref().is_some_and(|v| !v.is_empty()) {
        r.refuse(
            "spec.externalIPs",
            "not supported: tasks use their nodes' network",
        );
    }
    let selector: BTreeMap<String, String> = spec.selector.clone().unwrap_or_default();
    if selector.is_empty() {
        r.refuse(
            "spec.selector",
            "a Service without a selector (with Endpoints of its own) is not supported: \
             cadre's Services name the pods of a workload they select",
        );
    }
    let mut ports = Vec::new();
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let at = |f: &str| format!("spec.ports[{i}].{f}");
        let port = match u16::try_from(p.port) {
            Ok(n) if n > 0 => n,
            _ => {
                r.refuse(at("port"), format!("{} is not a port (1 to 65535)", p.port));
                continue;
            }
        };
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        match &p.target_port {
            None => {}
            Some(IntOrString::Int(t)) if *t == p.port => {}
            Some(t) => {
                let t = match t {
                    IntOrString::Int(n) => n.to_string(),
                    IntOrString::String(s) => s.clone(),
                };
                r.refuse(
                    at("targetPort"),
                    format!(
                        "`{t}`: cadre does not translate ports (tasks listen on their nodes' \
                         ports): give the port the pods listen on as `port`"
                    ),
                );
            }
        }
        if p.node_port.is_some() {
            r.refuse(at("nodePort"), "not supported: there are no node ports");
        }
        let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        if !matches!(protocol.as_str(), "TCP" | "UDP" | "SCTP") {
            r.refuse(
                at("protocol"),
                format!("`{protocol}` is not TCP, UDP or SCTP"),
            );
        }
        ports.push(ServicePort {
            name: p.name.clone(),
            port,
            protocol,
        });
    }
    r.finish(
        &object,
        Service {
            name,
            namespace,
            headless,
            selector,
            ports,
        },
    )
}

/// Why a Service that selects no pod of its apply's workloads is refused.
pub fn selects_nothing(s: &Service) -> String {
    format!(
        "service/{} in namespace {} selects no pod of a workload applied with it (selector \
         {}): cadre keeps a Service with the workloads it selects; apply them together",
        s.name,
        s.namespace,
        selector_text(s)
    )
}

/// `kubectl get services`' `SELECTOR` and `PORT(S)` columns.
pub fn selector_text(s: &Service) -> String {
    s.selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn ports_text(s: &Service) -> String {
    if s.ports.is_empty() {
        return "<none>".into();
    }
    s.ports
        .iter()
        .map(|p| format!("{}/{}", p.port, p.protocol))
        .collect::<Vec<_>>()
        .join(",")
}
