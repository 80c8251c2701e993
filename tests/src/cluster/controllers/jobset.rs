//! The JobSet controller (jobset.x-k8s.io/v1alpha2), as JobSet's own does it: a JobSet's
//! child Jobs `<jobset>-<replicatedJob>-<index>`, labelled and annotated with the JobSet's
//! keys (pod templates too); the JobSet Completed by its success policy (by default once every
//! child Job is complete); on a child Job's failure, Failed (no failure policy, or its
//! `maxRestarts` used up) or restarted: `status.restarts` goes up, the Jobs of the earlier
//! attempt are deleted in the foreground (their pods terminated gracefully first) and made
//! again with the next `restart-attempt`. A finished JobSet's running Jobs are deleted, and
//! `ttlSecondsAfterFinished` removes the JobSet itself. `spec.suspend` suspends and resumes
//! the child Jobs (their controller stops and starts the pods), and `startupPolicy` `InOrder`
//! makes each replicated Job's Jobs once those listed before it are ready.

use super::conditions::{condition_true, seconds_since};
use super::pods::{owned, owner_ref};
use crate::api::defaults::now_rfc3339;
use crate::api::resources::{EVENTS, JOBS, JOBSETS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Map, Value};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
pub const JOBSET_UID: &str = "jobset.sigs.k8s.io/jobset-uid";
pub const REPLICATED_JOB_NAME: &str = "jobset.sigs.k8s.io/replicatedjob-name";
pub const REPLICATED_JOB_REPLICAS: &str = "jobset.sigs.k8s.io/replicatedjob-replicas";
pub const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
pub const JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
pub const GLOBAL_REPLICAS: &str = "jobset.sigs.k8s.io/global-replicas";
pub const JOB_KEY: &str = "jobset.sigs.k8s.io/job-key";
pub const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";

