//! The Job controller: a Job's pods (Indexed or not) and its status and conditions.

use super::conditions::{condition_true, ensure_condition_status, seconds_since, set_condition};
use super::indexes::{compress_indexes, parse_indexes};
use super::job_policy::{pod_failure_rule, success_rule_met};
use super::job_tracking::{release, tracked, TRACKING_FINALIZER};
use super::pods::{is_ready, owned_pods, owner_ref, phase, pod_from_template};
use crate::api::defaults::{now_rfc3339, random_suffix};
use crate::api::resources::{JOBS, PODS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

pub(super) const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

/// Brings one Job's pods and status in line with its spec: Indexed or not, backoffLimit,
/// successPolicy, podFailurePolicy (FailJob, Ignore, Count), podReplacementPolicy,
/// activeDeadlineSeconds, ttlSecondsAfterFinished, and the conditions Complete, Failed,
/// SuccessCriteriaMet and FailureTarget. A finishing Job's remaining pods are deleted
/// (terminated by the kubelet).
///
/// Pods are counted as the Job controller counts them. Each pod it makes carries the tracking
/// finalizer [`TRACKING_FINALIZER`], so its object stays, even deleted, until the controller
/// has counted how it ended and removed the finalizer; the counts (`failed`, `succeeded`,
/// `completedIndexes`) add up in the Job's status, whatever becomes of the pods after. A pod
/// counts once, when it is first seen:
/// * `Succeeded`: it completes its index (or counts as a success);
/// * `Failed`: it counts as failed, as the pod failure policy says (`FailJob` fails the Job,
///   `Ignore` does not count, `Count` or no rule counts towards the backoff limit);
/// * being deleted and not `Succeeded`, without `podReplacementPolicy: Failed` (the default
///   without a pod failure policy): it counts as failed at once (as the controller first saw
///   it, even if it ends `Succeeded` a moment later), and is replaced at once; with
///   it (the default with a pod failure policy), the pod counts and is replaced only once it
///   is `Failed` (the kubelet ends a deleted pod `Succeeded` if its containers exited 0, else
///   `Failed`, also one deleted before it ran);
/// * removed while still tracked (it never reached the controller): `Succeeded` as such,
///   anything else as failed;
/// * when the Job fails, every pod still running counts as failed.
///
/// Once a Job has finished, or while it is being deleted, its pods are released (no
/// finalizer), and so is a pod whose Job is gone.
///
/// `spec.suspend` (as Kubernetes' `manageJob` and `syncJob`): a suspended Job makes no pod;
/// its active pods are released and deleted (so they count neither as failed nor towards
/// completions, however they end), its `startTime` is cleared (the deadline does not run) and
/// it gets the condition `Suspended` True (`JobSuspended`, "Job suspended"). Resumed, the
/// condition turns False (`JobResumed`, "Job resumed"; a Job never suspended gets none) and
/// `startTime` is now: `activeDeadlineSeconds` counts from there.
pub fn reconcile_job(store: &Store, ns: &str, name: &str) {
    reconcile_job_seeing(store, ns, name, None, false);
}

/// As [`reconcile_job`], `gone` being a pod of the Job as an event showed it (`removed`: the
/// event of its removal, with its last state): counted if it was removed while still tracked,
/// counted as failed if it was then being deleted before it ended (see above), released if
/// its Job is gone (or is another Job of the same name).
pub fn reconcile_job_seeing(
    store: &Store,
    ns: &str,
    name: &str,
    gone: Option<&Arc<Value>>,
    removed: bool,
) {
    let Ok(job) = store.get(&JOBS, ns, name) else {
        if let Some(g) = gone {
            release(store, g);
        }
        return;
    };
    let ours = |g: &Value| {
        g.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|o| o.iter().any(|r| r["uid"] == job["metadata"]["uid"]))
    };
    if let Some(g) = gone.filter(|g| !ours(g)) {
        release(store, g);
    }
    let conds = conditions(&job);
    let finished_cond = condition_true(&conds, "Complete")
        .or_else(|| condition_true(&conds, "Failed"))
        .cloned();
    // ttlSecondsAfterFinished: the Job (and with it its pods) goes.
    if let (Some(c), Some(ttl)) = (
        &finished_cond,
        job["spec"]["ttlSecondsAfterFinished"].as_i64(),
    ) {
        if seconds_since(c["lastTransitionTime"].as_str().unwrap_or(""))
            .is_some_and(|age| age >= ttl)
        {
            for p in owned_pods(store, &job) {
                release(store, &p);
            }
            let opts = DeleteOptions {
                propagation: Some("Background".into()),
                ..Default::default()
            };
            let _ = store.delete(&JOBS, ns, name, &opts);
            return;
        }
    }
    let finished = finished_cond.is_some();
    let mut pods = owned_pods(store, &job);
    if let Some(g) = gone.filter(|g| removed && tracked(g) && ours(g)) {
        let uid = &g["metadata"]["uid"];
        if !pods.iter().any(|p| &p["metadata"]["uid"] == uid) {
            pods.push(g.clone());
        }
    }
    // A pod the event showed being deleted before it ended counts as failed at once without
    // `podReplacementPolicy: Failed`: as seen then, even if it has ended since (the
    // controller handles every event in order, so what it saw first decides, not how fast
    // the kubelet was).
    if job["spec"]["podReplacementPolicy"] != "Failed" {
        if let Some(g) = gone.filter(|g| tracked(g) && ours(g) && is_terminating(g)) {
            let uid = &g["metadata"]["uid"];
            if let Some(p) = pods
                .iter_mut()
                .find(|p| &p["metadata"]["uid"] == uid && tracked(p))
            {
                *p = g.clone();
            }
        }
    }
    let stored = |p: &Value| {
        store
            .get(&PODS, ns, p["metadata"]["name"].as_str().unwrap_or(""))
            .is_ok_and(|s| s["metadata"]["uid"] == p["metadata"]["uid"])
    };
    let gone_uid: Option<Value> = gone
        .filter(|g| removed && !stored(g))
        .map(|g| g["metadata"]["uid"].clone());
    let mut state = JobState::of(&job, &pods, finished, gone_uid.as_ref());
    let mut new_conds = conds.clone();
    let (done_now, terminate) = if !finished && !state.suspended {
        decide(store, &job, &state, &mut new_conds)
    } else {
        (false, false)
    };
    let live = !finished && !done_now && job["metadata"]["deletionTimestamp"].is_null();
    let mut resumed = false;
    if live && state.suspended {
        for p in &state.active {
            release(store, p);
            let pn = p["metadata"]["name"].as_str().unwrap_or("");
            let _ = store.delete(&PODS, ns, pn, &DeleteOptions::default());
        }
        ensure_condition_status(
            &mut new_conds,
            "Suspended",
            true,
            "JobSuspended",
            "Job suspended",
        );
    } else if live {
        resumed = ensure_condition_status(
            &mut new_conds,
            "Suspended",
            false,
            "JobResumed",
            "Job resumed",
        );
    }
    let failed_now = done_now && new_conds.iter().any(|c| c["type"] == "Failed");
    if failed_now {
        // When the Job fails, the pods still running count as failed.
        let running = state.active.iter().chain(&state.held);
        let n = running
            .filter(|p| tracked(p) && !state.was_counted(p))
            .count();
        state.failed += n as i64;
    }
    write_status(
        store,
        &job,
        &state,
        &new_conds,
        done_now || finished,
        done_now,
        resumed,
    );
    // The counted pods, and all of them once the Job has finished or is being deleted, are
    // released; no pod stays running once the Job has finished.
    let release_all = done_now || finished || !job["metadata"]["deletionTimestamp"].is_null();
    for p in pods.iter().filter(|p| tracked(p)) {
        if release_all || state.was_counted(p) {
            release(store, p);
        }
    }
    // An Indexed Job lowered (an elastic one: completions and parallelism together) loses its
    // pods whose index is now out of range, as Kubernetes' Job controller deletes them: they
    // count neither as failed nor as succeeded, and it lets go of them (the tracking
    // finalizer) at once.
    if state.indexed && !release_all && !state.suspended {
        let out = |p: &Value| {
            state
                .completions
                .is_some_and(|c| index_of(p).is_some_and(|i| i >= c))
        };
        for p in pods.iter().filter(|p| tracked(p) && out(p)) {
            release(store, p);
            if is_active(p) {
                let pn = p["metadata"]["name"].as_str().unwrap_or("");
                let _ = store.delete(&PODS, ns, pn, &DeleteOptions::default());
            }
        }
    }
    if terminate || finished {
        for p in &state.active {
            let pn = p["metadata"]["name"].as_str().unwrap_or("");
            let _ = store.delete(&PODS, ns, pn, &DeleteOptions::default());
        }
    }
}

