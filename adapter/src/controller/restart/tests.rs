//! The restart decisions and what they write into the status, without the API.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::json;

use super::*;
use crate::controller::child::Child;
use crate::controller::status::{next_status, Observed};

/// The failure of the Job `j`, as its child reads it.
fn job_failure(j: &Job) -> Option<Failure> {
    Child::Job(j.clone()).failure()
}

/// The Job `j` marked as its child marks it.
fn mark(j: &mut Job, attempt: u32, left: Option<i64>) {
    let mut c = Child::Job(j.clone());
    c.mark(attempt, left);
    *j = c.job().unwrap().clone();
}

fn at(s: &str) -> Time {
    Time(s.parse().unwrap())
}

const T0: &str = "2026-12-03T12:00:00Z";
const T1: &str = "2026-12-03T12:00:40Z";

fn failure(reason: &str) -> Failure {
    Failure {
        reason: reason.into(),
        message: "Container agent for pod team/pi-0-x failed with exit code 1".into(),
    }
}

fn failed_job(reason: &str) -> Job {
    serde_json::from_value(
        json!({"metadata": {"name": "pi"}, "status": {"conditions": [
        {"type": "FailureTarget", "status": "True", "reason": reason},
        {"type": "Failed", "status": "True", "reason": reason,
         "message": "Container agent for pod team/pi-0-x failed with exit code 1"}]}}),
    )
    .unwrap()
}

fn observe<'a>(job: Option<&'a Child>) -> Observed<'a> {
    Observed {
        name: "pi",
        namespace: "team",
        suspend: false,
        workers: 2,
        job,
        pods: &[],
        invalid: None,
    }
}

#[test]
fn a_failure_is_restarted_until_the_limit_and_a_deadline_never() {
    let f = failure("PodFailurePolicy");
    assert_eq!(
        verdict(&f, 0, 0),
        Verdict::Fail,
        "no backoffLimit: it fails"
    );
    assert_eq!(verdict(&f, 0, 2), Verdict::Restart { failed: 0 });
    assert_eq!(verdict(&f, 1, 2), Verdict::Restart { failed: 1 });
    assert_eq!(
        verdict(&f, 2, 2),
        Verdict::Exceeded {
            failed: 2,
            limit: 2
        }
    );
    assert_eq!(verdict(&failure("DeadlineExceeded"), 0, 2), Verdict::Fail);
    // The Job's own reason for a pod over its backoffLimit (0) is a failure like another.
    assert_eq!(
        verdict(&failure("BackoffLimitExceeded"), 0, 1),
        Verdict::Restart { failed: 0 }
    );
    assert_eq!(job_failure(&failed_job("PodFailurePolicy")), Some(f));
    let running: Job = serde_json::from_value(json!({"status": {"conditions": [
        {"type": "FailureTarget", "status": "True"}]}}))
    .unwrap();
    assert_eq!(job_failure(&running), None);
}

#[test]
fn the_count_is_the_childs_label_else_the_statuss_failed_launchers() {
    let mut child = ObjectMeta::default();
    assert_eq!(earlier(Some(&child), &MpiJobStatus::default()), 0);
    child.labels = Some([(ATTEMPT_LABEL.to_string(), "2".to_string())].into());
    let mut status = MpiJobStatus::default();
    status.replica_statuses.insert(
        "Launcher".into(),
        crate::manifest::mpijob::model::ReplicaStatus {
            failed: 1,
            ..Default::default()
        },
    );
    assert_eq!(earlier(Some(&child), &status), 2);
    assert_eq!(earlier(None, &status), 1);
    assert_eq!(earlier(None, &MpiJobStatus::default()), 0);
    assert_eq!(attempt_of(&child), 2);
}

