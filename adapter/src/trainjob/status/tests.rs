use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use super::*;
use crate::trainjob::render::tests::job;

fn at(s: &str) -> Time {
    Time(s.parse().unwrap())
}

fn jobset(conditions: Value) -> Value {
    json!({"status": {"conditions": conditions, "replicatedJobsStatus": [
        {"name": "launcher", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0},
        {"name": "node", "ready": 2, "succeeded": 1, "failed": 0, "active": 2, "suspended": 0},
    ]}})
}

fn types(s: &TrainJobStatus) -> Vec<(&str, &str, &str)> {
    s.conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect()
}

#[test]
fn a_running_job_has_no_condition_and_the_jobsets_counts() {
    let j = job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}}));
    let n = next(
        &j,
        Some(&jobset(json!([]))),
        None,
        &at("2026-01-01T00:00:00Z"),
    );
    assert!(n.status.conditions.is_empty());
    assert_eq!(n.status.jobs_status.len(), 2);
    assert_eq!(
        n.status.jobs_status[1],
        JobStatus {
            name: "node".into(),
            ready: 2,
            succeeded: 1,
            failed: 0,
            active: 2,
            suspended: 0
        }
    );
    assert!(!n.delete_jobset);
}

#[test]
fn suspended_then_resumed() {
    let mut j = job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}, "suspend": true}));
    let n = next(&j, None, None, &at("2026-01-01T00:00:00Z"));
    assert_eq!(types(&n.status), [("Suspended", "True", "Suspended")]);
    assert_eq!(n.status.conditions[0].message, "TrainJob is suspended");
    j.status = Some(n.status);
    j.spec.suspend = Some(false);
    let n = next(&j, None, None, &at("2026-01-01T00:01:00Z"));
    assert_eq!(types(&n.status), [("Suspended", "False", "Resumed")]);
    assert_eq!(
        n.status.conditions[0].last_transition_time,
        at("2026-01-01T00:01:00Z")
    );
    j.status = Some(n.status);
    let again = next(&j, None, None, &at("2026-01-01T00:02:00Z"));
    assert_eq!(
        again.status.conditions[0].last_transition_time,
        at("2026-01-01T00:01:00Z")
    );
}

#[test]
fn complete_copies_the_jobsets_condition() {
    let j = job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}}));
    let js = jobset(
        json!([{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
        "message": "jobset completed successfully", "lastTransitionTime": "2026-01-01T00:05:00Z"}]),
    );
    let n = next(&j, Some(&js), None, &at("2026-01-01T00:06:00Z"));
    assert_eq!(types(&n.status), [("Complete", "True", "AllJobsCompleted")]);
    assert_eq!(
        n.status.conditions[0].message,
        "jobset completed successfully"
    );
    assert_eq!(
        n.status.conditions[0].last_transition_time,
        at("2026-01-01T00:05:00Z")
    );
    assert!(finished(&n.status));
}

#[test]
fn failed_names_the_pod_and_its_exit_code() {
    let j = job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}}));
    let js = jobset(
        json!([{"type": "Failed", "status": "True", "reason": "FailedJobs",
        "message": "jobset failed due to one or more job failures"}]),
    );
    let f = PodFailure {
        pod: "pi-launcher-0-0-abcde".into(),
        container: "node".into(),
        exit_code: 3,
    };
    let n = next(&j, Some(&js), Some(&f), &at("2026-01-01T00:06:00Z"));
    assert_eq!(types(&n.status), [("Failed", "True", "FailedJobs")]);
    assert_eq!(
        n.status.conditions[0].message,
        "jobset failed due to one or more job failures: pod pi-launcher-0-0-abcde (container node) exited with exit code 3"
    );
    assert_eq!(
        failure_message("pod pi-launcher-0-0-abcde: exit code 3", &f),
        "pod pi-launcher-0-0-abcde: exit code 3"
    );
}

#[test]
fn the_deadline_fails_the_job_and_deletes_the_jobset_once() {
    let mut j =
        job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}, "activeDeadlineSeconds": 60}));
    j.metadata.creation_timestamp = Some(at("2026-01-01T00:00:00Z"));
    let n = next(
        &j,
        Some(&jobset(json!([]))),
        None,
        &at("2026-01-01T00:00:20Z"),
    );
    assert_eq!((n.deadline_in, n.delete_jobset), (Some(40), false));
    let n = next(
        &j,
        Some(&jobset(json!([]))),
        None,
        &at("2026-01-01T00:01:01Z"),
    );
    assert_eq!(types(&n.status), [("Failed", "True", "DeadlineExceeded")]);
    assert!(n.delete_jobset);
    j.status = Some(n.status);
    let n = next(&j, None, None, &at("2026-01-01T00:02:00Z"));
    assert_eq!(
        types(&n.status),
        [("Failed", "True", "DeadlineExceeded")],
        "kept"
    );
    assert!(!n.delete_jobset);
}

#[test]
fn a_failed_condition_not_the_deadlines_is_recomputed() {
    let mut j = job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}}));
    let js = jobset(
        json!([{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "m"}]),
    );
    j.status = Some(next(&j, Some(&js), None, &at("2026-01-01T00:00:00Z")).status);
    let n = next(
        &j,
        Some(&jobset(json!([]))),
        None,
        &at("2026-01-01T00:01:00Z"),
    );
    assert!(n.status.conditions.is_empty());
}
