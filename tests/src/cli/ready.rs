//! Waiting until the applied workload's pods are Ready.

use crate::api::resources::{JOBS, STATEFULSETS};
use crate::api::Obj;
use crate::cluster::{self, Cluster};
use anyhow::{anyhow, Result};
use std::time::{Duration, Instant};

/// The pods an applied object stands for: (namespace, label selector, count, what).
fn expected_pods(store: &crate::api::Store, o: &Obj) -> Option<(String, String, usize, String)> {
    let ns = o["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
    match o["kind"].as_str()? {
        "Pod" => Some((ns, format!("pod-name-is={name}"), 1, format!("pod {name}"))),
        "Job" => {
            let j = store.get(&JOBS, &ns, &name).ok()?;
            let par = j["spec"]["parallelism"].as_i64().unwrap_or(1);
            let n = j["spec"]["completions"]
                .as_i64()
                .map_or(par, |c| c.min(par)) as usize;
            let uid = j["metadata"]["uid"].as_str().unwrap_or("");
            Some((
                ns,
                format!("batch.kubernetes.io/controller-uid={uid}"),
                n,
                format!("job {name}"),
            ))
        }
        "StatefulSet" => {
            let s = store.get(&STATEFULSETS, &ns, &name).ok()?;
            let n = s["spec"]["replicas"].as_i64().unwrap_or(1) as usize;
            let sel = s["spec"]["selector"]["matchLabels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            Some((ns, sel, n, format!("statefulset {name}")))
        }
        _ => None,
    }
}

pub(super) async fn wait_workload(c: &Cluster, applied: &[Obj], timeout: Duration) -> Result<()> {
    let store = c.store();
    let deadline = Instant::now() + timeout;
    for o in applied {
        let Some((ns, sel, n, what)) = expected_pods(&store, o) else {
            continue;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let (sel, pinned) = match sel.strip_prefix("pod-name-is=") {
            Some(name) => (String::new(), Some(name.to_string())),
            None => (sel, None),
        };
        cluster::wait_pods(&store, &ns, &sel, left, |pods| {
            let mine: Vec<&Obj> = pods
                .iter()
                .filter(|p| {
                    pinned
                        .as_ref()
                        .is_none_or(|n| p["metadata"]["name"] == n.as_str())
                })
                .collect();
            if let Some(f) = mine.iter().find(|p| p["status"]["phase"] == "Failed") {
                return Some(Err(anyhow!(
                    "{what}: pod failed:\n  {}",
                    cluster::describe_pods(std::slice::from_ref(f))
                )));
            }
            let ready = mine
                .iter()
                .filter(|p| cluster::pod_ready(p) || p["status"]["phase"] == "Succeeded")
                .count();
            (ready >= n).then_some(Ok(()))
        })
        .await
        .map_err(|e| anyhow!("{what}: {n} pod(s) did not become Ready: {e}"))??;
    }
    Ok(())
}