#[test]
fn a_child_is_marked_with_its_attempt_and_what_is_left_of_the_deadline() {
    let mut job: Job = serde_json::from_value(json!({"metadata": {"name": "pi"},
        "spec": {"activeDeadlineSeconds": 60, "template": {}}}))
    .unwrap();
    mark(&mut job, 0, Some(20));
    let label = |j: &Job| {
        (
            j.metadata.labels.as_ref().unwrap()[ATTEMPT_LABEL].clone(),
            j.spec
                .as_ref()
                .unwrap()
                .template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .as_ref()
                .unwrap()[ATTEMPT_LABEL]
                .clone(),
        )
    };
    assert_eq!(label(&job), ("0".into(), "0".into()));
    assert_eq!(job.spec.as_ref().unwrap().active_deadline_seconds, Some(60));
    mark(&mut job, 2, Some(20));
    assert_eq!(label(&job), ("2".into(), "2".into()));
    assert_eq!(job.spec.as_ref().unwrap().active_deadline_seconds, Some(20));

    let mut obj: MpiJob = serde_json::from_value(json!({"apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob", "metadata": {"name": "pi"},
        "spec": {"runPolicy": {"activeDeadlineSeconds": 60}, "mpiReplicaSpecs": {}},
        "status": {"startTime": T0}}))
    .unwrap();
    assert_eq!(deadline_left(&obj, &at(T1)), Some(20));
    assert_eq!(deadline_left(&obj, &at("2026-12-03T12:05:00Z")), Some(1));
    obj.spec
        .run_policy
        .as_mut()
        .unwrap()
        .active_deadline_seconds = None;
    assert_eq!(deadline_left(&obj, &at(T1)), None);
}

