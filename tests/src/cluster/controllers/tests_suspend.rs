//! A Job's `spec.suspend`, as Kubernetes' Job controller handles it (`manageJob`, `syncJob`,
//! and the Job documentation's "Suspending a Job"): created suspended it makes no pod;
//! suspended while it runs, its active pods are deleted and count for nothing, its
//! `startTime` is cleared and it gets `Suspended` True (`JobSuspended`); resumed, `Suspended`
//! turns False (`JobResumed`), `startTime` is now and `activeDeadlineSeconds` counts from there.

use super::job::reconcile_job;
use super::pods::phase;
use super::tests::{cond, end_pod, indexed_job, kubelet_ends, names, store};
use crate::api::resources::{JOBS, PODS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};

/// Sets the Job's `spec.suspend` and reconciles it.
fn set_suspend(s: &Store, name: &str, suspend: bool) -> Value {
    s.modify(&JOBS, "default", name, Part::Main, |v| {
        v["spec"]["suspend"] = json!(suspend);
    })
    .unwrap();
    reconcile_job(s, "default", name);
    (*s.get(&JOBS, "default", name).unwrap()).clone()
}

/// The Job's condition `ty` whatever its status: (status, reason, message).
fn condition(j: &Value, ty: &str) -> Option<(String, String, String)> {
    let c = j["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?;
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn suspended(status: &str, reason: &str, message: &str) -> Option<(String, String, String)> {
    Some((status.into(), reason.into(), message.into()))
}

#[test]
fn a_job_created_suspended_makes_no_pod_until_it_is_resumed() {
    let s = store();
    let pods = indexed_job(&s, "cs", 2, json!({"suspend": true}));
    assert!(pods.is_empty(), "no pod while suspended");
    let j = s.get(&JOBS, "default", "cs").unwrap();
    assert_eq!(
        condition(&j, "Suspended"),
        suspended("True", "JobSuspended", "Job suspended")
    );
    assert!(j["status"].get("startTime").is_none(), "{j}");
    assert!(j["status"].get("active").is_none());

    let j = set_suspend(&s, "cs", false);
    assert_eq!(names(&s).len(), 2, "both pods made once resumed");
    assert_eq!(
        condition(&j, "Suspended"),
        suspended("False", "JobResumed", "Job resumed")
    );
    assert!(j["status"]["startTime"].is_string(), "{j}");
    assert_eq!(j["status"]["active"], 2);
}

#[test]
fn a_job_never_suspended_has_no_suspended_condition() {
    let s = store();
    indexed_job(&s, "ns", 1, json!({"suspend": false}));
    reconcile_job(&s, "default", "ns");
    let j = s.get(&JOBS, "default", "ns").unwrap();
    assert!(condition(&j, "Suspended").is_none(), "{j}");
    assert!(j["status"]["startTime"].is_string());
}

/// Suspended while it runs: the pods still active are deleted and, however they end (here
/// non-zero, as an agent stopped by SIGTERM: the pod failure policy would fail the Job for
/// it), count for nothing; the finished one stays counted. Resumed, only the indexes not done
/// get new pods, and the Job then completes.
#[test]
fn suspending_a_running_job_deletes_its_active_pods_and_counts_none_of_them() {
    let s = store();
    s.set_node_terminates_pods("n1", true);
    let policy = json!({"rules": [{"action": "FailJob",
        "onExitCodes": {"containerName": "c", "operator": "NotIn", "values": [0]}}]});
    let pods = indexed_job(
        &s,
        "run",
        3,
        json!({"podFailurePolicy": policy, "template": {"spec": {"nodeName": "n1",
            "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}}),
    );
    assert_eq!(pods.len(), 3);
    end_pod(&s, &pods[2], "Succeeded", 0, json!([]));
    reconcile_job(&s, "default", "run");
    let j = s.get(&JOBS, "default", "run").unwrap();
    assert!(j["status"]["startTime"].is_string());
    assert_eq!(j["status"]["completedIndexes"], "2");

    let j = set_suspend(&s, "run", true);
    assert_eq!(
        condition(&j, "Suspended"),
        suspended("True", "JobSuspended", "Job suspended")
    );
    assert!(j["status"].get("startTime").is_none(), "cleared: {j}");
    assert!(j["status"].get("active").is_none(), "{j}");
    for p in &pods[..2] {
        let name = p["metadata"]["name"].as_str().unwrap();
        let now = s.get(&PODS, "default", name).unwrap();
        assert!(now["metadata"]["deletionTimestamp"].is_string(), "{now}");
        assert!(
            now["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty()),
            "released before it ends: {now}"
        );
        // The kubelet stops it: the agent exits 143 on SIGTERM; then the pod goes.
        kubelet_ends(&s, name, Some(143));
        reconcile_job(&s, "default", "run");
        let removal = DeleteOptions {
            grace_period: Some(0),
            ..Default::default()
        };
        let _ = s.delete(&PODS, "default", name, &removal);
        reconcile_job(&s, "default", "run");
    }
    let j = s.get(&JOBS, "default", "run").unwrap();
    assert!(
        cond(&j, "Failed").is_none() && cond(&j, "FailureTarget").is_none(),
        "{j}"
    );
    assert!(j["status"].get("failed").is_none(), "not counted: {j}");
    assert_eq!(j["status"]["completedIndexes"], "2");
    assert_eq!(names(&s), [pods[2]["metadata"]["name"].as_str().unwrap()]);
    // Nothing is made while suspended.
    reconcile_job(&s, "default", "run");
    assert_eq!(names(&s).len(), 1);

    let j = set_suspend(&s, "run", false);
    assert_eq!(
        condition(&j, "Suspended"),
        suspended("False", "JobResumed", "Job resumed")
    );
    assert!(j["status"]["startTime"].is_string());
    let fresh: Vec<_> = s
        .list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items
        .into_iter()
        .filter(|p| phase(p) != "Succeeded")
        .collect();
    let mut indexes: Vec<&str> = fresh
        .iter()
        .map(|p| {
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1"], "only the indexes not done");
    for p in &fresh {
        end_pod(&s, p, "Succeeded", 0, json!([]));
    }
    reconcile_job(&s, "default", "run");
    let j = s.get(&JOBS, "default", "run").unwrap();
    assert!(cond(&j, "Complete").is_some(), "{j}");
    assert_eq!(j["status"]["succeeded"], 3);
}

/// `activeDeadlineSeconds` counts from the start time the resume sets: a Job whose first start
/// is long past is not failed by its deadline while suspended, nor when resumed; it fails
/// once the deadline has passed since the resume.
#[test]
fn the_deadline_counts_from_the_resume() {
    let s = store();
    let long_ago = "2020-01-01T00:00:00Z";
    indexed_job(&s, "dl", 1, json!({"activeDeadlineSeconds": 600}));
    let back_date = |s: &Store| {
        s.modify(&JOBS, "default", "dl", Part::Status, |v| {
            v["status"]["startTime"] = json!(long_ago);
        })
        .unwrap();
    };
    back_date(&s);
    let j = set_suspend(&s, "dl", true);
    assert!(
        cond(&j, "Failed").is_none(),
        "suspended, the deadline does not run: {j}"
    );
    assert!(j["status"].get("startTime").is_none());
    super::job::reconcile_timed_jobs(&s);
    let j = set_suspend(&s, "dl", false);
    assert!(cond(&j, "Failed").is_none(), "{j}");
    assert_ne!(j["status"]["startTime"], long_ago);
    assert_eq!(names(&s).len(), 1, "a pod again");
    // 600 s after the resume (the start time set back again), the deadline fails it.
    back_date(&s);
    reconcile_job(&s, "default", "dl");
    let j = s.get(&JOBS, "default", "dl").unwrap();
    assert_eq!(cond(&j, "Failed").unwrap()["reason"], "DeadlineExceeded");
}
