//! The NetworkPolicy: in, exactly the job's pinned ports, only from the job's own pods; out,
//! only to the job's own pods (the same ports), the cluster DNS and the Kubernetes API.

use serde_json::{json, Value};

use super::layout::{AGENT_PORT, BTL_PORT_MIN, BTL_PORT_RANGE, HEALTH_PORT, OOB_PORT, TOOL_PORT};
use super::meta::{job_label, meta, names};
use super::plan::JobPlan;

/// The ports the API server's endpoints listen on: 443 (managed clusters), 6443 (kubeadm).
/// A NetworkPolicy sees the endpoint, not the `kubernetes` Service's address.
const API_PORTS: [u16; 2] = [443, 6443];

/// Address ranges never reachable by default: IPv4 link-local, where clouds serve instance
/// metadata and credentials (169.254.169.254).
const LINK_LOCAL: &str = "169.254.0.0/16";

/// The peers the pods may reach the API server at: the given ranges (or those the cluster
/// named), else any IPv4 address but link-local ones.
fn api_peers(a: &JobPlan) -> Vec<Value> {
    if a.api_server.cidrs.is_empty() {
        return vec![json!({"ipBlock": {"cidr": "0.0.0.0/0", "except": [LINK_LOCAL]}})];
    }
    a.api_server
        .cidrs
        .iter()
        .map(|n| json!({"ipBlock": {"cidr": n.trunc().to_string()}}))
        .collect()
}

/// The NetworkPolicy of the job.
pub(super) fn network_policy(a: &JobPlan) -> Value {
    let (lk, lv) = job_label(a);
    let batch = a.batch();
    let mut ports = vec![
        json!({"protocol": "TCP", "port": AGENT_PORT}),
        json!({"protocol": "TCP", "port": HEALTH_PORT}),
    ];
    if !batch {
        ports.push(json!({"protocol": "TCP", "port": TOOL_PORT}));
    }
    ports.push(json!({"protocol": "TCP", "port": OOB_PORT}));
    ports.push(json!({"protocol": "TCP", "port": BTL_PORT_MIN, "endPort": BTL_PORT_MIN + BTL_PORT_RANGE - 1}));
    let own = json!({"podSelector": {"matchLabels": {lk: lv.clone()}}});
    let dns = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    });
    let given = &a.api_server.ports;
    let api_ports: Vec<Value> = if given.is_empty() {
        &API_PORTS[..]
    } else {
        given
    }
    .iter()
    .map(|p| json!({"protocol": "TCP", "port": p}))
    .collect();
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(a, &names(a).policy), "spec": {
        "podSelector": {"matchLabels": {lk: lv}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [own.clone()], "ports": ports.clone()}],
        "egress": [
            {"to": [own], "ports": ports},
            {"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            {"to": api_peers(a), "ports": api_ports},
        ],
    }})
}
