//! Names of objects: what every kind's reader checks of `metadata.name` and namespaces.

use crate::error::Refusals;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// `metadata.name`, refused when missing or empty.
pub(crate) fn name_of(meta: &ObjectMeta, r: &mut Refusals) -> String {
    match &meta.name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => {
            r.refuse("metadata.name", "missing");
            String::new()
        }
    }
}

/// A DNS-1123 label: what a namespace, and a pod's hostname part, must be.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: what most objects' names must be (a PersistentVolumeClaim's).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}
