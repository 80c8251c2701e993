//! The Indexed Job (batch or interactive); its spec is also the template of a JobSet's Job.

use serde_json::{json, Value};

use super::layout::CONTAINER;
use super::meta::meta;
use super::meta::{KUEUE_ELASTIC_ANNOTATION, MAX_PODS_ANNOTATION};
use super::plan::Success;
use super::plan::{JobPlan, Kind};
use super::pod::pod_template;

/// The spec of the Indexed Job: one pod per index, one try, failing at the first disruption or
/// non-zero exit.
pub(super) fn job_spec(a: &JobPlan, batch: bool) -> Value {
    let mut spec = json!({
        "completionMode": "Indexed",
        "completions": a.pods,
        "parallelism": a.pods,
        // One MPI job, one try: a failed pod fails the Job.
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": [
            // Evicted, preempted or deleted pods end the job at once, saying so.
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            // So does a non-zero exit, naming the pod and the code.
            {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]}},
        ]},
        "template": pod_template(a, batch),
    });
    if batch && a.success == Success::Index0 {
        spec["successPolicy"] = json!({"rules": [{"succeededIndexes": "0"}]});
    }
    if let Some(d) = a.deadline {
        spec["activeDeadlineSeconds"] = json!(d);
    }
    if a.suspend {
        spec["suspend"] = json!(true);
    }
    if let Some(m) = &a.managed_by {
        spec["managedBy"] = json!(m);
    }
    spec
}

/// The Job object.
pub(super) fn job(a: &JobPlan, batch: bool) -> Value {
    let mut spec = job_spec(a, batch);
    if let Some(ttl) = a.ttl {
        spec["ttlSecondsAfterFinished"] = json!(ttl);
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": workload_meta(a), "spec": spec})
}

/// The workload object's metadata: the job's own, plus the labels and annotations the plan
/// gives it (the job's own labels win).
pub(super) fn workload_meta(a: &JobPlan) -> Value {
    let mut m = meta(a, &a.name);
    if !a.labels.is_empty() {
        let mut labels = a.labels.clone();
        if let Value::Object(own) = &m["labels"] {
            labels.extend(own.clone());
        }
        m["labels"] = Value::Object(labels);
    }
    let mut annotations = a.annotations.clone();
    if let Some(max) = a.max_pods {
        annotations.insert(MAX_PODS_ANNOTATION.into(), json!(max.to_string()));
        if a.kind == Kind::Job {
            annotations.insert(KUEUE_ELASTIC_ANNOTATION.into(), json!("true"));
        }
    }
    if !annotations.is_empty() {
        m["annotations"] = Value::Object(annotations);
    }
    m
}
