//! The allocation a discovery finds: the job's ready pods as PRRTE nodes, in allocation order.

use std::net::Ipv4Addr;

use super::record::PodRecord;

use super::error::DiscoveryError;
use super::slots::{self, SlotsPolicy};
use super::{order, readiness};
use crate::hostfile::Host;

/// One pod as a PRRTE node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodNode {
    pub pod: String,
    pub namespace: String,
    /// The name prted in that pod reports: spec.hostname if set, else the pod name.
    pub hostname: String,
    pub ip: Ipv4Addr,
    pub slots: u32,
    /// The pod's workload index (see [`super::order`]), if it has one.
    pub index: Option<u64>,
    /// Whether this is the pod discovery ran in.
    pub is_self: bool,
    pub uid: String,
}

/// The discovered allocation, nodes in allocation order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Allocation {
    pub namespace: String,
    pub selector: String,
    pub nodes: Vec<PodNode>,
}

impl Allocation {
    /// The nodes as a hostfile's lines, in allocation order.
    pub fn hosts(&self) -> Vec<Host> {
        self.nodes
            .iter()
            .map(|n| Host {
                ip: n.ip,
                hostname: n.hostname.clone(),
                slots: n.slots,
            })
            .collect()
    }

    /// Sum of the nodes' slots.
    pub fn total_slots(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.slots)).sum()
    }

    /// The node discovery ran in, if it is part of the allocation.
    pub fn self_node(&self) -> Option<&PodNode> {
        self.nodes.iter().find(|n| n.is_self)
    }
}

/// Turns ready pods (already in allocation order) into nodes.
pub fn build_nodes(
    pods: &[PodRecord],
    namespace: &str,
    policy: SlotsPolicy,
    is_self: impl Fn(&PodRecord) -> bool,
) -> Result<Vec<PodNode>, DiscoveryError> {
    let indices = order::reported_indices(pods);
    pods.iter()
        .zip(indices)
        .map(|(p, index)| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let ip = readiness::pod_ipv4(p).ok_or_else(|| DiscoveryError::Internal {
                detail: format!("ready pod {name} has no IPv4 address"),
            })?;
            let slots = slots::pod_slots(p, policy).map_err(|b| {
                DiscoveryError::InvalidSlotsAnnotation {
                    pod: name.clone(),
                    namespace: namespace.to_string(),
                    annotation: b.annotation.to_string(),
                    value: b.value,
                    reason: b.reason.to_string(),
                }
            })?;
            let hostname = p
                .spec
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| name.clone());
            Ok(PodNode {
                pod: name,
                namespace: namespace.to_string(),
                hostname,
                ip,
                slots,
                index,
                is_self: is_self(p),
                uid: p.metadata.uid.clone().unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::record::{RecordSpec, RecordStatus};
    use super::super::slots::SLOTS_ANNOTATION;
    use super::*;

    #[test]
    fn nodes_carry_hostname_slots_and_self() {
        let mk = |name: &str, hostname: Option<&str>, ip: &str, ann: Option<&str>| {
            let mut p = PodRecord::default();
            p.metadata.name = Some(name.into());
            p.metadata.uid = Some(format!("uid-{name}"));
            if let Some(a) = ann {
                p.metadata.annotations =
                    Some([(SLOTS_ANNOTATION.to_string(), a.to_string())].into());
            }
            p.spec = Some(RecordSpec {
                hostname: hostname.map(String::from),
                ..Default::default()
            });
            p.status = Some(RecordStatus {
                pod_ip: Some(ip.into()),
                ..Default::default()
            });
            p
        };
        let pods = vec![
            mk("a", Some("host-a"), "10.0.0.1", Some("4")),
            mk("b", None, "10.0.0.2", None),
        ];
        let nodes = build_nodes(&pods, "ns", SlotsPolicy::Auto, |p| {
            p.metadata.name.as_deref() == Some("b")
        })
        .unwrap();
        assert_eq!(nodes[0].hostname, "host-a");
        assert_eq!(nodes[0].slots, 4);
        assert!(!nodes[0].is_self);
        assert_eq!(nodes[1].hostname, "b");
        assert_eq!(nodes[1].ip, Ipv4Addr::new(10, 0, 0, 2));
        assert!(nodes[1].is_self);
        assert_eq!(nodes[1].uid, "uid-b");
        let bad = vec![mk("c", None, "10.0.0.3", Some("lots"))];
        let e = build_nodes(&bad, "ns", SlotsPolicy::Auto, |_| false).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("ns/c") && s.contains("\"lots\""), "{s}");
    }
}
