//! The Job and StatefulSet controllers: they expand those objects into pods as the real
//! controllers do and keep their status up to date. They only use the store, so they also run
//! next to an API server without pods ([`spawn`]).

use crate::api::defaults::{now_rfc3339, random_suffix};
use crate::api::resources::{JOBS, PODS, STATEFULSETS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

/// Runs the controllers until the store's event feed closes or the task is aborted.
pub fn spawn(store: Store) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store))
}

async fn run(store: Store) {
    let mut rx = store.subscribe();
    reconcile_all(&store);
    loop {
        match rx.recv().await {
            Ok(ev) => {
                let (ns, name) = (ev.namespace.as_str(), ev.name.as_str());
                if std::ptr::eq(ev.resource, &JOBS) {
                    if ev.kind != crate::api::EventType::Deleted {
                        reconcile_job(&store, ns, name);
                    }
                } else if std::ptr::eq(ev.resource, &STATEFULSETS) {
                    if ev.kind != crate::api::EventType::Deleted {
                        reconcile_sts(&store, ns, name);
                    }
                } else if std::ptr::eq(ev.resource, &PODS) {
                    for (kind, owner) in controller_of(&ev.object) {
                        match kind.as_str() {
                            "Job" => reconcile_job(&store, ns, &owner),
                            "StatefulSet" => reconcile_sts(&store, ns, &owner),
                            _ => {}
                        }
                    }
                }
            }
            Err(RecvError::Lagged(_)) => reconcile_all(&store),
            Err(RecvError::Closed) => return,
        }
    }
}

fn reconcile_all(store: &Store) {
    for (rt, f) in [
        (&JOBS, reconcile_job as fn(&Store, &str, &str)),
        (&STATEFULSETS, reconcile_sts),
    ] {
        if let Ok(l) = store.list(rt, None, &Default::default()) {
            for o in l.items {
                let ns = o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                f(store, &ns, &name);
            }
        }
    }
}

