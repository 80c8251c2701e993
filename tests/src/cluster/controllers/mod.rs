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
    // Deadlines and TTLs are reconciled as time passes.
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = tick.tick() => {
                reconcile_timed_jobs(&store);
                continue;
            }
        };
        match ev {
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

/// Parses "0-3,5" (a Job's index set); None if malformed.
pub fn parse_indexes(text: &str) -> Option<BTreeSet<i64>> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i64, i64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.parse().ok()?);
            }
        }
    }
    Some(out)
}

/// The first `successPolicy` rule the succeeded indexes meet, by position.
pub fn success_rule_met(policy: &Value, succeeded: &BTreeSet<i64>) -> Option<usize> {
    let rules = policy["rules"].as_array()?;
    rules.iter().position(|r| {
        let subset: Option<BTreeSet<i64>> = r["succeededIndexes"].as_str().and_then(parse_indexes);
        let within = match &subset {
            Some(set) => succeeded.intersection(set).count() as i64,
            None => succeeded.len() as i64,
        };
        match (&subset, r["succeededCount"].as_i64()) {
            (Some(set), None) => set.is_subset(succeeded),
            (_, Some(n)) => within >= n,
            (None, None) => false,
        }
    })
}

/// What a `podFailurePolicy` says about a failed pod: the rule's action, its index and the
/// message the Job controller writes.
pub fn pod_failure_rule(policy: &Value, pod: &Value) -> Option<(String, usize, String)> {
    let rules = policy["rules"].as_array()?;
    let pod_name = format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or(""),
        pod["metadata"]["name"].as_str().unwrap_or("")
    );
    for (i, r) in rules.iter().enumerate() {
        let action = r["action"].as_str().unwrap_or("Count").to_string();
        if let Some(oc) = r.get("onExitCodes").filter(|v| v.is_object()) {
            let values: Vec<i64> = oc["values"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let want_in = oc["operator"] != "NotIn";
            let only = oc["containerName"].as_str();
            let statuses = pod
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for cs in statuses {
                if only.is_some_and(|n| cs["name"] != n) {
                    continue;
                }
                let Some(code) = cs
                    .pointer("/state/terminated/exitCode")
                    .and_then(Value::as_i64)
                else {
                    continue;
                };
                if code == 0 {
                    continue;
                }
                if values.contains(&code) == want_in {
                    let msg = format!(
                        "Container {} for pod {pod_name} failed with exit code {code} matching {action} rule at index {i}",
                        cs["name"].as_str().unwrap_or("")
                    );
                    return Some((action, i, msg));
                }
            }
        }
        if let Some(pcs) = r.get("onPodConditions").and_then(Value::as_array) {
            let conds = pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for pc in pcs {
                // Defaults to True (the typed round trip of the store leaves it empty).
                let status = pc["status"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("True");
                if conds
                    .iter()
                    .any(|c| c["type"] == pc["type"] && c["status"] == status)
                {
                    let msg = format!(
                        "Pod {pod_name} has condition {} matching {action} rule at index {i}",
                        pc["type"].as_str().unwrap_or("")
                    );
                    return Some((action, i, msg));
                }
            }
        }
    }
    None
}

fn seconds_since(rfc3339: &str) -> Option<i64> {
    let t: k8s_openapi::jiff::Timestamp = rfc3339.parse().ok()?;
    Some(crate::api::defaults::now_secs() - t.as_second())
}

fn condition_true<'a>(conds: &'a [Value], ty: &str) -> Option<&'a Value> {
    conds
        .iter()
        .find(|c| c["type"] == ty && c["status"] == "True")
}

