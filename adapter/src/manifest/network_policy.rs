//! The NetworkPolicy: exactly the job's pinned ports, only from the job's own pods.

use serde_json::{json, Value};

use super::layout::{AGENT_PORT, BTL_PORT_MIN, BTL_PORT_RANGE, HEALTH_PORT, OOB_PORT, TOOL_PORT};
use super::meta::{job_label, meta, names};
use super::plan::JobPlan;

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
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(a, &names(a).policy), "spec": {
        "podSelector": {"matchLabels": {lk: lv.clone()}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {lk: lv}}}], "ports": ports}],
    }})
}
