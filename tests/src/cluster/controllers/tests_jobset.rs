//! The JobSet controller's startup policy and suspension, as JobSet's: `InOrder` makes a
//! replicated Job's Jobs once those listed before it are ready; `spec.suspend` suspends and
//! resumes the existing child Jobs.

use super::jobset::{reconcile_jobset, REPLICATED_JOB_NAME};
use super::tests::{cond, store};
use crate::api::resources::{JOBS, JOBSETS};
use crate::api::{Part, Store};
use serde_json::{json, Value};

/// A JobSet `js` of the replicated Jobs `worker` (2 pods) then `launcher` (1 pod), started in
/// `order`, reconciled once.
fn jobset(s: &Store, order: &str) {
    let job = |n: i64| {
        json!({"replicas": 1, "template": {"spec": {
            "completionMode": "Indexed", "completions": n, "parallelism": n,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}}}})
    };
    let mut worker = job(2);
    worker["name"] = json!("worker");
    let mut launcher = job(1);
    launcher["name"] = json!("launcher");
    s.create(
        &JOBSETS,
        "default",
        json!({"metadata": {"name": "js"}, "spec": {
            "startupPolicy": {"startupPolicyOrder": order},
            "replicatedJobs": [worker, launcher]}}),
        false,
    )
    .unwrap();
    reconcile_jobset(s, "default", "js");
}

/// The child Jobs' replicated Jobs and suspension, by name.
fn jobs(s: &Store) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = s
        .list(&JOBS, Some("default"), &Default::default())
        .unwrap()
        .items
        .iter()
        .map(|j| {
            (
                j["metadata"]["labels"][REPLICATED_JOB_NAME]
                    .as_str()
                    .unwrap()
                    .to_string(),
                j["spec"]["suspend"] == true,
            )
        })
        .collect();
    v.sort();
    v
}

fn set_ready(s: &Store, job: &str, ready: i64) {
    s.modify(&JOBS, "default", job, Part::Status, |v| {
        v["status"]["ready"] = json!(ready);
    })
    .unwrap();
    reconcile_jobset(s, "default", "js");
}

fn jobset_obj(s: &Store) -> Value {
    (*s.get(&JOBSETS, "default", "js").unwrap()).clone()
}

#[test]
fn in_order_makes_the_next_replicated_job_once_the_earlier_is_ready() {
    let s = store();
    jobset(&s, "InOrder");
    assert_eq!(jobs(&s), [("worker".to_string(), false)]);
    assert!(cond(&jobset_obj(&s), "StartupPolicyInProgress").is_some());
    set_ready(&s, "js-worker-0", 1);
    assert_eq!(jobs(&s).len(), 1, "one worker of two ready is not enough");
    set_ready(&s, "js-worker-0", 2);
    assert_eq!(
        jobs(&s),
        [
            ("launcher".to_string(), false),
            ("worker".to_string(), false)
        ]
    );
    assert!(cond(&jobset_obj(&s), "StartupPolicyInProgress").is_some());
    // Completed once the last replicated Job is ready too.
    set_ready(&s, "js-launcher-0", 1);
    let js = jobset_obj(&s);
    assert!(cond(&js, "StartupPolicyCompleted").is_some(), "{js}");
    assert!(cond(&js, "StartupPolicyInProgress").is_none(), "{js}");
}

#[test]
fn any_order_makes_every_job_at_once() {
    let s = store();
    jobset(&s, "AnyOrder");
    assert_eq!(jobs(&s).len(), 2);
    assert!(cond(&jobset_obj(&s), "StartupPolicyInProgress").is_none());
}

#[test]
fn suspend_and_resume_reach_the_child_jobs() {
    let s = store();
    jobset(&s, "AnyOrder");
    let set = |suspend: bool| {
        s.modify(&JOBSETS, "default", "js", Part::Main, |v| {
            v["spec"]["suspend"] = json!(suspend);
        })
        .unwrap();
        reconcile_jobset(&s, "default", "js");
    };
    set(true);
    assert!(
        jobs(&s).iter().all(|(_, suspended)| *suspended),
        "{:?}",
        jobs(&s)
    );
    set(false);
    assert!(
        jobs(&s).iter().all(|(_, suspended)| !suspended),
        "{:?}",
        jobs(&s)
    );
}
