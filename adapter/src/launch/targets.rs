//! Where each new daemon is started: PRRTE's nodes resolved to the pods discovery allocated.
//!
//! The RAS side records every allocated pod under the node name PRRTE gives it (the pod's
//! hostname) in a [`PodTable`]; a round looks each node of its daemon map up there, so that the
//! launcher reaches the pod's agent at the pod IP and messages name the pod.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use super::error::UnresolvedNodes;

/// A pod discovery allocated, as the launcher needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAddr {
    pub pod: String,
    pub namespace: String,
    pub ip: Ipv4Addr,
}

/// The allocated pods by the node name PRRTE uses for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTable {
    by_node: BTreeMap<String, PodAddr>,
}

impl PodTable {
    pub const fn new() -> PodTable {
        PodTable {
            by_node: BTreeMap::new(),
        }
    }

    /// Records (or replaces) the pod behind node `node_name`.
    pub fn record(&mut self, node_name: &str, addr: PodAddr) {
        self.by_node.insert(node_name.to_string(), addr);
    }

    /// The pod behind a PRRTE node: by node name, or by IP when the name is one.
    pub fn lookup(&self, node_name: &str) -> Option<&PodAddr> {
        if let Some(a) = self.by_node.get(node_name) {
            return Some(a);
        }
        let ip: Ipv4Addr = node_name.parse().ok()?;
        self.by_node.values().find(|a| a.ip == ip)
    }
}

/// A node of PRRTE's daemon map that needs a daemon, as read from PRRTE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonNode {
    /// The vpid of the node's daemon.
    pub vpid: u32,
    /// The node's name.
    pub name: String,
    /// The name the node was given by (PRRTE's `rawname`), which may be an IP address.
    pub raw_name: Option<String>,
}

/// A daemon to start, resolved to its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonTarget {
    pub vpid: u32,
    /// The pod's name (the node's name for a node given by IP address outside the table).
    pub pod: String,
    /// PRRTE's node name, for messages.
    pub node: String,
    /// Where the pod's agent is reached.
    pub ip: IpAddr,
}

/// Resolves every node to its pod: the node's raw name when it is an IP address, else the
/// table's pod IP. A node with neither fails the whole round, naming every such node.
pub fn resolve(
    nodes: &[DaemonNode],
    pods: &PodTable,
) -> Result<Vec<DaemonTarget>, UnresolvedNodes> {
    let mut targets = Vec::with_capacity(nodes.len());
    let mut unresolved = Vec::new();
    for node in nodes {
        let known = pods.lookup(&node.name);
        let ip = node
            .raw_name
            .as_deref()
            .and_then(|r| r.parse::<IpAddr>().ok())
            .or_else(|| known.map(|a| IpAddr::V4(a.ip)));
        match ip {
            Some(ip) => targets.push(DaemonTarget {
                vpid: node.vpid,
                pod: known.map_or_else(|| node.name.clone(), |a| a.pod.clone()),
                node: node.name.clone(),
                ip,
            }),
            None => unresolved.push(node.name.clone()),
        }
    }
    if !unresolved.is_empty() {
        return Err(UnresolvedNodes(unresolved));
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PodTable {
        let mut t = PodTable::new();
        t.record(
            "w-0",
            PodAddr {
                pod: "job-0-abcde".into(),
                namespace: "ns".into(),
                ip: Ipv4Addr::new(10, 250, 3, 2),
            },
        );
        t
    }

    fn node(vpid: u32, name: &str, raw: Option<&str>) -> DaemonNode {
        DaemonNode {
            vpid,
            name: name.into(),
            raw_name: raw.map(String::from),
        }
    }

    #[test]
    fn lookup_by_name_and_ip() {
        let t = table();
        assert_eq!(t.lookup("w-0").unwrap().pod, "job-0-abcde");
        assert_eq!(t.lookup("10.250.3.2").unwrap().pod, "job-0-abcde");
        assert!(t.lookup("w-1").is_none());
        assert!(t.lookup("10.250.3.3").is_none());
    }

    #[test]
    fn nodes_resolve_to_their_pods() {
        let got = resolve(
            &[
                node(1, "w-0", Some("10.250.3.2")),
                node(2, "w-0", None),
                node(3, "10.250.3.9", Some("10.250.3.9")),
            ],
            &table(),
        )
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            got,
            vec![
                DaemonTarget {
                    vpid: 1,
                    pod: "job-0-abcde".into(),
                    node: "w-0".into(),
                    ip: ip("10.250.3.2"),
                },
                DaemonTarget {
                    vpid: 2,
                    pod: "job-0-abcde".into(),
                    node: "w-0".into(),
                    ip: ip("10.250.3.2"),
                },
                // Given by IP address, not allocated by the RAS: named by its node name.
                DaemonTarget {
                    vpid: 3,
                    pod: "10.250.3.9".into(),
                    node: "10.250.3.9".into(),
                    ip: ip("10.250.3.9"),
                },
            ]
        );
    }

    #[test]
    fn unresolvable_nodes_are_all_named() {
        let e = resolve(
            &[
                node(1, "w-0", None),
                node(2, "other-a", Some("other-a")),
                node(3, "other-b", None),
            ],
            &table(),
        )
        .unwrap_err();
        assert_eq!(e.0, ["other-a", "other-b"]);
        let e = e.to_string();
        assert!(
            e.starts_with("no pod IP is known for node(s) other-a, other-b.")
                && e.contains("--prtemca ras k8s"),
            "{e}"
        );
    }
}
