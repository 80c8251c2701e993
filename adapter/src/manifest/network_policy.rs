//! The NetworkPolicy: in, exactly the job's pinned ports, only from the job's own pods; out,
//! only to the job's own pods (the same ports), the cluster DNS and the Kubernetes API.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::api_server::ApiServer;
use super::layout::{AGENT_PORT, BTL_PORT_MIN, BTL_PORT_RANGE, HEALTH_PORT, OOB_PORT, TOOL_PORT};
use super::meta::{job_label, meta, names};
use super::plan::JobPlan;

/// The ports the API server's endpoints listen on: 443 (managed clusters), 6443 (kubeadm).
/// A NetworkPolicy sees the endpoint, not the `kubernetes` Service's address.
const API_PORTS: [u16; 2] = [443, 6443];

/// Address ranges never reachable by default: IPv4 link-local, where clouds serve instance
/// metadata and credentials (169.254.169.254).
const LINK_LOCAL: &str = "169.254.0.0/16";

/// The DNS service's port.
const DNS_PORT: u16 = 53;

/// The peers the pods may reach the API server at: the given ranges (or those the cluster
/// named), else any IPv4 address but link-local ones.
fn api_peers(api: &ApiServer) -> Vec<NetworkPolicyPeer> {
    let block = |cidr: String, except: Option<Vec<String>>| NetworkPolicyPeer {
        ip_block: Some(IPBlock { cidr, except }),
        ..Default::default()
    };
    if api.cidrs.is_empty() {
        return vec![block("0.0.0.0/0".into(), Some(vec![LINK_LOCAL.into()]))];
    }
    api.cidrs
        .iter()
        .map(|n| block(n.trunc().to_string(), None))
        .collect()
}

/// The API server's ports: the given ones (or those the cluster named), else [`API_PORTS`].
fn api_ports(api: &ApiServer) -> Vec<NetworkPolicyPort> {
    let given = &api.ports;
    let ports = if given.is_empty() {
        &API_PORTS[..]
    } else {
        given
    };
    ports.iter().map(|p| port("TCP", *p)).collect()
}

/// Out to the Kubernetes API only, where a job's pods may reach it: the controller's own
/// NetworkPolicy.
pub(crate) fn api_egress(api: &ApiServer) -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: Some(api_peers(api)),
        ports: Some(api_ports(api)),
    }
}

/// `port` of `protocol`.
fn port(protocol: &str, port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(IntOrString::Int(port.into())),
        end_port: None,
    }
}

/// Pods whose labels are exactly `labels`.
fn selector<const N: usize>(labels: [(&str, &str); N]) -> Option<LabelSelector> {
    let labels: BTreeMap<String, String> = labels
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some(LabelSelector {
        match_labels: Some(labels),
        match_expressions: None,
    })
}

/// The job's pinned ports: the agent's, its health endpoint's, the DVM's tool port (an
/// interactive job's), PRRTE's OOB and Open MPI's TCP BTL range.
fn job_ports(batch: bool) -> Vec<NetworkPolicyPort> {
    let mut ports = vec![port("TCP", AGENT_PORT), port("TCP", HEALTH_PORT)];
    if !batch {
        ports.push(port("TCP", TOOL_PORT));
    }
    ports.push(port("TCP", OOB_PORT));
    ports.push(NetworkPolicyPort {
        end_port: Some((BTL_PORT_MIN + BTL_PORT_RANGE - 1).into()),
        ..port("TCP", BTL_PORT_MIN)
    });
    ports
}

/// The NetworkPolicy of the job.
pub(super) fn network_policy(a: &JobPlan) -> NetworkPolicy {
    let (lk, lv) = job_label(a);
    let ports = job_ports(a.batch());
    let own = NetworkPolicyPeer {
        pod_selector: selector([(lk, lv.as_str())]),
        ..Default::default()
    };
    let dns = NetworkPolicyPeer {
        namespace_selector: selector([("kubernetes.io/metadata.name", "kube-system")]),
        pod_selector: selector([("k8s-app", "kube-dns")]),
        ip_block: None,
    };
    let egress =
        |to: Vec<NetworkPolicyPeer>, ports: Vec<NetworkPolicyPort>| NetworkPolicyEgressRule {
            to: Some(to),
            ports: Some(ports),
        };
    NetworkPolicy {
        metadata: meta(a, &names(a).policy),
        spec: Some(NetworkPolicySpec {
            pod_selector: selector([(lk, lv.as_str())]),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![own.clone()]),
                ports: Some(ports.clone()),
            }]),
            egress: Some(vec![
                egress(vec![own], ports),
                egress(
                    vec![dns],
                    vec![port("UDP", DNS_PORT), port("TCP", DNS_PORT)],
                ),
                egress(api_peers(&a.api_server), api_ports(&a.api_server)),
            ]),
        }),
    }
}