/// The Job's conditions.
fn conditions(job: &Value) -> Vec<Value> {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A Job's spec and what its pods tell.
struct JobState<'a> {
    indexed: bool,
    completions: Option<i64>,
    parallelism: i64,
    backoff: i64,
    suspended: bool,
    /// Pods neither Succeeded nor Failed nor being deleted.
    active: Vec<&'a Arc<Value>>,
    /// Terminating pods not to be replaced before they Failed (`podReplacementPolicy:
    /// Failed`).
    held: Vec<&'a Arc<Value>>,
    /// Failed pods counted so far (the status's and the newly counted).
    failed: i64,
    /// The message of the first failed pod whose failure fails the Job.
    fail_job: Option<String>,
    succeeded_idx: BTreeSet<i64>,
    succeeded: i64,
    /// The pods counted now (to be released).
    counted: Vec<&'a Arc<Value>>,
    deadline_passed: bool,
}

impl<'a> JobState<'a> {
    /// `finished`: the Job has finished (nothing is counted any more); `gone`: the uid of a
    /// pod among `pods` that is no longer stored.
    fn of(
        job: &Value,
        pods: &'a [Arc<Value>],
        finished: bool,
        gone: Option<&Value>,
    ) -> JobState<'a> {
        let spec = &job["spec"];
        let status = &job["status"];
        let indexed = spec["completionMode"] == "Indexed";
        let completions = spec["completions"].as_i64();
        let only_failed = spec["podReplacementPolicy"] == "Failed";
        let policy = &spec["podFailurePolicy"];
        let mut failed = status["failed"].as_i64().unwrap_or(0);
        let mut succeeded = status["succeeded"].as_i64().unwrap_or(0);
        let mut succeeded_idx: BTreeSet<i64> = if indexed {
            status["completedIndexes"]
                .as_str()
                .and_then(parse_indexes)
                .unwrap_or_default()
        } else {
            BTreeSet::new()
        };
        let is_gone = |p: &Value| gone.is_some_and(|u| &p["metadata"]["uid"] == u);
        // Failed as the Job controller sees it (a removed pod that had not succeeded, too).
        let is_failed = |p: &Value| {
            phase(p) == "Failed"
                || (phase(p) != "Succeeded" && (is_gone(p) || (!only_failed && is_terminating(p))))
        };
        let mut fail_job: Option<String> = None;
        let mut counted = Vec::new();
        for p in pods.iter().filter(|p| !finished && tracked(p)) {
            let index = index_of(p);
            let in_range =
                !indexed || index.is_some_and(|i| i >= 0 && completions.is_some_and(|c| i < c));
            if phase(p) == "Succeeded" {
                if in_range && indexed {
                    succeeded_idx.extend(index);
                } else if in_range {
                    succeeded += 1;
                }
                counted.push(p);
            } else if is_failed(p) {
                if in_range {
                    match pod_failure_rule(policy, p) {
                        Some((action, _, msg)) if action == "FailJob" => {
                            failed += 1;
                            fail_job.get_or_insert(msg);
                        }
                        Some((action, _, _)) if action == "Ignore" => {}
                        _ => failed += 1,
                    }
                }
                counted.push(p);
            }
        }
        if indexed {
            succeeded = succeeded_idx.len() as i64;
        }
        let deadline_passed = spec["activeDeadlineSeconds"].as_i64().is_some_and(|limit| {
            job.pointer("/status/startTime")
                .and_then(Value::as_str)
                .and_then(seconds_since)
                .is_some_and(|age| age >= limit)
        });
        let present = |p: &&Arc<Value>| !is_gone(p);
        JobState {
            indexed,
            completions,
            parallelism: spec["parallelism"].as_i64().unwrap_or(1).max(0),
            backoff: spec["backoffLimit"].as_i64().unwrap_or(6),
            suspended: spec["suspend"].as_bool().unwrap_or(false),
            active: pods
                .iter()
                .filter(present)
                .filter(|p| is_active(p))
                .collect(),
            held: if only_failed {
                pods.iter()
                    .filter(present)
                    .filter(|p| is_terminating(p))
                    .collect()
            } else {
                Vec::new()
            },
            failed,
            fail_job,
            succeeded_idx,
            succeeded,
            counted,
            deadline_passed,
        }
    }

    /// Whether pod `p` was counted now.
    fn was_counted(&self, p: &Value) -> bool {
        let uid = &p["metadata"]["uid"];
        self.counted.iter().any(|c| &c["metadata"]["uid"] == uid)
    }

    /// Why the Job fails now (reason, message), if it does.
    fn failure(&self) -> Option<(&'static str, String)> {
        if let Some(msg) = &self.fail_job {
            Some(("PodFailurePolicy", msg.clone()))
        } else if self.failed > self.backoff {
            Some((
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".to_string(),
            ))
        } else if self.deadline_passed {
            Some((
                "DeadlineExceeded",
                "Job was active longer than specified deadline".to_string(),
            ))
        } else {
            None
        }
    }
}

