//! The status an MPIJob gets from its Job and pods, step by step through a job's life.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use crate::controller::child::Child;
use crate::controller::retry::INVALID;
use crate::controller::status::{condition, is_true, next_status, phase, Observed, Outcome};
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

fn job(conditions: Value) -> Child {
    Child::Job(
        serde_json::from_value(
            json!({"metadata": {"name": "pi"}, "status": {"conditions": conditions, "completionTime": T2}}),
        )
        .unwrap(),
    )
}

fn observe<'a>(job: Option<&'a Child>, pods: &'a [Arc<Pod>], suspend: bool) -> Observed<'a> {
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
    // Finished, the Job gone (its TTL): nothing changes any more.
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

/// Pod 0 ended with the launcher's termination message `message`.
fn launcher_ended(message: &str) -> Arc<Pod> {
    let mut p = pod_json(0, "Failed", false);
    p["status"]["containerStatuses"] = json!([{"name": "mpi", "image": "i", "imageID": "",
        "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 7, "message": message}}}]);
    typed(p)
}

#[test]
fn a_failure_names_the_failed_rank_its_pod_and_how_it_ended() {
    let msg = "Container mpi for pod team/pi-0-x failed with exit code 7 matching FailJob rule at index 1";
    let failed = job(
        json!([{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": msg}]),
    );
    for (rank, pods) in [
        (
            "rank 2 in pod pi-2-x exited with code 7",
            [
                launcher_ended("rank 2 in pod pi-2-x exited with code 7\n"),
                pod(1, "Running", true),
                pod(2, "Running", true),
            ],
        ),
        (
            "rank 1 in pod pi-1-x was killed by signal 9 (Killed)",
            [
                launcher_ended("rank 1 in pod pi-1-x was killed by signal 9 (Killed)"),
                pod(1, "Running", true),
                pod(2, "Running", true),
            ],
        ),
    ] {
        let o = next_status(
            &MpiJobStatus::default(),
            &observe(Some(&failed), &pods, false),
            &at(T1),
        );
        let f = condition(&o.status, "Failed").unwrap();
        let want = format!("{msg}: {rank}");
        assert_eq!(f.message.as_deref(), Some(want.as_str()));
        assert_eq!(f.reason.as_deref(), Some("PodFailurePolicy"));
        let event = o.notices.iter().find(|n| n.warning).unwrap();
        assert_eq!(event.message, want);
    }
    // A worker's message, or one that is not the launcher's, is not quoted.
    let mut w = pod_json(1, "Failed", false);
    w["status"]["containerStatuses"] = json!([{"name": "mpi", "image": "i", "imageID": "",
        "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "message": "rank 9 in pod x exited with code 1"}}}]);
    let pods = [launcher_ended("panic: something else"), typed(w)];
    let o = next_status(
        &MpiJobStatus::default(),
        &observe(Some(&failed), &pods, false),
        &at(T1),
    );
    assert_eq!(
        condition(&o.status, "Failed").unwrap().message.as_deref(),
        Some(msg)
    );
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
    // mpi-operator's counts once the launcher's Job failed: the launcher failed, no worker.
    assert_eq!(counts(&o.status, "Launcher"), (0, 0, 1));
    assert_eq!(counts(&o.status, "Worker"), (0, 0, 0));
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

/// (active, succeeded, failed) of the replica type `role`.
fn counts(s: &MpiJobStatus, role: &str) -> (i32, i32, i32) {
    let r = &s.replica_statuses[role];
    (r.active, r.succeeded, r.failed)
}

/// A pod being deleted (by the Job that ended, or suspended).
fn deleting(index: u32, phase: &str) -> Arc<Pod> {
    let mut p = pod_json(index, phase, false);
    p["metadata"]["deletionTimestamp"] = json!(T1);
    typed(p)
}

/// The status of the pi example (a launcher, 2 workers) running, all pods up.
fn running_pi() -> MpiJobStatus {
    let j = job(json!([]));
    let up = [
        pod(0, "Running", true),
        pod(1, "Running", true),
        pod(2, "Running", true),
    ];
    let o = next_status(
        &MpiJobStatus::default(),
        &observe(Some(&j), &up, false),
        &at(T0),
    );
    assert_eq!(counts(&o.status, "Launcher"), (1, 0, 0));
    assert_eq!(counts(&o.status, "Worker"), (2, 0, 0));
    o.status
}

/// The end of `running` seen through `pods` and the Job's `conditions`, then seen again
/// later: the counts may change, the conditions and completionTime do not.
fn end_then_settle(
    conditions: Value,
    at_end: &[Arc<Pod>],
    settled: &[Arc<Pod>],
) -> (MpiJobStatus, MpiJobStatus) {
    let j = job(conditions);
    let end = next_status(&running_pi(), &observe(Some(&j), at_end, false), &at(T1)).status;
    let later = next_status(&end, &observe(Some(&j), settled, false), &at(T2)).status;
    assert_eq!(later.conditions, end.conditions);
    assert_eq!(later.completion_time, end.completion_time);
    (end, later)
}

/// mpi-operator's pi example succeeded: its final replicaStatuses are `Launcher {succeeded:
/// 1}`, `Worker {}`, as its integration test `TestMPIJobSuccess` and unit test
/// `TestLauncherSucceeded` expect (updateMPIJobStatus: the launcher's Job complete sets
/// `succeeded: 1` on a fresh status; the workers are not counted once the launcher's Job has
/// finished, and cleanUpWorkerPods zeroes them).
#[test]
fn after_pi_succeeded_the_counts_are_mpi_operators() {
    let complete = json!([{"type": "SuccessCriteriaMet", "status": "True"},
                          {"type": "Complete", "status": "True"}]);
    // At the end the cache may still show the launcher running and a worker ending.
    let at_end = [
        pod(0, "Running", true),
        pod(1, "Succeeded", false),
        deleting(2, "Running"),
    ];
    let settled = [
        pod(0, "Succeeded", false),
        pod(1, "Succeeded", false),
        pod(2, "Succeeded", false),
    ];
    let (end, later) = end_then_settle(complete, &at_end, &settled);
    for s in [&end, &later] {
        assert!(is_true(s, "Succeeded"));
        assert_eq!(counts(s, "Launcher"), (0, 1, 0));
        assert_eq!(counts(s, "Worker"), (0, 0, 0));
    }
}

/// The conditions of a Job failed by its deadline.
fn failed_conditions() -> Value {
    json!([{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
         "message": "Job was active longer than specified deadline"}])
}

/// The deadline passed: the Job failed (`DeadlineExceeded`) and stops every pod. mpi-operator's
/// counts (`TestMPIJobFailure`, `TestLauncherFailed`): the launcher's `failed` is its Job's
/// `status.failed` (the launcher pod the Job stopped counts as failed, gone or not), the
/// workers nothing.
#[test]
fn after_the_deadline_the_counts_are_mpi_operators() {
    let failed = failed_conditions();
    let at_end = [
        deleting(0, "Running"),
        deleting(1, "Running"),
        deleting(2, "Running"),
    ];
    let settled = [pod(0, "Failed", false)];
    let (end, later) = end_then_settle(failed, &at_end, &settled);
    for s in [&end, &later] {
        assert_eq!(
            condition(s, "Failed").unwrap().reason.as_deref(),
            Some("DeadlineExceeded")
        );
        assert_eq!(counts(s, "Launcher"), (0, 0, 1));
        assert_eq!(counts(s, "Worker"), (0, 0, 0));
    }
    // Every pod gone: the same (the Job's own counts, not the pods').
    let j = job(failed_conditions());
    let gone = next_status(&later, &observe(Some(&j), &[], false), &at(T2));
    assert_eq!(counts(&gone.status, "Launcher"), (0, 0, 1));
    assert_eq!(counts(&gone.status, "Worker"), (0, 0, 0));
}

/// mpi-operator's "has malformed command" e2e case: the launcher fails (mpirun cannot run the
/// command) and its Job fails. The launcher's `failed` is the launcher pods that failed (ours
/// runs once: 1; mpi-operator's `backoffLimit: 1` there retries it once: 2), the workers
/// nothing.
#[test]
fn after_a_malformed_command_the_counts_are_mpi_operators() {
    let msg = "Container prrte-k8s for pod team/pi-0-x failed with exit code 1 matching FailJob rule at index 1";
    let failed = json!([{"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": msg},
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": msg}]);
    let at_end = [
        pod(0, "Failed", false),
        deleting(1, "Running"),
        pod(2, "Running", true),
    ];
    let settled = [
        pod(0, "Failed", false),
        pod(1, "Failed", false),
        pod(2, "Failed", false),
    ];
    let (end, later) = end_then_settle(failed, &at_end, &settled);
    for s in [&end, &later] {
        assert_eq!(counts(s, "Launcher"), (0, 0, 1));
        assert_eq!(counts(s, "Worker"), (0, 0, 0));
    }
}

/// Counts written wrong at the end (each pod's earlier counts kept) are made right while the
/// Job is there; its conditions and completionTime stay.
#[test]
fn a_finished_status_with_wrong_counts_is_corrected() {
    let complete = job(json!([{"type": "Complete", "status": "True"}]));
    let settled = [
        pod(0, "Succeeded", false),
        pod(1, "Succeeded", false),
        pod(2, "Succeeded", false),
    ];
    let mut wrong = next_status(
        &running_pi(),
        &observe(Some(&complete), &settled, false),
        &at(T1),
    )
    .status;
    for r in wrong.replica_statuses.values_mut() {
        r.active = 1;
    }
    let fixed = next_status(&wrong, &observe(Some(&complete), &settled, false), &at(T2));
    assert_eq!(counts(&fixed.status, "Launcher"), (0, 1, 0));
    assert_eq!(counts(&fixed.status, "Worker"), (0, 0, 0));
    assert_eq!(fixed.status.conditions, wrong.conditions);
    assert!(fixed.notices.is_empty());
}

/// Each pod counts once, by its phase; one being deleted is not active (a suspended job's
/// pods, mpi-operator's `Launcher {}`, `Worker {}` once they are gone).
#[test]
fn a_pod_being_deleted_is_not_active() {
    let j = job(json!([]));
    let pods = [
        deleting(0, "Running"),
        pod(1, "Running", true),
        deleting(2, "Running"),
    ];
    let o = next_status(&running_pi(), &observe(Some(&j), &pods, true), &at(T1));
    assert_eq!(counts(&o.status, "Launcher"), (0, 0, 0));
    assert_eq!(counts(&o.status, "Worker"), (1, 0, 0));
    assert_eq!(phase(&o.status), "Suspended");
}

/// `cleanPodPolicy: None`: the workers stay up, so the Job neither completes nor fails; the
/// launcher's index done is the MPIJob's success (mpi-operator: its launcher Job complete),
/// the running workers counted as mpi-operator counts them after the end (not at all).
#[test]
fn with_clean_pod_policy_none_the_launchers_index_is_the_success() {
    let j = Child::Job(
        serde_json::from_value(json!({"metadata": {"name": "pi"},
            "status": {"completedIndexes": "0", "active": 2}}))
        .unwrap(),
    );
    let pods = [
        pod(0, "Succeeded", false),
        pod(1, "Running", true),
        pod(2, "Running", true),
    ];
    let o = next_status(&running_pi(), &observe(Some(&j), &pods, false), &at(T2));
    assert_eq!(reasons(&o), ["MPIJobSucceeded"]);
    assert_eq!(o.status.completion_time, Some(at(T2)));
    assert_eq!(counts(&o.status, "Launcher"), (0, 1, 0));
    assert_eq!(counts(&o.status, "Worker"), (0, 0, 0));
    // Index 1 done is not the job's success.
    let j1 = Child::Job(
        serde_json::from_value(json!({"metadata": {"name": "pi"},
            "status": {"completedIndexes": "1"}}))
        .unwrap(),
    );
    let o = next_status(&running_pi(), &observe(Some(&j1), &pods, false), &at(T2));
    assert!(!is_true(&o.status, "Succeeded"));
}

/// A JobSet child's pods: the replicated job `launcher` (index 0 of its own Job) and `worker`.
fn jobset_pod(rj: &str, index: u32, phase: &str, ready: bool) -> Arc<Pod> {
    let mut p = pod_json(index, phase, ready);
    p["metadata"]["name"] = json!(format!("pi-{rj}-0-{index}-x"));
    p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = json!(rj);
    typed(p)
}

fn jobset(status: Value) -> Child {
    Child::from_object(
        serde_json::from_value(json!({"apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet", "metadata": {"name": "pi"}, "spec": {}, "status": status}))
        .unwrap(),
    )
    .unwrap()
    .unwrap()
}

/// The JobSet child: the launcher counted by its replicated job (every child Job of a JobSet
/// has an index 0), the selectors naming the replicated job; `Running`, then `Succeeded` with
/// the JobSet's `Completed` (or, the workers staying up, the launcher's job succeeded), and
/// `Failed` with its reason and the evicted worker named.
#[test]
fn a_jobsets_pods_and_conditions_make_the_status() {
    let running = jobset(json!({}));
    let up = [
        jobset_pod("launcher", 0, "Running", true),
        jobset_pod("worker", 0, "Running", true),
        jobset_pod("worker", 1, "Running", true),
    ];
    let o = next_status(
        &MpiJobStatus::default(),
        &observe(Some(&running), &up, false),
        &at(T0),
    );
    assert!(is_true(&o.status, "Running"), "{:?}", o.status);
    assert_eq!(counts(&o.status, "Launcher"), (1, 0, 0));
    assert_eq!(counts(&o.status, "Worker"), (2, 0, 0));
    let sel = |r: &str| o.status.replica_statuses[r].selector.clone().unwrap();
    assert_eq!(
        sel("Launcher"),
        "prrte-k8s.io/job=pi,jobset.sigs.k8s.io/replicatedjob-name=launcher"
    );
    assert_eq!(
        sel("Worker"),
        "prrte-k8s.io/job=pi,jobset.sigs.k8s.io/replicatedjob-name=worker"
    );
    let done = jobset(
        json!({"conditions": [{"type": "Completed", "status": "True",
        "reason": "AllJobsCompleted", "lastTransitionTime": T2}]}),
    );
    let end = next_status(&o.status, &observe(Some(&done), &[], false), &at(T2));
    assert!(is_true(&end.status, "Succeeded"));
    assert_eq!(end.status.completion_time, Some(at(T2)));
    assert_eq!(counts(&end.status, "Launcher"), (0, 1, 0));
    // The workers stay up (cleanPodPolicy: None): the launcher's job succeeded is the end.
    let launcher_done = jobset(json!({"replicatedJobsStatus": [
        {"name": "launcher", "succeeded": 1}, {"name": "worker", "succeeded": 0}]}));
    let end = next_status(
        &o.status,
        &observe(Some(&launcher_done), &up, false),
        &at(T2),
    );
    assert!(is_true(&end.status, "Succeeded"));
    let failed = jobset(json!({"conditions": [{"type": "Failed", "status": "True",
        "reason": "FailedJobs", "message": "jobset failed due to one or more job failures"}]}));
    let mut evicted = pod_json(1, "Failed", false);
    evicted["metadata"]["name"] = json!("pi-worker-0-1-x");
    evicted["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = json!("worker");
    evicted["status"]["reason"] = json!("Evicted");
    let pods = [jobset_pod("launcher", 0, "Failed", false), typed(evicted)];
    let end = next_status(&o.status, &observe(Some(&failed), &pods, false), &at(T2));
    let c = condition(&end.status, "Failed").unwrap();
    assert_eq!(c.reason.as_deref(), Some("FailedJobs"));
    assert!(
        c.message.as_deref().unwrap().contains("pi-worker-0-1-x"),
        "{c:?}"
    );
    assert_eq!(counts(&end.status, "Launcher"), (0, 0, 1));
}

/// A JobSet that failed by its worker's Job before the launcher's pod ended: the `Failed`
/// condition written then names no rank; once the launcher's pod shows the failed rank, the
/// condition names it (its reason and time kept), and then stays.
#[test]
fn a_failed_rank_the_launcher_shows_after_the_end_is_named_then() {
    let failed = jobset(json!({"conditions": [{"type": "Failed", "status": "True",
        "reason": "FailedJobs",
        "message": "jobset failed due to one or more job failures (first failed job: pi-worker-0)"}]}));
    let early = [
        jobset_pod("launcher", 0, "Running", true),
        jobset_pod("worker", 0, "Failed", false),
        jobset_pod("worker", 1, "Failed", false),
    ];
    let end = next_status(
        &MpiJobStatus::default(),
        &observe(Some(&failed), &early, false),
        &at(T1),
    );
    let first = condition(&end.status, "Failed").unwrap().clone();
    assert!(
        !first.message.as_deref().unwrap().contains("rank "),
        "{first:?}"
    );
    let rank = "rank 1 in pod pi-worker-0-1-x exited with code 3";
    let mut launcher = pod_json(0, "Failed", false);
    launcher["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = json!("launcher");
    launcher["status"]["containerStatuses"] = json!([{"name": "mpi", "image": "i",
        "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 3, "message": rank}}}]);
    let late = [typed(launcher), early[1].clone(), early[2].clone()];
    let after = next_status(&end.status, &observe(Some(&failed), &late, false), &at(T2));
    let c = condition(&after.status, "Failed").unwrap();
    let want = format!("{}: {rank}", first.message.as_deref().unwrap());
    assert_eq!(c.message.as_deref(), Some(want.as_str()));
    assert_eq!(c.reason, first.reason);
    assert_eq!(c.last_transition_time, first.last_transition_time);
    assert_eq!(after.status.completion_time, end.status.completion_time);
    let again = next_status(
        &after.status,
        &observe(Some(&failed), &late, false),
        &at(T2),
    );
    assert_eq!(again.status, after.status);
}