/// A failure with restarts left: `Restarting` (the attempt and its failure named) with one
/// warning event, no `Failed`, the launcher's failure counted; a second restart before the
/// first ran is news again; the next attempt's `Running` replaces it.
#[test]
fn a_restart_is_restarting_with_its_event_and_running_ends_it() {
    let s0 = next_status(&MpiJobStatus::default(), &observe(None), &at(T0)).status;
    let f = failure("PodFailurePolicy");
    let v = verdict(&f, 0, 2);
    let mut out = next_status(&s0, &observe(None), &at(T1));
    apply(&mut out, "team/pi", 1, Some((&f, &v)), &at(T1));
    let c = condition(&out.status, "Restarting").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some(RESTARTING))
    );
    let msg = c.message.clone().unwrap();
    assert_eq!(
        msg,
        "MPIJob team/pi is restarting: attempt 1 (PodFailurePolicy): Container agent for pod \
         team/pi-0-x failed with exit code 1; attempt 2 starts, every pod made again"
    );
    assert!(condition(&out.status, "Failed").is_none());
    assert_eq!(crate::controller::status::phase(&out.status), "Restarting");
    assert_eq!(out.status.replica_statuses["Launcher"].failed, 1);
    assert_eq!(
        out.notices
            .iter()
            .filter(|n| n.reason == RESTARTING && n.warning)
            .count(),
        1
    );
    // The same again (the child still going): nothing new.
    let s1 = out.status.clone();
    let mut again = next_status(&s1, &observe(None), &at(T1));
    apply(&mut again, "team/pi", 1, Some((&f, &v)), &at(T1));
    assert_eq!(again.status, s1);
    assert!(again.notices.is_empty());
    // The second attempt failed too, before it ran.
    let v2 = verdict(&f, 1, 2);
    let mut second = next_status(&s1, &observe(None), &at(T1));
    apply(&mut second, "team/pi", 2, Some((&f, &v2)), &at(T1));
    let m2 = condition(&second.status, "Restarting")
        .and_then(|c| c.message.clone())
        .unwrap();
    assert!(m2.contains("attempt 2 (PodFailurePolicy)"), "{m2}");
    assert!(m2.contains("attempt 3 starts"), "{m2}");
    assert_eq!(second.notices.len(), 1);
    assert_eq!(second.status.replica_statuses["Launcher"].failed, 2);
    // Attempt 3 runs: `Running` replaces `Restarting`; the count stays.
    let job = Child::Job(serde_json::from_value(json!({"metadata": {"name": "pi"}})).unwrap());
    let pods: Vec<_> = (0..3)
        .map(|i| {
            std::sync::Arc::new(
                serde_json::from_value(json!({"metadata": {"name": format!("pi-{i}"),
                    "labels": {"batch.kubernetes.io/job-completion-index": i.to_string()}},
                    "status": {"phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}]}}))
                .unwrap(),
            )
        })
        .collect();
    let o = Observed {
        job: Some(&job),
        pods: &pods,
        ..observe(None)
    };
    let mut running = next_status(&second.status, &o, &at(T1));
    apply(&mut running, "team/pi", 2, None, &at(T1));
    assert!(condition(&running.status, "Restarting").is_none());
    assert_eq!(
        condition(&running.status, "Running").map(|c| c.status.as_str()),
        Some("True")
    );
    assert_eq!(running.status.replica_statuses["Launcher"].failed, 2);
    assert_eq!(running.status.replica_statuses["Launcher"].active, 1);
}

/// After the last restart a failure is `Failed` `BackoffLimitExceeded` naming the last
/// failure, its event in place of the child's own reason; the launcher's failures counted
/// across the attempts.
#[test]
fn a_failure_after_the_last_restart_is_backoff_limit_exceeded() {
    let s0 = next_status(&MpiJobStatus::default(), &observe(None), &at(T0)).status;
    let job = failed_job("PodFailurePolicy");
    let f = job_failure(&job).unwrap();
    let v = verdict(&f, 2, 2);
    let mut out = next_status(&s0, &observe(Some(&Child::Job(job.clone()))), &at(T1));
    apply(&mut out, "team/pi", 2, Some((&f, &v)), &at(T1));
    let c = condition(&out.status, "Failed").unwrap();
    assert_eq!(c.reason.as_deref(), Some(EXCEEDED));
    assert_eq!(
        c.message.as_deref(),
        Some(
            "MPIJob team/pi has reached the specified backoff limit (2 restarts): attempt 3 \
             (PodFailurePolicy): Container agent for pod team/pi-0-x failed with exit code 1"
        )
    );
    assert!(out.status.completion_time.is_some());
    let reasons: Vec<&str> = out.notices.iter().map(|n| n.reason.as_str()).collect();
    assert_eq!(reasons, [EXCEEDED]);
    assert_eq!(out.status.replica_statuses["Launcher"].failed, 3);
    assert_eq!(out.status.replica_statuses["Launcher"].succeeded, 0);

    // Without a backoffLimit, or on its deadline, the child's own reason stays.
    for (reason, limit) in [("PodFailurePolicy", 0), ("DeadlineExceeded", 2)] {
        let job = failed_job(reason);
        let f = job_failure(&job).unwrap();
        let v = verdict(&f, 0, limit);
        let mut out = next_status(&s0, &observe(Some(&Child::Job(job.clone()))), &at(T1));
        apply(&mut out, "team/pi", 0, Some((&f, &v)), &at(T1));
        let c = condition(&out.status, "Failed").unwrap();
        assert_eq!(c.reason.as_deref(), Some(reason));
        assert!(condition(&out.status, "Restarting").is_none());
        assert_eq!(out.status.replica_statuses["Launcher"].failed, 1);
    }
}

/// A JobSet's failure names no deadline: past the MPIJob's, it is one (never restarted).
#[test]
fn a_jobset_failed_past_the_deadline_is_not_restarted() {
    let obj: MpiJob = serde_json::from_value(json!({"apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob", "metadata": {"name": "pi"},
        "spec": {"runPolicy": {"activeDeadlineSeconds": 30}, "mpiReplicaSpecs": {}},
        "status": {"startTime": T0}}))
    .unwrap();
    assert!(!deadline_passed(&obj, &at(T0)));
    assert!(deadline_passed(&obj, &at(T1)));
    let f = failure("FailedJobs");
    assert_eq!(
        verdict(&of_jobset(f.clone(), false), 0, 2),
        Verdict::Restart { failed: 0 }
    );
    assert_eq!(verdict(&of_jobset(f, true), 0, 2), Verdict::Fail);
    // The MPIJob fails with DeadlineExceeded, the JobSet's message and the time kept.
    let js = Child::from_object(
        serde_json::from_value(json!({"apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet", "metadata": {"name": "pi"}, "spec": {},
            "status": {"conditions": [{"type": "Failed", "status": "True",
                "reason": "ReachedMaxRestarts",
                "message": "jobset failed (first failed job: pi-launcher-0)"}]}}))
        .unwrap(),
    )
    .unwrap()
    .unwrap();
    let s0 = next_status(&MpiJobStatus::default(), &observe(None), &at(T0)).status;
    let mut out = next_status(&s0, &observe(Some(&js)), &at(T1));
    let before = condition(&out.status, "Failed").unwrap().clone();
    let late = of_jobset(js.failure().unwrap(), true);
    let v = verdict(&late, 0, 2);
    apply(&mut out, "team/pi", 0, Some((&late, &v)), &at(T1));
    let c = condition(&out.status, "Failed").unwrap();
    assert_eq!(c.reason.as_deref(), Some(DEADLINE));
    assert_eq!(c.message, before.message);
    assert_eq!(c.last_transition_time, before.last_transition_time);
    let reasons: Vec<&str> = out.notices.iter().map(|n| n.reason.as_str()).collect();
    assert!(reasons.contains(&DEADLINE), "{reasons:?}");
    assert!(!reasons.contains(&"ReachedMaxRestarts"), "{reasons:?}");
    let mut no_deadline = obj.clone();
    no_deadline.spec.run_policy = None;
    assert!(!deadline_passed(&no_deadline, &at(T1)));
}
