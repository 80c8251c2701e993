//! The Indexed Job (batch or interactive); its spec is also the template of a JobSet's Job.

use serde_json::{json, Value};

use super::layout::CONTAINER;
use super::meta::meta;
use super::options::{ManifestArgs, Success};
use super::pod::pod_template;

/// The spec of the Indexed Job: one pod per index, one try, failing at the first disruption or
/// non-zero exit.
pub(super) fn job_spec(a: &ManifestArgs, batch: bool) -> Value {
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
    spec
}

/// The Job object.
pub(super) fn job(a: &ManifestArgs, batch: bool) -> Value {
    let mut spec = job_spec(a, batch);
    spec["ttlSecondsAfterFinished"] = json!(a.ttl);
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(a, &a.name), "spec": spec})
}
