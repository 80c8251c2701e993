//! The Deployment and ReplicaSet controllers. A Deployment keeps one ReplicaSet per pod
//! template (named after the template's hash, labelled `pod-template-hash`) at its replicas
//! and the older ones at none; a ReplicaSet keeps its replicas of active pods (a deleted or
//! ended pod is replaced, extra ones deleted). Their status carries what `kubectl rollout
//! status` and `kubectl wait --for=condition=Available` read. A new template replaces the
//! old pods at once (no gradual rolling update).

use super::pods::{is_ready, owned, owned_pods, owner_ref, phase, pod_from_template};
use crate::api::defaults::now_rfc3339;
use crate::api::resources::{DEPLOYMENTS, PODS, REPLICASETS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};
use std::hash::{Hash, Hasher};

#[cfg(test)]
mod tests;

/// The label a Deployment's ReplicaSets and their pods carry.
const HASH_LABEL: &str = "pod-template-hash";

fn template_hash(d: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    d["spec"]["template"].to_string().hash(&mut h);
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = h.finish();
    (0..10)
        .map(|_| {
            let c = ALPHA[(n % ALPHA.len() as u64) as usize] as char;
            n /= ALPHA.len() as u64;
            c
        })
        .collect()
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

fn replicas(o: &Value) -> i64 {
    o["spec"]["replicas"].as_i64().unwrap_or(1).max(0)
}

fn status_count(o: &Value, f: &str) -> i64 {
    o["status"][f].as_i64().unwrap_or(0)
}

/// The ReplicaSet Deployment `d` wants for its current template.
fn new_replicaset(d: &Value, hash: &str) -> Value {
    let name = format!("{}-{hash}", name_of(d));
    let mut template = d["spec"]["template"].clone();
    if !template["metadata"]["labels"].is_object() {
        template["metadata"]["labels"] = json!({});
    }
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = d["spec"]["selector"].clone();
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = json!({});
    }
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "labels": template["metadata"]["labels"],
            "ownerReferences": owner_ref("apps/v1", "Deployment", d),
        },
        "spec": {"replicas": replicas(d), "selector": selector, "template": template},
    })
}

/// Brings one Deployment's ReplicaSets and status in line with its spec.
pub fn reconcile_deployment(store: &Store, ns: &str, name: &str) {
    let Ok(d) = store.get(&DEPLOYMENTS, ns, name) else {
        return;
    };
    if !d["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let hash = template_hash(&d);
    let want = replicas(&d);
    let mut current = None;
    for rs in owned(store, &d, "ReplicaSet") {
        let is_new = rs["metadata"]["labels"][HASH_LABEL] == json!(hash);
        let target = if is_new { want } else { 0 };
        if is_new {
            current = Some(rs.clone());
        }
        if replicas(&rs) != target {
            let _ = store.modify(&REPLICASETS, ns, name_of(&rs), Part::Main, |v| {
                v["spec"]["replicas"] = json!(target)
            });
        }
    }
    if current.is_none() {
        current = store
            .create(&REPLICASETS, ns, new_replicaset(&d, &hash), false)
            .ok();
    }
    let all = owned(store, &d, "ReplicaSet");
    let sum = |f: &str| all.iter().map(|rs| status_count(rs, f)).sum::<i64>();
    let updated = current
        .as_ref()
        .and_then(|c| all.iter().find(|rs| name_of(rs) == name_of(c)))
        .map_or(0, |rs| status_count(rs, "replicas"));
    let (total, ready, available) = (
        sum("replicas"),
        sum("readyReplicas"),
        sum("availableReplicas"),
    );
    let max_unavailable = max_unavailable(&d, want);
    let now = now_rfc3339();
    let cond = |ty: &str, ok: bool, reason: &str, message: String| {
        json!({"type": ty, "status": if ok { "True" } else { "False" }, "reason": reason,
               "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let available_ok = available >= want - max_unavailable;
    let complete = updated == want && total == want && available >= want;
    let rs_name = current.as_ref().map_or("", |c| name_of(c)).to_string();
    let conditions = vec![
        if available_ok {
            cond(
                "Available",
                true,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            )
        } else {
            cond(
                "Available",
                false,
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            )
        },
        if complete {
            cond(
                "Progressing",
                true,
                "NewReplicaSetAvailable",
                format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            )
        } else {
            cond(
                "Progressing",
                true,
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{rs_name}\" is progressing."),
            )
        },
    ];
    let generation = d["metadata"]["generation"].clone();
    let _ = store.modify(&DEPLOYMENTS, ns, name, Part::Status, |v| {
        let old = v["status"]["conditions"].clone();
        let mut conditions = conditions;
        // A condition that did not change keeps its times.
        for c in conditions.iter_mut() {
            if let Some(o) = old.as_array().and_then(|a| {
                a.iter().find(|o| {
                    o["type"] == c["type"]
                        && o["status"] == c["status"]
                        && o["reason"] == c["reason"]
                })
            }) {
                c["lastUpdateTime"] = o["lastUpdateTime"].clone();
                c["lastTransitionTime"] = o["lastTransitionTime"].clone();
            }
        }
        v["status"] = json!({
            "observedGeneration": generation,
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": (want - available).max(0),
            "conditions": conditions,
        });
    });
}

/// How many of `want` pods may be unavailable (`strategy.rollingUpdate.maxUnavailable`, a
/// number or a percentage rounded down).
fn max_unavailable(d: &Value, want: i64) -> i64 {
    match &d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map_or(0, |p| want * p / 100),
        _ => 0,
    }
}

/// Whether pod `p` counts toward its ReplicaSet's replicas: not ended, not being deleted.
fn active(p: &Value) -> bool {
    p["metadata"]["deletionTimestamp"].is_null() && !matches!(phase(p), "Succeeded" | "Failed")
}

/// Brings one ReplicaSet's pods and status in line with its spec.
pub fn reconcile_replicaset(store: &Store, ns: &str, name: &str) {
    let Ok(rs) = store.get(&REPLICASETS, ns, name) else {
        return;
    };
    if !rs["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let want = replicas(&rs);
    let mut pods: Vec<_> = owned_pods(store, &rs)
        .into_iter()
        .filter(|p| active(p))
        .collect();
    for _ in pods.len() as i64..want {
        let mut pod = pod_from_template(&rs);
        pod["metadata"]["generateName"] = json!(format!("{name}-"));
        pod["metadata"]["ownerReferences"] = owner_ref("apps/v1", "ReplicaSet", &rs);
        if let Ok(p) = store.create(&PODS, ns, pod, false) {
            pods.push(p);
        }
    }
    if pods.len() as i64 > want {
        // Not ready ones first, then the newest.
        pods.sort_by_key(|p| {
            let created = p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (is_ready(p), std::cmp::Reverse(created))
        });
        let extra = pods.len() - want as usize;
        for p in pods.drain(..extra) {
            let _ = store.delete(&PODS, ns, name_of(&p), &DeleteOptions::default());
        }
    }
    let ready = pods.iter().filter(|p| is_ready(p)).count();
    let generation = rs["metadata"]["generation"].clone();
    let _ = store.modify(&REPLICASETS, ns, name, Part::Status, |v| {
        v["status"] = json!({
            "observedGeneration": generation,
            "replicas": pods.len(),
            "fullyLabeledReplicas": pods.len(),
            "readyReplicas": ready,
            "availableReplicas": ready,
        });
    });
}