/// Brings one JobSet's child Jobs and status in line with its spec.
pub fn reconcile_jobset(store: &Store, ns: &str, name: &str) {
    let Ok(js) = store.get(&JOBSETS, ns, name) else {
        return;
    };
    if !js["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let mut status = js["status"].as_object().cloned().unwrap_or_default();
    let restarts = status.get("restarts").and_then(Value::as_i64).unwrap_or(0);
    let conds: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let finished = condition_true(&conds, "Completed").or_else(|| condition_true(&conds, "Failed"));
    if let (Some(c), Some(ttl)) = (finished, js["spec"]["ttlSecondsAfterFinished"].as_i64()) {
        if seconds_since(c["lastTransitionTime"].as_str().unwrap_or("")).is_some_and(|a| a >= ttl) {
            let _ = store.delete(&JOBSETS, ns, name, &background());
            return;
        }
    }
    let finished = finished.is_some();
    let jobs = owned(store, &js, "Job");
    let (old, current): (Vec<&Arc<Value>>, Vec<&Arc<Value>>) =
        jobs.iter().partition(|j| attempt(j) < restarts);
    // The earlier attempt's Jobs go, their pods first; a finished JobSet's running ones too.
    for j in old
        .iter()
        .chain(current.iter().filter(|j| finished && !job_done(j)))
    {
        delete_job(store, j);
    }
    if !finished {
        decide(store, &js, &current, old.is_empty(), &mut status);
    }
    status.insert(
        "replicatedJobsStatus".into(),
        replicated_status(&js, &current),
    );
    status.insert(
        "restarts".into(),
        json!(status.get("restarts").and_then(Value::as_i64).unwrap_or(0)),
    );
    let _ = store.modify(&JOBSETS, ns, name, Part::Status, |v| {
        if v["metadata"]["uid"] == js["metadata"]["uid"] {
            v["status"] = Value::Object(status);
        }
    });
}

/// A running JobSet: it fails, restarts, completes, or gets the child Jobs it lacks (once
/// the earlier attempt's are gone: `old_gone`).
fn decide(
    store: &Store,
    js: &Value,
    current: &[&Arc<Value>],
    old_gone: bool,
    status: &mut Map<String, Value>,
) {
    let restarts = status.get("restarts").and_then(Value::as_i64).unwrap_or(0);
    if let Some(failed) = current.iter().find(|j| job_condition(j, "Failed")) {
        let first = failed["metadata"]["name"].as_str().unwrap_or("");
        let policy = &js["spec"]["failurePolicy"];
        let max = policy["maxRestarts"].as_i64().unwrap_or(0);
        if policy.is_object() && restarts < max {
            let counted = status
                .get("restartsCountTowardsMax")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            status.insert("restarts".into(), json!(restarts + 1));
            status.insert("restartsCountTowardsMax".into(), json!(counted + 1));
            let m = format!(
                "restarting jobset, attempt {} (first failed job: {first})",
                restarts + 1
            );
            event(store, js, "Warning", "Restarting", &m);
            return;
        }
        let (reason, message) = if policy.is_object() {
            (
                "ReachedMaxRestarts",
                "jobset failed due to reaching max number of restarts",
            )
        } else {
            (
                "FailedJobs",
                "jobset failed due to one or more job failures",
            )
        };
        let message = format!("{message} (first failed job: {first})");
        finish(store, js, status, "Failed", reason, &message);
        return;
    }
    if success_met(js, current) {
        let m = "jobset completed successfully";
        finish(store, js, status, "Completed", "AllJobsCompleted", m);
        return;
    }
    if old_gone {
        create_jobs(store, js, current, restarts, status);
    }
}

/// The JobSet is done: condition `ty` (Completed or Failed), its terminal state.
fn finish(
    store: &Store,
    js: &Value,
    status: &mut Map<String, Value>,
    ty: &str,
    reason: &str,
    message: &str,
) {
    let mut conds: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conds.retain(|c| c["type"] != ty);
    conds.push(json!({
        "type": ty, "status": "True", "reason": reason, "message": message,
        "lastTransitionTime": now_rfc3339(),
    }));
    status.insert("conditions".into(), json!(conds));
    status.insert("terminalState".into(), json!(ty));
    let kind = if ty == "Failed" { "Warning" } else { "Normal" };
    event(store, js, kind, reason, message);
}

/// Whether the success policy holds: `operator` All (the default: every child Job of the
/// target replicated Jobs, by default all of them, is complete) or Any (one is).
fn success_met(js: &Value, current: &[&Arc<Value>]) -> bool {
    let sp = &js["spec"]["successPolicy"];
    let targets: Vec<&str> = sp["targetReplicatedJobs"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let targeted = |rj: &str| targets.is_empty() || targets.contains(&rj);
    let complete = |rj: &str, i: i64| {
        current
            .iter()
            .any(|j| job_name_is(j, js, rj, i) && job_condition(j, "Complete"))
    };
    let wanted: Vec<(String, i64)> = replicated_jobs(js)
        .into_iter()
        .filter(|(rj, _)| targeted(rj))
        .flat_map(|(rj, n)| (0..n).map(move |i| (rj.clone(), i)))
        .collect();
    if sp["operator"] == "Any" {
        wanted.iter().any(|(rj, i)| complete(rj, *i))
    } else {
        !wanted.is_empty() && wanted.iter().all(|(rj, i)| complete(rj, *i))
    }
}

/// The replicated Jobs: (name, replicas).
fn replicated_jobs(js: &Value) -> Vec<(String, i64)> {
    js["spec"]["replicatedJobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|rj| {
                    let n = rj["name"].as_str().unwrap_or("").to_string();
                    (n, rj["replicas"].as_i64().unwrap_or(1).max(0))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Creates the child Jobs of this attempt that do not exist, and makes the existing ones'
/// `spec.suspend` follow the JobSet's. With `startupPolicy.startupPolicyOrder: InOrder`
/// (JobSet's `startup_policy.go`), a replicated Job's Jobs are made (or resumed) only once
/// every Job of the ones listed before it is ready (as many ready or succeeded pods as its
/// parallelism); until then the JobSet has `StartupPolicyInProgress`, then
/// `StartupPolicyCompleted`.
fn create_jobs(
    store: &Store,
    js: &Value,
    current: &[&Arc<Value>],
    attempt: i64,
    status: &mut Map<String, Value>,
) {
    let ns = js["metadata"]["namespace"].as_str().unwrap_or("");
    let global: i64 = replicated_jobs(js).iter().map(|(_, n)| n).sum();
    let mut global_index = 0;
    let rjs = js["spec"]["replicatedJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let suspend = js["spec"]["suspend"] == true;
    let in_order = js["spec"]["startupPolicy"]["startupPolicyOrder"] == "InOrder";
    let mut earlier_ready = true;
    for rj in &rjs {
        let rname = rj["name"].as_str().unwrap_or("");
        let replicas = rj["replicas"].as_i64().unwrap_or(1).max(0);
        if in_order && !earlier_ready && !suspend {
            break;
        }
        let mine: Vec<&&Arc<Value>> = current
            .iter()
            .filter(|j| j["metadata"]["labels"][REPLICATED_JOB_NAME] == rname)
            .collect();
        for j in &mine {
            if !job_done(j) && (j["spec"]["suspend"] == true) != suspend {
                set_job_suspend(store, j, suspend);
            }
        }
        earlier_ready = mine.len() as i64 == replicas && mine.iter().all(|j| job_ready(j));
        for i in 0..replicas {
            let at = Placement {
                rj: rname,
                replicas,
                index: i,
                global_index,
                global,
                attempt,
            };
            global_index += 1;
            if !current.iter().any(|j| job_name_is(j, js, rname, i)) {
                let _ = store.create(&JOBS, ns, child_job(js, &rj["template"], &at), false);
            }
        }
    }
    if in_order {
        let started = earlier_ready && !suspend;
        let (ty, gone, reason, message) = if started {
            (
                "StartupPolicyCompleted",
                "StartupPolicyInProgress",
                "InOrderStartupPolicyCompleted",
                "in order startup policy has completed",
            )
        } else {
            (
                "StartupPolicyInProgress",
                "StartupPolicyCompleted",
                "InOrderStartupPolicyInProgress",
                "in order startup policy is in progress",
            )
        };
        let mut conds: Vec<Value> = status
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if condition_true(&conds, ty).is_none() {
            conds.retain(|c| c["type"] != ty && c["type"] != gone);
            conds.push(json!({
                "type": ty, "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": now_rfc3339(),
            }));
            status.insert("conditions".into(), json!(conds));
        }
    }
}

/// Whether the child Job has as many ready or succeeded pods as its parallelism (at most its
/// completions): JobSet's readiness of a Job for its startup policy.
fn job_ready(j: &Value) -> bool {
    let parallelism = j["spec"]["parallelism"].as_i64().unwrap_or(1);
    let want = j["spec"]["completions"]
        .as_i64()
        .map_or(parallelism, |c| c.min(parallelism));
    let st = &j["status"];
    st["ready"].as_i64().unwrap_or(0) + st["succeeded"].as_i64().unwrap_or(0) >= want
}

/// Sets the child Job's `spec.suspend` (its controller then stops or starts its pods).
fn set_job_suspend(store: &Store, j: &Value, suspend: bool) {
    let name = j["metadata"]["name"].as_str().unwrap_or("");
    let ns = j["metadata"]["namespace"].as_str().unwrap_or("");
    let uid = j["metadata"]["uid"].clone();
    let _ = store.modify(&JOBS, ns, name, Part::Main, |v| {
        if v["metadata"]["uid"] == uid {
            v["spec"]["suspend"] = json!(suspend);
        }
    });
}

/// Where a child Job sits in its JobSet.
struct Placement<'a> {
    rj: &'a str,
    replicas: i64,
    index: i64,
    global_index: i64,
    global: i64,
    attempt: i64,
}

/// The child Job `at` from `template`, with the JobSet's labels and annotations on the Job and
/// its pod template.
fn child_job(js: &Value, template: &Value, at: &Placement) -> Value {
    let js_name = js["metadata"]["name"].as_str().unwrap_or("");
    let ns = js["metadata"]["namespace"].as_str().unwrap_or("");
    let name = format!("{js_name}-{}-{}", at.rj, at.index);
    let keys = [
        (JOBSET_NAME, js_name.to_string()),
        (
            JOBSET_UID,
            js["metadata"]["uid"].as_str().unwrap_or("").to_string(),
        ),
        (REPLICATED_JOB_NAME, at.rj.to_string()),
        (REPLICATED_JOB_REPLICAS, at.replicas.to_string()),
        (JOB_INDEX, at.index.to_string()),
        (JOB_GLOBAL_INDEX, at.global_index.to_string()),
        (GLOBAL_REPLICAS, at.global.to_string()),
        (JOB_KEY, job_key(ns, &name)),
        (RESTART_ATTEMPT, at.attempt.to_string()),
    ];
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": template.get("metadata").cloned().unwrap_or(json!({})),
        "spec": template.get("spec").cloned().unwrap_or(json!({})),
    });
    if !job["metadata"].is_object() {
        job["metadata"] = json!({});
    }
    job["metadata"]["name"] = json!(name);
    job["metadata"]["namespace"] = json!(ns);
    job["metadata"]["ownerReferences"] = owner_ref("jobset.x-k8s.io/v1alpha2", "JobSet", js);
    if !job["spec"]["template"]["metadata"].is_object() {
        job["spec"]["template"]["metadata"] = json!({});
    }
    for meta in ["/metadata", "/spec/template/metadata"] {
        let m = job.pointer_mut(meta).expect("made above");
        for field in ["labels", "annotations"] {
            if !m[field].is_object() {
                m[field] = json!({});
            }
            for (k, v) in &keys {
                m[field][*k] = json!(v);
            }
        }
    }
    if js["spec"]["network"]["enableDNSHostnames"] != false {
        let sub = js["spec"]["network"]["subdomain"]
            .as_str()
            .unwrap_or(js_name);
        job["spec"]["template"]["spec"]["subdomain"] = json!(sub);
    }
    if js["spec"]["suspend"] == true {
        job["spec"]["suspend"] = json!(true);
    }
    job
}

/// A stable key of the Job `ns`/`name` (JobSet's job-key label).
fn job_key(ns: &str, name: &str) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{ns}/{name}").hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Per replicated Job: how many of its Jobs are ready, succeeded, failed, active, suspended.
fn replicated_status(js: &Value, current: &[&Arc<Value>]) -> Value {
    let rows: Vec<Value> = replicated_jobs(js)
        .into_iter()
        .map(|(rj, _)| {
            let mine: Vec<&&Arc<Value>> = current
                .iter()
                .filter(|j| j["metadata"]["labels"][REPLICATED_JOB_NAME] == rj.as_str())
                .collect();
            let count = |f: &dyn Fn(&Value) -> bool| mine.iter().filter(|j| f(j)).count();
            let ready = |j: &Value| {
                let want = j["spec"]["parallelism"].as_i64().unwrap_or(1);
                !job_done(j) && j["status"]["ready"].as_i64().unwrap_or(0) >= want
            };
            json!({
                "name": rj,
                "ready": count(&ready),
                "succeeded": count(&|j| job_condition(j, "Complete")),
                "failed": count(&|j| job_condition(j, "Failed")),
                "active": count(&|j| !job_done(j) && j["spec"]["suspend"] != true),
                "suspended": count(&|j| j["spec"]["suspend"] == true),
            })
        })
        .collect();
    json!(rows)
}

/// The restart attempt a child Job belongs to.
fn attempt(j: &Value) -> i64 {
    j["metadata"]["labels"][RESTART_ATTEMPT]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn job_name_is(j: &Value, js: &Value, rj: &str, i: i64) -> bool {
    let js_name = js["metadata"]["name"].as_str().unwrap_or("");
    j["metadata"]["name"] == format!("{js_name}-{rj}-{i}").as_str()
}

fn job_condition(j: &Value, ty: &str) -> bool {
    j["status"]["conditions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|c| c["type"] == ty && c["status"] == "True"))
}

fn job_done(j: &Value) -> bool {
    job_condition(j, "Complete") || job_condition(j, "Failed")
}

/// Deletes child Job `j` in the foreground (it goes once its pods have), unless it is being
/// deleted already.
fn delete_job(store: &Store, j: &Value) {
    if !j["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let opts = DeleteOptions {
        propagation: Some("Foreground".into()),
        precondition_uid: j["metadata"]["uid"].as_str().map(String::from),
        ..Default::default()
    };
    let name = j["metadata"]["name"].as_str().unwrap_or("");
    let ns = j["metadata"]["namespace"].as_str().unwrap_or("");
    let _ = store.delete(&JOBS, ns, name, &opts);
}

fn background() -> DeleteOptions {
    DeleteOptions {
        propagation: Some("Background".into()),
        ..Default::default()
    }
}

/// An event about the JobSet, from its controller.
fn event(store: &Store, js: &Value, ty: &str, reason: &str, message: &str) {
    let now = now_rfc3339();
    let m = &js["metadata"];
    let ev = json!({
        "metadata": {"generateName": format!("{}.", m["name"].as_str().unwrap_or("")), "namespace": m["namespace"]},
        "involvedObject": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": m["name"], "namespace": m["namespace"], "uid": m["uid"]},
        "reason": reason,
        "message": message,
        "type": ty,
        "source": {"component": "jobset-controller"},
        "reportingComponent": "jobset-controller",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let ns = m["namespace"].as_str().unwrap_or("");
    let _ = store.create(&EVENTS, ns, ev, false);
}

/// Whether a JobSet needs reconciling as time passes (a TTL after finishing).
pub(super) fn has_ttl(js: &Value) -> bool {
    let conds = js["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    js["spec"]["ttlSecondsAfterFinished"].is_i64()
        && (condition_true(&conds, "Completed").is_some()
            || condition_true(&conds, "Failed").is_some())
}
