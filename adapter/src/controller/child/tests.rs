//! The child abstraction: the Job and the JobSet read, marked and brought in line alike.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::*;

/// A JobSet as the controller renders it: replicated jobs `launcher` (its own template) and
/// `worker`, each a Job spec with a deadline; `status` as given.
fn jobset(suspend: bool, status: Value) -> Child {
    let job = |image: &str, pods: u32| {
        json!({"template": {"spec": {"parallelism": pods, "completions": pods,
            "activeDeadlineSeconds": 60,
            "template": {"metadata": {"labels": {"prrte-k8s.io/job": "pi"}},
                "spec": {"containers": [{"name": "mpi", "image": image}]}}}}})
    };
    let mut launcher = job("launcher:1", 1);
    launcher["name"] = json!("launcher");
    launcher["replicas"] = json!(1);
    let mut worker = job("worker:1", 2);
    worker["name"] = json!("worker");
    worker["replicas"] = json!(1);
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "pi", "namespace": "team", "uid": "js-uid",
            "resourceVersion": "7",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                "name": "pi", "uid": "m", "controller": true}]},
        "spec": {"replicatedJobs": [launcher, worker], "suspend": suspend},
        "status": status,
    }))
    .unwrap();
    Child::from_object(o).unwrap().unwrap()
}

fn job(status: Value) -> Child {
    Child::Job(
        serde_json::from_value(json!({"metadata": {"name": "pi", "uid": "job-uid"},
            "spec": {"template": {}, "activeDeadlineSeconds": 60}, "status": status}))
        .unwrap(),
    )
}

fn conditions(c: &[(&str, &str, &str)]) -> Value {
    let c: Vec<Value> = c
        .iter()
        .map(|(t, reason, message)| {
            json!({"type": t, "status": "True", "reason": reason,
            "message": message, "lastTransitionTime": "2026-12-03T12:00:40Z"})
        })
        .collect();
    json!({ "conditions": c })
}

/// The templates of the JobSet `c`, as JSON, launcher's first.
fn templates(c: &Child) -> Vec<Value> {
    let Child::JobSet(o) = c else {
        panic!("not a JobSet")
    };
    o.data["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rj| rj["template"]["spec"]["template"].clone())
        .collect()
}

#[test]
fn the_kind_of_a_rendered_object_makes_the_child() {
    let js = jobset(false, json!({}));
    assert_eq!(js.kind(), "JobSet");
    assert!(js.is_jobset());
    let o: DynamicObject = serde_json::from_value(json!({"apiVersion": "batch/v1",
        "kind": "Job", "metadata": {"name": "pi"}, "spec": {"template": {}}}))
    .unwrap();
    let j = Child::from_object(o).unwrap().unwrap();
    assert_eq!(j.kind(), "Job");
    assert!(j.job().is_some());
    let other: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
        "kind": "Secret", "metadata": {"name": "pi"}}))
    .unwrap();
    assert_eq!(Child::from_object(other).unwrap(), None);
    // The apply's body is the object itself, kind and all.
    let body = serde_json::to_value(&js).unwrap();
    assert_eq!(body["kind"], "JobSet");
    assert_eq!(body["spec"]["replicatedJobs"][1]["name"], "worker");
}

#[test]
fn failure_and_success_read_alike_from_the_job_and_the_jobset() {
    let failed = conditions(&[("Failed", "FailedJobs", "first failed job: pi-worker-0")]);
    for c in [job(failed.clone()), jobset(false, failed)] {
        assert_eq!(
            c.failure(),
            Some(Failure {
                reason: "FailedJobs".into(),
                message: "first failed job: pi-worker-0".into()
            }),
            "{}",
            c.kind()
        );
        assert!(c.finished() && c.ending() && c.complete().is_none());
    }
    let done_job = job(conditions(&[("Complete", "", "")]));
    let done_js = jobset(false, conditions(&[("Completed", "AllJobsCompleted", "")]));
    for c in [&done_job, &done_js] {
        assert!(c.complete().is_some() && c.failure().is_none() && c.finished());
        assert_eq!(
            c.completion_time().map(|t| t.0.to_string()),
            Some("2026-12-03T12:00:40Z".into())
        );
    }
    // A JobSet's `Complete` is not its condition: it has not finished.
    let not_yet = jobset(false, conditions(&[("Complete", "", "")]));
    assert!(!not_yet.finished() && !not_yet.ending());
    // Suspended: it stops its pods itself.
    assert!(jobset(true, json!({})).ending());
    assert!(!jobset(false, json!({})).ending());
}

#[test]
fn the_launcher_is_done_by_its_index_or_its_replicated_job() {
    assert!(job(json!({"completedIndexes": "0,2"})).launcher_done());
    assert!(!job(json!({"completedIndexes": "1-2"})).launcher_done());
    let rjs = |launcher: i64, worker: i64| {
        json!({"replicatedJobsStatus": [
            {"name": "launcher", "succeeded": launcher},
            {"name": "worker", "succeeded": worker}]})
    };
    assert!(jobset(false, rjs(1, 0)).launcher_done());
    assert!(!jobset(false, rjs(0, 1)).launcher_done());
    assert!(!jobset(false, json!({})).launcher_done());
}

