//! What the status and the events read of a Job and its pods, typed: a pod's index (0 is the
//! launcher), phase, readiness and disruption, and the Job's true conditions.

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;

use crate::discovery::keys::JOB_COMPLETION_INDEX;

/// The pod's completion index (`"0"`: the launcher).
pub(crate) fn index(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()?
        .get(JOB_COMPLETION_INDEX)
        .map(String::as_str)
}

/// The pod's name (`?` without one).
pub(crate) fn name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or("?")
}

/// The pod's phase (empty without one).
pub(crate) fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether the pod's condition of `type_` is true.
fn pod_condition(p: &Pod, type_: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Ready (a worker: its agent up).
pub(crate) fn ready(p: &Pod) -> bool {
    pod_condition(p, "Ready")
}

/// Evicted or disrupted (preempted, deleted by the API's eviction, drained).
pub(crate) fn disrupted(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
        || pod_condition(p, "DisruptionTarget")
}

/// The Job's condition of `type_`, if true.
pub(crate) fn job_condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Whether one of the Job's conditions of `types` is true.
pub(crate) fn job_has(job: &Job, types: &[&str]) -> bool {
    types.iter().any(|t| job_condition(job, t).is_some())
}

/// Whether the Job has finished (`Complete` or `Failed`).
pub(crate) fn job_finished(job: &Job) -> bool {
    job_has(job, &["Complete", "Failed"])
}
