//! The status an MPIJob gets from its Job and pods, step by step through a job's life.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use crate::controller::status::{
    condition, is_true, next_status, phase, Observed, Outcome, INVALID,
};
use crate::manifest::mpijob::model::MpiJobStatus;

fn at(s: &str) -> Time {
    Time(s.parse().unwrap())
}

const T0: &str = "2026-12-03T12:00:00Z";
const T1: &str = "2026-12-03T12:00:05Z";
const T2: &str = "2026-12-03T12:00:30Z";

fn pod_json(index: u32, phase: &str, ready: bool) -> Value {
    json!({"metadata": {"name": format!("pi-{index}-x"), "labels": {
            "prrte-k8s.io/job": "pi", "batch.kubernetes.io/job-completion-index": index.to_string()}},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
}

fn typed(v: Value) -> Arc<Pod> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn pod(index: u32, phase: &str, ready: bool) -> Arc<Pod> {
    typed(pod_json(index, phase, ready))
}

fn job(conditions: Value) -> Job {
    serde_json::from_value(
        json!({"metadata": {"name": "pi"}, "status": {"conditions": conditions, "completionTime": T2}}),
    )
    .unwrap()
}

fn observe<'a>(job: Option<&'a Job>, pods: &'a [Arc<Pod>], suspend: bool) -> Observed<'a> {
    Observed {
        name: "pi",
        namespace: "team",
        suspend,
        workers: 2,
        job,
        pods,
        invalid: None,
    }
}

fn reasons(o: &Outcome) -> Vec<&str> {
    o.notices.iter().map(|n| n.reason.as_str()).collect()
}

#[test]
fn created_running_succeeded_with_one_event_each() {
    let s0 = MpiJobStatus::default();
    let j = job(json!([]));
    let pending = [
        pod(0, "Pending", false),
        pod(1, "Pending", false),
        pod(2, "Pending", false),
    ];
    let o = next_status(&s0, &observe(Some(&j), &pending, false), &at(T0));
    assert_eq!(reasons(&o), ["MPIJobCreated"]);
    assert!(is_true(&o.status, "Created"));
    assert_eq!(o.status.start_time, Some(at(T0)));
    assert_eq!(phase(&o.status), "Created");
    let l = &o.status.replica_statuses["Launcher"];
    assert_eq!(
        (l.active, l.selector.as_deref()),
        (
            0,
            Some("prrte-k8s.io/job=pi,batch.kubernetes.io/job-completion-index=0")
        )
    );
    // The same again: nothing new.
    let again = next_status(&o.status, &observe(Some(&j), &pending, false), &at(T1));
    assert_eq!(again.status, o.status);
    assert!(again.notices.is_empty());

    // Running, one worker not ready yet: not Running.
    let up = [
        pod(0, "Running", true),
        pod(1, "Running", true),
        pod(2, "Running", false),
    ];
    let o2 = next_status(&o.status, &observe(Some(&j), &up, false), &at(T1));
    assert!(condition(&o2.status, "Running").is_none());
    assert_eq!(o2.status.replica_statuses["Worker"].active, 2);
    let ready = [
        pod(0, "Running", true),
        pod(1, "Running", true),
        pod(2, "Running", true),
    ];
    let o3 = next_status(&o2.status, &observe(Some(&j), &ready, false), &at(T1));
    assert_eq!(reasons(&o3), ["MPIJobRunning"]);
    assert!(o3.started_running);
    assert_eq!(phase(&o3.status), "Running");
    let r = condition(&o3.status, "Running").unwrap();
    assert!(r.message.as_deref().unwrap().contains("2/2 workers"));

    let done = job(json!([{"type": "Complete", "status": "True"}]));
    let finished = [
        pod(0, "Succeeded", false),
        pod(1, "Failed", false),
        pod(2, "Failed", false),
    ];
    let o4 = next_status(&o3.status, &observe(Some(&done), &finished, false), &at(T2));
    assert_eq!(reasons(&o4), ["MPIJobSucceeded"]);
    assert_eq!(phase(&o4.status), "Succeeded");
    assert_eq!(o4.status.completion_time, Some(at(T2)));
    // Running turned false, its transition kept apart.
    let r = condition(&o4.status, "Running").unwrap();
    assert_eq!(r.status, "False");
    assert_eq!(o4.status.replica_statuses["Launcher"].succeeded, 1);
    // Finished: nothing changes any more.
    let o5 = next_status(&o4.status, &observe(None, &[], false), &at(T2));
    assert_eq!(o5.status, o4.status);
    assert!(o5.notices.is_empty());
    // kubectl wait --for=condition=Succeeded reads this.
    let v = serde_json::to_value(&o4.status).unwrap();
    assert!(v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Succeeded" && c["status"] == "True"));
}

#[test]
fn a_failure_keeps_the_jobs_reason_naming_the_pod_and_exit_code() {
    let msg = "Container prrte-k8s for pod team/pi-2-x failed with exit code 3 matching FailJob rule at index 1";
    let failed = job(
        json!([{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": msg}]),
    );
    let pods = [
        pod(0, "Running", true),
        pod(1, "Running", true),
        pod(2, "Failed", false),
    ];
    let o = next_status(
        &MpiJobStatus::default(),
        &observe(Some(&failed), &pods, false),
        &at(T1),
    );
    let f = condition(&o.status, "Failed").unwrap();
    assert_eq!(
        (f.status.as_str(), f.reason.as_deref(), f.message.as_deref()),
        ("True", Some("PodFailurePolicy"), Some(msg))
    );
    assert_eq!(reasons(&o), ["MPIJobCreated", "PodFailurePolicy"]);
    assert!(o.notices[1].warning);
    assert_eq!(o.status.replica_statuses["Worker"].failed, 1);
    assert_eq!(phase(&o.status), "Failed");
    // Never Running, finished: Running false at the completion time, as mpi-operator does.
    assert_eq!(condition(&o.status, "Running").unwrap().status, "False");
}

#[test]
fn an_eviction_is_named() {
    let msg = "Pod team/pi-1-x has condition DisruptionTarget matching FailJob rule at index 0";
    let failed = job(
        json!([{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": msg}]),
    );
    let mut gone = pod_json(1, "Failed", false);
    gone["status"]["reason"] = json!("Evicted");
    let pods = [
        pod(0, "Running", true),
        typed(gone),
        pod(2, "Running", true),
    ];
    let o = next_status(
        &MpiJobStatus::default(),
        &observe(Some(&failed), &pods, false),
        &at(T1),
    );
    assert_eq!(
        reasons(&o),
        ["MPIJobCreated", "MPIJobEvicted", "PodFailurePolicy"]
    );
    assert!(o.notices[1].message.contains("pi-1-x"));
}

#[test]
fn suspended_then_resumed() {
    let o = next_status(&MpiJobStatus::default(), &observe(None, &[], true), &at(T0));
    assert_eq!(reasons(&o), ["MPIJobCreated", "MPIJobSuspended"]);
    assert!(o.status.start_time.is_none());
    assert_eq!(phase(&o.status), "Suspended");
    let r = condition(&o.status, "Running").unwrap();
    assert_eq!(
        (r.status.as_str(), r.reason.as_deref()),
        ("False", Some("MPIJobSuspended"))
    );
    let again = next_status(&o.status, &observe(None, &[], true), &at(T1));
    assert!(again.notices.is_empty());
    let j = job(json!([]));
    let resumed = next_status(&o.status, &observe(Some(&j), &[], false), &at(T1));
    assert_eq!(reasons(&resumed), ["MPIJobResumed"]);
    let s = condition(&resumed.status, "Suspended").unwrap();
    assert_eq!(
        (s.status.as_str(), s.reason.as_deref()),
        ("False", Some("MPIJobResumed"))
    );
    assert_eq!(resumed.status.start_time, Some(at(T1)));
    assert_eq!(phase(&resumed.status), "Created");
}

#[test]
fn a_refused_mpijob_fails_once_with_the_reason() {
    let mut o = observe(None, &[], false);
    o.invalid = Some("spec.mpiImplementation: \"LAM\" is not one of OpenMPI, Intel, MPICH");
    let out = next_status(&MpiJobStatus::default(), &o, &at(T0));
    let f = condition(&out.status, "Failed").unwrap();
    assert_eq!(f.reason.as_deref(), Some(INVALID));
    assert!(f.message.as_deref().unwrap().contains("LAM"));
    assert_eq!(reasons(&out), ["MPIJobCreated", INVALID]);
    assert!(out.status.completion_time.is_some());
    let again = next_status(&out.status, &o, &at(T1));
    assert!(again.notices.is_empty() && again.status == out.status);
}

#[test]
fn a_long_message_is_cut_to_what_an_event_takes() {
    let mut o = observe(None, &[], false);
    let long = "é".repeat(2000);
    o.invalid = Some(&long);
    let out = next_status(&MpiJobStatus::default(), &o, &at(T0));
    let m = &out.notices[1].message;
    assert!(m.len() <= 1024 && m.ends_with("..."));
}