#[test]
fn the_pods_of_a_job_by_owner_and_of_a_jobset_by_its_uid_label() {
    let pod = |owner: &str, label: Option<&str>| -> Pod {
        let mut p = json!({"metadata": {"name": "pi-x", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": owner}]}});
        if let Some(l) = label {
            p["metadata"]["labels"] = json!({ JOBSET_UID_LABEL: l });
        }
        serde_json::from_value(p).unwrap()
    };
    let (j, js) = (job(json!({})), jobset(false, json!({})));
    assert!(j.owns_pod(&pod("job-uid", None)));
    assert!(!j.owns_pod(&pod("other", None)));
    // A JobSet's pods are its child Jobs': the JobSet's uid label tells.
    assert!(js.owns_pod(&pod("child-job", Some("js-uid"))));
    assert!(!js.owns_pod(&pod("child-job", Some("earlier-js"))));
    assert!(!js.owns_pod(&pod("js-uid", None)));
}

#[test]
fn a_jobset_is_marked_on_itself_and_each_template_with_the_deadline_left() {
    for attempt in [0, 2] {
        let mut c = jobset(false, json!({}));
        c.mark(attempt, Some(20));
        let want = attempt.to_string();
        assert_eq!(c.meta().labels.as_ref().unwrap()[ATTEMPT_LABEL], want);
        for t in templates(&c) {
            assert_eq!(t["metadata"]["labels"][ATTEMPT_LABEL], want.as_str());
            assert_eq!(t["metadata"]["labels"]["prrte-k8s.io/job"], "pi");
        }
        let Child::JobSet(o) = &c else { unreachable!() };
        for rj in o.data["spec"]["replicatedJobs"].as_array().unwrap() {
            let left = if attempt == 0 { 60 } else { 20 };
            assert_eq!(rj["template"]["spec"]["activeDeadlineSeconds"], left);
        }
    }
    let mut j = job(json!({}));
    j.mark(1, Some(5));
    let spec = j.job().unwrap().spec.as_ref().unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(5));
    assert_eq!(
        spec.template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap()[ATTEMPT_LABEL],
        "1"
    );
}

#[test]
fn every_template_is_reached() {
    let mut c = jobset(false, json!({}));
    let mut n = 0;
    c.each_template(|t| {
        n += 1;
        t.spec.get_or_insert_with(Default::default).scheduler_name = Some("gang".into());
    });
    assert_eq!(n, 2);
    assert!(templates(&c)
        .iter()
        .all(|t| t["spec"]["schedulerName"] == "gang"));
}

/// Kueue's admission of a suspended JobSet reaches both templates, `suspend` follows the
/// MPIJob, the body holds the JobSet as it is and none of the server's fields; a running
/// one only follows `suspend`; a finished one, or one of another kind, nothing.
#[test]
fn a_jobset_is_brought_in_line_as_a_job_is() {
    let have = jobset(true, json!({}));
    assert_eq!(Child::update(&have, &have), None);
    let mut want = jobset(false, json!({}));
    want.each_template(|t| {
        t.spec.get_or_insert_with(Default::default).node_selector =
            Some([("pool".to_string(), "a".to_string())].into());
        t.metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default)
            .insert("kueue.x-k8s.io/podset".into(), "p".into());
    });
    let body = serde_json::to_value(Child::update(&have, &want).unwrap()).unwrap();
    assert_eq!(body["kind"], "JobSet");
    assert_eq!(body["spec"]["suspend"], false);
    assert!(body["metadata"].get("resourceVersion").is_none());
    assert!(body["metadata"].get("uid").is_none());
    assert!(body.get("status").is_none());
    assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "MPIJob");
    for rj in body["spec"]["replicatedJobs"].as_array().unwrap() {
        let t = &rj["template"]["spec"]["template"];
        assert_eq!(t["spec"]["nodeSelector"], json!({"pool": "a"}));
        assert_eq!(t["metadata"]["labels"]["kueue.x-k8s.io/podset"], "p");
        assert_eq!(t["metadata"]["labels"]["prrte-k8s.io/job"], "pi");
    }
    // Running: a template change is not made, only suspend.
    let running = jobset(false, json!({}));
    assert_eq!(Child::update(&running, &want), None);
    let body = serde_json::to_value(Child::update(&running, &have).unwrap()).unwrap();
    assert_eq!(body["spec"]["suspend"], true);
    assert!(
        body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            .get("nodeSelector")
            .is_none()
    );
    // Finished: nothing.
    let done = jobset(false, conditions(&[("Completed", "AllJobsCompleted", "")]));
    assert_eq!(Child::update(&done, &have), None);
    // Another kind (made before the cluster served JobSets): left alone.
    let j: Job = serde_json::from_value(json!({"metadata": {"name": "pi"},
        "spec": {"template": {}, "suspend": false}}))
    .unwrap();
    assert_eq!(Child::update(&Child::Job(j), &have), None);
}
