//! The StatefulSet controller: ordinal pods (in order or in parallel) and the set's status.

use super::pods::{is_ready, owned_pods, owner_ref, phase, pod_from_template};
use crate::api::resources::{PODS, STATEFULSETS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

fn revision_hash(sts: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    sts["spec"]["template"].to_string().hash(&mut h);
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

/// The pod a StatefulSet controller makes for ordinal `i`.
pub fn sts_pod(sts: &Value, i: i64) -> Value {
    let name = sts["metadata"]["name"].as_str().unwrap_or("");
    let pod_name = format!("{name}-{i}");
    let mut pod = pod_from_template(sts);
    let m = &mut pod["metadata"];
    if !m["labels"].is_object() {
        m["labels"] = json!({});
    }
    m["name"] = json!(pod_name);
    m["generateName"] = json!(format!("{name}-"));
    m["labels"]["apps.kubernetes.io/pod-index"] = json!(i.to_string());
    m["labels"]["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
    m["labels"]["controller-revision-hash"] = json!(format!("{name}-{}", revision_hash(sts)));
    pod["spec"]["hostname"] = json!(pod_name);
    if let Some(svc) = sts["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        pod["spec"]["subdomain"] = json!(svc);
    }
    pod["metadata"]["ownerReferences"] = owner_ref("apps/v1", "StatefulSet", sts);
    pod
}

/// Brings one StatefulSet's pods and status in line with its spec.
pub fn reconcile_sts(store: &Store, ns: &str, name: &str) {
    let Ok(sts) = store.get(&STATEFULSETS, ns, name) else {
        return;
    };
    let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let parallel = sts["spec"]["podManagementPolicy"] == "Parallel";
    let prefix = format!("{name}-");
    let mut by_ord: BTreeMap<i64, Arc<Value>> = BTreeMap::new();
    for p in owned_pods(store, &sts) {
        if let Some(i) = p["metadata"]["name"]
            .as_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|s| s.parse().ok())
        {
            by_ord.insert(i, p);
        }
    }
    // Failed pods are deleted and made again, as the real controller does.
    for (i, p) in by_ord.clone() {
        if phase(&p) == "Failed" || i >= replicas {
            let _ = store.delete(
                &PODS,
                ns,
                p["metadata"]["name"].as_str().unwrap_or(""),
                &DeleteOptions::default(),
            );
            by_ord.remove(&i);
        }
    }
    for i in 0..replicas {
        match by_ord.get(&i) {
            Some(p) => {
                if !(parallel || phase(p) == "Running" && is_ready(p)) {
                    break;
                }
            }
            None => {
                if let Ok(p) = store.create(&PODS, ns, sts_pod(&sts, i), false) {
                    by_ord.insert(i, p);
                }
                if !parallel {
                    break;
                }
            }
        }
    }
    let pods = owned_pods(store, &sts);
    let ready = pods.iter().filter(|p| is_ready(p)).count() as i64;
    let revision = format!("{name}-{}", revision_hash(&sts));
    let generation = sts["metadata"]["generation"].clone();
    let _ = store.modify(&STATEFULSETS, ns, name, Part::Status, |v| {
        v["status"] = json!({
            "observedGeneration": generation,
            "replicas": pods.len(),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "currentReplicas": pods.len(),
            "updatedReplicas": pods.len(),
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        });
    });
}