/// Brings one Job's pods and status in line with its spec: Indexed or not, backoffLimit,
/// successPolicy, podFailurePolicy (FailJob, Ignore, Count), activeDeadlineSeconds,
/// ttlSecondsAfterFinished, and the conditions Complete, Failed, SuccessCriteriaMet and
/// FailureTarget. A finishing Job's remaining pods are deleted (terminated by the kubelet).
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
    let finished_cond = condition_true(&conds, "Complete")
        .or_else(|| condition_true(&conds, "Failed"))
        .cloned();
    // ttlSecondsAfterFinished: the Job (and with it its pods) goes.
    if let (Some(c), Some(ttl)) = (&finished_cond, spec["ttlSecondsAfterFinished"].as_i64()) {
        if seconds_since(c["lastTransitionTime"].as_str().unwrap_or(""))
            .is_some_and(|age| age >= ttl)
        {
            let opts = DeleteOptions {
                propagation: Some("Background".into()),
                ..Default::default()
            };
            let _ = store.delete(&JOBS, ns, name, &opts);
            return;
        }
    }
    let finished = finished_cond.is_some();
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
    let failure_policy = &spec["podFailurePolicy"];
    // Failed pods and what the pod failure policy says about each.
    let mut fail_job: Option<String> = None;
    let mut failed = 0i64;
    for p in pods.iter().filter(|p| phase(p) == "Failed") {
        match pod_failure_rule(failure_policy, p) {
            Some((action, _, msg)) if action == "FailJob" => {
                failed += 1;
                fail_job.get_or_insert(msg);
            }
            Some((action, _, _)) if action == "Ignore" => {}
            _ => failed += 1,
        }
    }
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
    let deadline_passed = spec["activeDeadlineSeconds"].as_i64().is_some_and(|limit| {
        job.pointer("/status/startTime")
            .and_then(Value::as_str)
            .and_then(seconds_since)
            .is_some_and(|age| age >= limit)
    });
    let mut new_conds = conds.clone();
    let mut done_now = false;
    let mut terminate = false;
    if !finished && !suspended {
        let failure = if let Some(msg) = fail_job {
            Some(("PodFailurePolicy", msg))
        } else if failed > backoff {
            Some((
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".to_string(),
            ))
        } else if deadline_passed {
            Some((
                "DeadlineExceeded",
                "Job was active longer than specified deadline".to_string(),
            ))
        } else {
            None
        };
        let success_rule = if indexed {
            success_rule_met(&spec["successPolicy"], &succeeded_idx)
        } else {
            None
        };
        if let Some((reason, msg)) = failure {
            set_condition(&mut new_conds, "FailureTarget", reason, &msg);
            set_condition(&mut new_conds, "Failed", reason, &msg);
            terminate = true;
            done_now = true;
        } else if let Some(i) = success_rule {
            let msg = format!("Matched rules at index {i}");
            set_condition(&mut new_conds, "SuccessCriteriaMet", "SuccessPolicy", &msg);
            set_condition(&mut new_conds, "Complete", "SuccessPolicy", &msg);
            terminate = true;
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
    // No pod stays running once the Job has finished.
    if terminate || finished {
        for p in &active {
            let pn = p["metadata"]["name"].as_str().unwrap_or("");
            let _ = store.delete(&PODS, ns, pn, &DeleteOptions::default());
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

/// Whether a Job needs reconciling as time passes (a deadline, or a TTL after finishing).
fn has_timers(job: &Value) -> bool {
    let spec = &job["spec"];
    let conds: Vec<Value> = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let finished =
        condition_true(&conds, "Complete").is_some() || condition_true(&conds, "Failed").is_some();
    if finished {
        spec["ttlSecondsAfterFinished"].is_i64()
    } else {
        spec["activeDeadlineSeconds"].is_i64()
    }
}

fn reconcile_timed_jobs(store: &Store) {
    if let Ok(l) = store.list(&JOBS, None, &Default::default()) {
        for o in l.items.iter().filter(|o| has_timers(o)) {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
            let name = o["metadata"]["name"].as_str().unwrap_or("");
            reconcile_job(store, ns, name);
        }
    }
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

    fn indexed_job(s: &Store, name: &str, n: i64, extra: Value) -> Vec<Arc<Value>> {
        let mut spec = json!({
            "completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        s.create(
            &JOBS,
            "default",
            json!({"metadata": {"name": name}, "spec": spec}),
            false,
        )
        .unwrap();
        reconcile_job(s, "default", name);
        let mut pods = s
            .list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items;
        pods.retain(|p| p["metadata"]["labels"]["job-name"] == name);
        pods.sort_by_key(|p| {
            p["metadata"]["labels"][INDEX_KEY]
                .as_str()
                .unwrap()
                .parse::<i64>()
                .unwrap()
        });
        pods
    }

    fn end_pod(s: &Store, p: &Value, phase: &str, code: i64, conds: Value) {
        s.modify(
            &PODS,
            "default",
            p["metadata"]["name"].as_str().unwrap(),
            Part::Status,
            |v| {
                v["status"]["phase"] = json!(phase);
                v["status"]["containerStatuses"] =
                    json!([{"name": "c", "state": {"terminated": {"exitCode": code}}}]);
                v["status"]["conditions"] = conds;
            },
        )
        .unwrap();
    }

    fn cond<'a>(j: &'a Value, ty: &str) -> Option<&'a Value> {
        j["status"]["conditions"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["type"] == ty && c["status"] == "True"))
    }

    fn names(s: &Store) -> Vec<String> {
        s.list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn index_sets_parse() {
        assert_eq!(
            parse_indexes("0-2,5")
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            [0, 1, 2, 5]
        );
        assert_eq!(parse_indexes("").unwrap().len(), 0);
        assert!(parse_indexes("3-1").is_none() && parse_indexes("x").is_none());
    }

    #[test]
    fn success_policy_on_index_0_completes_and_terminates_the_rest() {
        let s = store();
        let pods = indexed_job(
            &s,
            "sp",
            3,
            json!({"successPolicy": {"rules": [{"succeededIndexes": "0"}]}}),
        );
        assert_eq!(pods.len(), 3);
        // Index 1 succeeding is not enough.
        end_pod(&s, &pods[1], "Succeeded", 0, json!([]));
        reconcile_job(&s, "default", "sp");
        assert!(cond(&s.get(&JOBS, "default", "sp").unwrap(), "Complete").is_none());
        end_pod(&s, &pods[0], "Succeeded", 0, json!([]));
        reconcile_job(&s, "default", "sp");
        let j = s.get(&JOBS, "default", "sp").unwrap();
        assert_eq!(
            cond(&j, "SuccessCriteriaMet").unwrap()["reason"],
            "SuccessPolicy"
        );
        assert_eq!(cond(&j, "Complete").unwrap()["reason"], "SuccessPolicy");
        assert!(j["status"]["completionTime"].is_string());
        let left = names(&s);
        assert!(
            !left.contains(&pods[2]["metadata"]["name"].as_str().unwrap().to_string()),
            "index 2 was still running: terminated"
        );
        assert_eq!(left.len(), 2, "finished pods stay: {left:?}");
    }

    #[test]
    fn backoff_limit_0_fails_at_the_first_failure_and_terminates_the_rest() {
        let s = store();
        let pods = indexed_job(&s, "bl", 3, json!({}));
        end_pod(&s, &pods[0], "Failed", 3, json!([]));
        reconcile_job(&s, "default", "bl");
        let j = s.get(&JOBS, "default", "bl").unwrap();
        assert_eq!(
            cond(&j, "Failed").unwrap()["reason"],
            "BackoffLimitExceeded"
        );
        assert!(cond(&j, "FailureTarget").is_some());
        assert!(cond(&j, "Complete").is_none());
        assert_eq!(
            names(&s),
            [pods[0]["metadata"]["name"].as_str().unwrap()],
            "only the failed pod is left"
        );
        assert_eq!(j["status"]["failed"], 1);
        assert!(j["status"].get("active").is_none());
        // Nothing is made again.
        reconcile_job(&s, "default", "bl");
        assert_eq!(names(&s).len(), 1);
    }

    #[test]
    fn pod_failure_policy_fail_job_ignore_and_count() {
        let policy = json!({"podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]}},
        ]}, "backoffLimit": 1});
        let s = store();
        let pods = indexed_job(&s, "pf", 2, policy.clone());
        // Evicted: ignored, not counted, the index is made again.
        end_pod(
            &s,
            &pods[1],
            "Failed",
            137,
            json!([{"type": "DisruptionTarget", "status": "True"}]),
        );
        reconcile_job(&s, "default", "pf");
        let j = s.get(&JOBS, "default", "pf").unwrap();
        assert!(cond(&j, "Failed").is_none());
        assert!(j["status"].get("failed").is_none(), "{}", j["status"]);
        assert_eq!(names(&s).len(), 3, "a new pod for index 1");
        // Exit code 1 counts (backoffLimit 1: not yet failed).
        end_pod(&s, &pods[0], "Failed", 1, json!([]));
        reconcile_job(&s, "default", "pf");
        assert!(cond(&s.get(&JOBS, "default", "pf").unwrap(), "Failed").is_none());
        // Exit code 42 fails the Job at once, naming the rule.
        let fresh: Vec<Arc<Value>> = s
            .list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items
            .into_iter()
            .filter(|p| phase(p) != "Failed")
            .collect();
        end_pod(&s, &fresh[0], "Failed", 42, json!([]));
        reconcile_job(&s, "default", "pf");
        let j = s.get(&JOBS, "default", "pf").unwrap();
        let f = cond(&j, "Failed").unwrap();
        assert_eq!(f["reason"], "PodFailurePolicy");
        assert!(
            f["message"]
                .as_str()
                .unwrap()
                .contains("exit code 42 matching FailJob rule at index 1"),
            "{f}"
        );
        assert!(
            s.list(&PODS, Some("default"), &Default::default())
                .unwrap()
                .items
                .iter()
                .all(|p| phase(p) == "Failed"),
            "no pod left running"
        );
    }

    #[test]
    fn deadline_fails_and_ttl_deletes() {
        let s = store();
        let pods = indexed_job(
            &s,
            "dl",
            2,
            json!({"activeDeadlineSeconds": 0, "ttlSecondsAfterFinished": 0}),
        );
        assert_eq!(pods.len(), 2);
        reconcile_job(&s, "default", "dl");
        let j = s.get(&JOBS, "default", "dl").unwrap();
        assert_eq!(cond(&j, "Failed").unwrap()["reason"], "DeadlineExceeded");
        assert!(names(&s).is_empty(), "running pods terminated");
        assert!(has_timers(&j));
        reconcile_timed_jobs(&s);
        assert!(
            s.get(&JOBS, "default", "dl").is_err(),
            "the TTL removed the Job"
        );
        // A TTL in the future keeps it.
        let pods = indexed_job(&s, "keep", 1, json!({"ttlSecondsAfterFinished": 3600}));
        end_pod(&s, &pods[0], "Succeeded", 0, json!([]));
        reconcile_job(&s, "default", "keep");
        reconcile_timed_jobs(&s);
        assert!(cond(&s.get(&JOBS, "default", "keep").unwrap(), "Complete").is_some());
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