fn controller_of(pod: &Value) -> Vec<(String, String)> {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
                .map(|o| {
                    (
                        o["kind"].as_str().unwrap_or("").to_string(),
                        o["name"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn owner_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!([{
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

fn phase(p: &Value) -> &str {
    p.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending")
}

fn is_ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn owned_pods(store: &Store, owner: &Value) -> Vec<Arc<Value>> {
    let uid = owner["metadata"]["uid"].as_str().unwrap_or("");
    store
        .dependents(uid)
        .into_iter()
        .filter(|o| o["kind"] == "Pod" && o["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// "0-3,5,7-8" from a set of indexes.
pub fn compress_indexes(set: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = set.iter().peekable();
    while let Some(&start) = it.next() {
        let mut end = start;
        while it.peek().is_some_and(|&&n| n == end + 1) {
            end = *it.next().expect("peeked");
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

fn set_condition(conds: &mut Vec<Value>, ty: &str, reason: &str, message: &str) {
    if !conds.iter().any(|c| c["type"] == ty) {
        let now = now_rfc3339();
        conds.push(json!({
            "type": ty, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now,
        }));
    }
}

/// Brings one Job's pods and status in line with its spec.
pub fn reconcile_job(store: &Store, ns: &str, name: &str) {
    let Ok(job) = store.get(&JOBS, ns, name) else {
        return;
    };
    let spec = &job["spec"];
    let conds: Vec<Value> = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let finished = conds
        .iter()
        .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True");
    let pods = owned_pods(store, &job);
    let indexed = spec["completionMode"] == "Indexed";
    let completions = spec["completions"].as_i64();
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    let backoff = spec["backoffLimit"].as_i64().unwrap_or(6);
    let suspended = spec["suspend"].as_bool().unwrap_or(false);
    let active: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
        .collect();
    let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as i64;
    let index_of = |p: &Value| -> Option<i64> {
        p.pointer("/metadata/annotations")
            .and_then(|a| a.get(INDEX_KEY))
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
    };
    let succeeded_idx: BTreeSet<i64> = pods
        .iter()
        .filter(|p| phase(p) == "Succeeded")
        .filter_map(|p| index_of(p))
        .collect();
    let succeeded = if indexed {
        succeeded_idx.len() as i64
    } else {
        pods.iter().filter(|p| phase(p) == "Succeeded").count() as i64
    };
    let mut new_conds = conds.clone();
    let mut done_now = false;
    if !finished && !suspended {
        if failed > backoff {
            set_condition(
                &mut new_conds,
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            );
            set_condition(
                &mut new_conds,
                "Failed",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            );
            for p in &active {
                let pn = p["metadata"]["name"].as_str().unwrap_or("");
                let _ = store.delete(&PODS, ns, pn, &DeleteOptions::default());
            }
            done_now = true;
        } else {
            let complete = match completions {
                Some(c) => succeeded >= c,
                None => succeeded >= 1 && active.is_empty(),
            };
            if complete {
                set_condition(
                    &mut new_conds,
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                );
                set_condition(
                    &mut new_conds,
                    "Complete",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                );
                done_now = true;
            } else {
                create_job_pods(
                    store,
                    &job,
                    &active,
                    &succeeded_idx,
                    indexed,
                    completions,
                    parallelism,
                    succeeded,
                );
            }
        }
    }
    let active_now = owned_pods(store, &job)
        .iter()
        .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
        .count() as i64;
    let ready = owned_pods(store, &job)
        .iter()
        .filter(|p| is_ready(p))
        .count() as i64;
    let _ = store.modify(&JOBS, ns, name, Part::Status, |v| {
        let st = &mut v["status"];
        if !st.is_object() {
            *st = json!({});
        }
        if st.get("startTime").is_none() && !suspended {
            st["startTime"] = json!(now_rfc3339());
        }
        st["active"] = json!(if done_now || finished { 0 } else { active_now });
        st["ready"] = json!(ready);
        st["succeeded"] = json!(succeeded);
        st["failed"] = json!(failed);
        st["terminating"] = json!(0);
        st["uncountedTerminatedPods"] = json!({});
        if indexed {
            st["completedIndexes"] = json!(compress_indexes(&succeeded_idx));
        }
        if !new_conds.is_empty() {
            st["conditions"] = json!(new_conds);
        }
        if done_now
            && new_conds.iter().any(|c| c["type"] == "Complete")
            && st.get("completionTime").is_none()
        {
            st["completionTime"] = json!(now_rfc3339());
        }
        for k in ["active", "succeeded", "failed", "terminating"] {
            if st[k] == json!(0) {
                if let Some(m) = st.as_object_mut() {
                    m.remove(k);
                }
            }
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn create_job_pods(
    store: &Store,
    job: &Value,
    active: &[&Arc<Value>],
    succeeded_idx: &BTreeSet<i64>,
    indexed: bool,
    completions: Option<i64>,
    parallelism: i64,
    succeeded: i64,
) {
    let ns = job["metadata"]["namespace"].as_str().unwrap_or("");
    let name = job["metadata"]["name"].as_str().unwrap_or("");
    if indexed {
        let total = completions.unwrap_or(0);
        let active_idx: BTreeSet<i64> = active
            .iter()
            .filter_map(|p| {
                p.pointer("/metadata/annotations")
                    .and_then(|a| a.get(INDEX_KEY))
                    .and_then(Value::as_str)
            })
            .filter_map(|s| s.parse().ok())
            .collect();
        let want = parallelism.min(total - succeeded_idx.len() as i64) - active.len() as i64;
        let todo: Vec<i64> = (0..total)
            .filter(|i| !succeeded_idx.contains(i) && !active_idx.contains(i))
            .take(want.max(0) as usize)
            .collect();
        for i in todo {
            let _ = store.create(&PODS, ns, job_pod(job, Some(i)), false);
        }
    } else {
        let want = match completions {
            Some(c) => parallelism.min(c - succeeded),
            None => {
                if succeeded > 0 {
                    0
                } else {
                    parallelism
                }
            }
        } - active.len() as i64;
        for _ in 0..want.max(0) {
            let _ = store.create(&PODS, ns, job_pod(job, None), false);
        }
    }
    let _ = name;
}

/// The pod a Job controller makes for completion index `index` (None: non-indexed).
pub fn job_pod(job: &Value, index: Option<i64>) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or("");
    let tmpl = &job["spec"]["template"];
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": tmpl.get("metadata").cloned().unwrap_or(json!({})),
        "spec": tmpl.get("spec").cloned().unwrap_or(json!({})),
    });
    let m = &mut pod["metadata"];
    if !m.is_object() {
        *m = json!({});
    }
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(o) = m.as_object_mut() {
            o.remove(k);
        }
    }
    if !m["labels"].is_object() {
        m["labels"] = json!({});
    }
    if !m["annotations"].is_object() {
        m["annotations"] = json!({});
    }
    let uid = job["metadata"]["uid"].clone();
    m["labels"]["batch.kubernetes.io/controller-uid"] = uid.clone();
    m["labels"]["controller-uid"] = uid;
    m["labels"]["batch.kubernetes.io/job-name"] = json!(name);
    m["labels"]["job-name"] = json!(name);
    match index {
        Some(i) => {
            m["name"] = json!(format!("{name}-{i}-{}", random_suffix()));
            m["generateName"] = json!(format!("{name}-{i}-"));
            m["labels"][INDEX_KEY] = json!(i.to_string());
            m["annotations"][INDEX_KEY] = json!(i.to_string());
            pod["spec"]["hostname"] = json!(format!("{name}-{i}"));
            let env = json!({
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": format!("metadata.annotations['{INDEX_KEY}']")}},
            });
            for list in ["initContainers", "containers"] {
                if let Some(cs) = pod["spec"].get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs {
                        if !c["env"].is_array() {
                            c["env"] = json!([]);
                        }
                        c["env"].as_array_mut().expect("array").push(env.clone());
                    }
                }
            }
        }
        None => {
            m["name"] = json!(format!("{name}-{}", random_suffix()));
            m["generateName"] = json!(format!("{name}-"));
        }
    }
    pod["metadata"]["ownerReferences"] = owner_ref("batch/v1", "Job", job);
    pod
}

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
    let tmpl = &sts["spec"]["template"];
    let pod_name = format!("{name}-{i}");
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": tmpl.get("metadata").cloned().unwrap_or(json!({})),
        "spec": tmpl.get("spec").cloned().unwrap_or(json!({})),
    });
    let m = &mut pod["metadata"];
    if !m.is_object() {
        *m = json!({});
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::NAMESPACES;

    fn store() -> Store {
        let s = Store::new();
        s.create(
            &NAMESPACES,
            "",
            json!({"metadata": {"name": "default"}}),
            false,
        )
        .unwrap();
        s
    }

    #[test]
    fn indexes() {
        let s: BTreeSet<i64> = [0, 1, 2, 3, 5, 7, 8].into_iter().collect();
        assert_eq!(compress_indexes(&s), "0-3,5,7-8");
        assert_eq!(compress_indexes(&BTreeSet::new()), "");
    }

    #[test]
    fn indexed_job_expands_and_completes() {
        let s = store();
        s.create(
            &JOBS,
            "default",
            json!({"metadata": {"name": "j"}, "spec": {
                "completionMode": "Indexed", "completions": 3, "parallelism": 3,
                "template": {"spec": {"subdomain": "svc", "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}}}),
            false,
        )
        .unwrap();
        reconcile_job(&s, "default", "j");
        let pods = s
            .list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items;
        assert_eq!(pods.len(), 3);
        let mut idx: Vec<String> = pods
            .iter()
            .map(|p| {
                p["metadata"]["annotations"][INDEX_KEY]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        idx.sort();
        assert_eq!(idx, ["0", "1", "2"]);
        for p in &pods {
            let i = p["metadata"]["labels"][INDEX_KEY].as_str().unwrap();
            assert_eq!(p["spec"]["hostname"], format!("j-{i}"));
            assert_eq!(p["spec"]["subdomain"], "svc");
            assert_eq!(p["metadata"]["labels"]["job-name"], "j");
            assert!(p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with(&format!("j-{i}-")));
            assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Job");
            assert_eq!(
                p["spec"]["containers"][0]["env"][0]["name"],
                "JOB_COMPLETION_INDEX"
            );
        }
        // Reconciling again makes nothing new.
        reconcile_job(&s, "default", "j");
        assert_eq!(
            s.list(&PODS, Some("default"), &Default::default())
                .unwrap()
                .items
                .len(),
            3
        );
        for p in &pods {
            s.modify(
                &PODS,
                "default",
                p["metadata"]["name"].as_str().unwrap(),
                Part::Status,
                |v| v["status"]["phase"] = json!("Succeeded"),
            )
            .unwrap();
        }
        reconcile_job(&s, "default", "j");
        let j = s.get(&JOBS, "default", "j").unwrap();
        assert_eq!(j["status"]["succeeded"], 3);
        assert_eq!(j["status"]["completedIndexes"], "0-2");
        assert!(j["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Complete"));
        // Deleting the job deletes its pods.
        s.delete(&JOBS, "default", "j", &DeleteOptions::default())
            .unwrap();
        assert!(s
            .list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items
            .is_empty());
    }

    #[test]
    fn statefulset_ordered_ready() {
        let s = store();
        s.create(
            &STATEFULSETS,
            "default",
            json!({"metadata": {"name": "w"}, "spec": {
                "replicas": 2, "serviceName": "w",
                "selector": {"matchLabels": {"app": "w"}},
                "template": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c", "command": ["sleep", "9"]}]}}}}),
            false,
        )
        .unwrap();
        reconcile_sts(&s, "default", "w");
        let pods = s
            .list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items;
        assert_eq!(pods.len(), 1, "OrderedReady waits for w-0");
        assert_eq!(pods[0]["metadata"]["name"], "w-0");
        assert_eq!(
            pods[0]["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
            "0"
        );
        assert_eq!(pods[0]["spec"]["subdomain"], "w");
        s.modify(&PODS, "default", "w-0", Part::Status, |v| {
            v["status"]["phase"] = json!("Running");
            v["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        })
        .unwrap();
        reconcile_sts(&s, "default", "w");
        assert!(s.get(&PODS, "default", "w-1").is_ok());
        assert_eq!(
            s.get(&STATEFULSETS, "default", "w").unwrap()["status"]["readyReplicas"],
            1
        );
    }
}
