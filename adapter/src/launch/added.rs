//! Hosts added to a running DVM (`prun --add-host`, a spawn with `PMIX_ADD_HOST`, `prrte-k8s
//! grow`): a later round's nodes that the RAS never allocated are resolved to ready pods of the
//! same job through a new discovery, and a host that is not one is refused, named.
//!
//! [`unknown_nodes`] says which nodes of a round need it; the PLM runs discovery on its own
//! thread (it waits for the job's pods as `ras k8s` does: same readiness rules and timeout)
//! and hands the allocation to [`resolve_added`], whose pods are then recorded in the
//! [`PodTable`] so that [`super::targets::resolve`] finds them.

use std::net::IpAddr;

use super::targets::{DaemonNode, PodAddr, PodTable};
use crate::discovery::Allocation;

/// The names of the nodes the pod table does not know and that are not given by IP address
/// (each once, in order).
pub fn unknown_nodes(nodes: &[DaemonNode], pods: &PodTable) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in nodes {
        let by_ip = n
            .raw_name
            .as_deref()
            .is_some_and(|r| r.parse::<IpAddr>().is_ok());
        if pods.lookup(&n.name).is_none() && !by_ip && !out.contains(&n.name) {
            out.push(n.name.clone());
        }
    }
    out
}

/// Hosts added to the DVM that are not ready pods of the job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.sentence())]
pub struct NotJobPods {
    pub hosts: Vec<String>,
    pub namespace: String,
    pub selector: String,
}

impl NotJobPods {
    fn sentence(&self) -> String {
        let what = if self.hosts.len() == 1 {
            "is not a ready pod"
        } else {
            "are not ready pods"
        };
        format!(
            "host(s) {} added to the DVM {what} of this job (namespace {}, selector {}): add \
             only the host names of the job's own pods (`prrte-k8s grow N` raises the job and \
             adds its new pods)",
            self.hosts.join(", "),
            self.namespace,
            self.selector
        )
    }
}

/// Each added host as the ready pod of the job it names (by host name, or pod name), from a
/// discovery's allocation; every host that names none is refused, all named.
pub fn resolve_added(
    hosts: &[String],
    alloc: &Allocation,
) -> Result<Vec<(String, PodAddr)>, NotJobPods> {
    let mut found = Vec::with_capacity(hosts.len());
    let mut missing = Vec::new();
    for h in hosts {
        match alloc.nodes.iter().find(|n| n.hostname == *h || n.pod == *h) {
            Some(n) => found.push((
                h.clone(),
                PodAddr {
                    pod: n.pod.clone(),
                    namespace: n.namespace.clone(),
                    ip: n.ip,
                },
            )),
            None => missing.push(h.clone()),
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(NotJobPods {
            hosts: missing,
            namespace: alloc.namespace.clone(),
            selector: alloc.selector.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::PodNode;
    use std::net::Ipv4Addr;

    fn pod(i: u8) -> PodNode {
        PodNode {
            pod: format!("el-{i}-x{i}"),
            namespace: "ns".into(),
            hostname: format!("el-{i}"),
            ip: Ipv4Addr::new(10, 0, 0, 10 + i),
            slots: 2,
            index: Some(u64::from(i)),
            is_self: i == 0,
            uid: format!("u{i}"),
        }
    }

    fn alloc(n: u8) -> Allocation {
        Allocation {
            namespace: "ns".into(),
            selector: "batch.kubernetes.io/job-name=el".into(),
            nodes: (0..n).map(pod).collect(),
        }
    }

    fn node(vpid: u32, name: &str, raw: Option<&str>) -> DaemonNode {
        DaemonNode {
            vpid,
            name: name.into(),
            raw_name: raw.map(String::from),
        }
    }

    #[test]
    fn only_nodes_neither_allocated_nor_given_by_ip_are_unknown() {
        let mut t = PodTable::new();
        let a = alloc(1);
        t.record(
            "el-0",
            resolve_added(&["el-0".into()], &a).unwrap()[0].1.clone(),
        );
        let nodes = [
            node(1, "el-0", None),
            node(4, "el-4", Some("el-4")),
            node(5, "el-5", None),
            node(6, "10.0.0.99", Some("10.0.0.99")),
            node(7, "el-4", None),
        ];
        assert_eq!(unknown_nodes(&nodes, &t), ["el-4", "el-5"]);
    }

    #[test]
    fn added_hosts_resolve_to_the_jobs_ready_pods() {
        let got = resolve_added(&["el-4".into(), "el-5-x5".into()], &alloc(6)).unwrap();
        assert_eq!(got[0].0, "el-4");
        assert_eq!(got[0].1.pod, "el-4-x4");
        assert_eq!(got[0].1.ip, Ipv4Addr::new(10, 0, 0, 14));
        assert_eq!(got[1].0, "el-5-x5");
        assert_eq!(got[1].1.ip, Ipv4Addr::new(10, 0, 0, 15));
    }

    #[test]
    fn a_host_that_is_not_a_ready_pod_of_the_job_is_refused_by_name() {
        let e = resolve_added(
            &["el-4".into(), "intruder".into(), "el-9".into()],
            &alloc(6),
        )
        .unwrap_err();
        assert_eq!(e.hosts, ["intruder", "el-9"]);
        let text = e.to_string();
        assert!(
            text.starts_with("host(s) intruder, el-9 added to the DVM are not ready pods of this job (namespace ns, selector batch.kubernetes.io/job-name=el)"),
            "{text}"
        );
        let one = resolve_added(&["x".into()], &alloc(1))
            .unwrap_err()
            .to_string();
        assert!(
            one.contains("x added to the DVM is not a ready pod"),
            "{one}"
        );
    }
}