/// A pod that neither ended nor is being deleted.
fn is_active(p: &Value) -> bool {
    !matches!(phase(p), "Succeeded" | "Failed") && p["metadata"]["deletionTimestamp"].is_null()
}

/// A pod being deleted that has not ended yet.
fn is_terminating(p: &Value) -> bool {
    !matches!(phase(p), "Succeeded" | "Failed") && !p["metadata"]["deletionTimestamp"].is_null()
}

/// The completion index of a Job's pod.
fn index_of(p: &Value) -> Option<i64> {
    p.pointer("/metadata/annotations")
        .and_then(|a| a.get(INDEX_KEY))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

/// Decides a running Job: it fails, succeeds by its success policy or completions, or gets
/// the pods it lacks. (done now, its remaining pods to be terminated).
fn decide(store: &Store, job: &Value, state: &JobState, conds: &mut Vec<Value>) -> (bool, bool) {
    let success_rule = if state.indexed {
        success_rule_met(&job["spec"]["successPolicy"], &state.succeeded_idx)
    } else {
        None
    };
    if let Some((reason, msg)) = state.failure() {
        set_condition(conds, "FailureTarget", reason, &msg);
        set_condition(conds, "Failed", reason, &msg);
        return (true, true);
    }
    if let Some(i) = success_rule {
        let msg = format!("Matched rules at index {i}");
        set_condition(conds, "SuccessCriteriaMet", "SuccessPolicy", &msg);
        set_condition(conds, "Complete", "SuccessPolicy", &msg);
        return (true, true);
    }
    let complete = match state.completions {
        Some(c) => state.succeeded >= c,
        None => state.succeeded >= 1 && state.active.is_empty(),
    };
    if complete {
        let msg = "Reached expected number of succeeded pods";
        set_condition(conds, "SuccessCriteriaMet", "CompletionsReached", msg);
        set_condition(conds, "Complete", "CompletionsReached", msg);
        return (true, false);
    }
    // A Job being deleted (propagation Foreground) gets no new pods.
    if job["metadata"]["deletionTimestamp"].is_null() {
        create_job_pods(store, job, state);
    }
    (false, false)
}

/// Writes the Job's status: counts, completed indexes, conditions (`ended`: the Job has
/// finished or does now, `done_now`: now; `resumed`: it was resumed now, its start time is now;
/// suspended and not ended, it has none).
fn write_status(
    store: &Store,
    job: &Value,
    state: &JobState,
    conds: &[Value],
    ended: bool,
    done_now: bool,
    resumed: bool,
) {
    let ns = job["metadata"]["namespace"].as_str().unwrap_or("");
    let name = job["metadata"]["name"].as_str().unwrap_or("");
    let now = owned_pods(store, job);
    let active_now = now.iter().filter(|p| is_active(p)).count() as i64;
    let terminating = now.iter().filter(|p| is_terminating(p)).count() as i64;
    let ready = owned_pods(store, job)
        .iter()
        .filter(|p| is_ready(p))
        .count() as i64;
    let _ = store.modify(&JOBS, ns, name, Part::Status, |v| {
        let st = &mut v["status"];
        if !st.is_object() {
            *st = json!({});
        }
        if resumed || (st.get("startTime").is_none() && !state.suspended) {
            st["startTime"] = json!(now_rfc3339());
        }
        if state.suspended && !ended {
            if let Some(m) = st.as_object_mut() {
                m.remove("startTime");
            }
        }
        st["active"] = json!(if ended { 0 } else { active_now });
        st["ready"] = json!(ready);
        st["succeeded"] = json!(state.succeeded);
        st["failed"] = json!(state.failed);
        st["terminating"] = json!(terminating);
        st["uncountedTerminatedPods"] = json!({});
        if state.indexed {
            st["completedIndexes"] = json!(compress_indexes(&state.succeeded_idx));
        }
        if !conds.is_empty() {
            st["conditions"] = json!(conds);
        }
        if done_now
            && conds.iter().any(|c| c["type"] == "Complete")
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
pub(super) fn has_timers(job: &Value) -> bool {
    let spec = &job["spec"];
    let conds = conditions(job);
    let finished =
        condition_true(&conds, "Complete").is_some() || condition_true(&conds, "Failed").is_some();
    if finished {
        spec["ttlSecondsAfterFinished"].is_i64()
    } else {
        spec["activeDeadlineSeconds"].is_i64()
    }
}

/// Reconciles the Jobs that have a deadline or a TTL running.
pub(super) fn reconcile_timed_jobs(store: &Store) {
    if let Ok(l) = store.list(&JOBS, None, &Default::default()) {
        for o in l.items.iter().filter(|o| has_timers(o)) {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
            let name = o["metadata"]["name"].as_str().unwrap_or("");
            reconcile_job(store, ns, name);
        }
    }
}

/// Creates the pods a running Job lacks: up to `parallelism` active, the missing indexes of
/// an Indexed Job first.
fn create_job_pods(store: &Store, job: &Value, state: &JobState) {
    let ns = job["metadata"]["namespace"].as_str().unwrap_or("");
    let active = (state.active.len() + state.held.len()) as i64;
    if state.indexed {
        let total = state.completions.unwrap_or(0);
        let active_idx: BTreeSet<i64> = state
            .active
            .iter()
            .chain(&state.held)
            .filter_map(|p| index_of(p))
            .collect();
        let want = state
            .parallelism
            .min(total - state.succeeded_idx.len() as i64)
            - active;
        let todo: Vec<i64> = (0..total)
            .filter(|i| !state.succeeded_idx.contains(i) && !active_idx.contains(i))
            .take(want.max(0) as usize)
            .collect();
        for i in todo {
            let _ = store.create(&PODS, ns, job_pod(job, Some(i)), false);
        }
    } else {
        let want = match state.completions {
            Some(c) => state.parallelism.min(c - state.succeeded),
            None => {
                if state.succeeded > 0 {
                    0
                } else {
                    state.parallelism
                }
            }
        } - active;
        for _ in 0..want.max(0) {
            let _ = store.create(&PODS, ns, job_pod(job, None), false);
        }
    }
}

/// The pod a Job controller makes for completion index `index` (None: non-indexed).
pub fn job_pod(job: &Value, index: Option<i64>) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or("");
    let mut pod = pod_from_template(job);
    let m = &mut pod["metadata"];
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
    if !pod["metadata"]["finalizers"].is_array() {
        pod["metadata"]["finalizers"] = json!([]);
    }
    let f = pod["metadata"]["finalizers"]
        .as_array_mut()
        .expect("an array");
    if !f.iter().any(|x| x == TRACKING_FINALIZER) {
        f.push(json!(TRACKING_FINALIZER));
    }
    pod
}
