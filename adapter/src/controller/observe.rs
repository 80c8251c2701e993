//! What the status and the events read of a Job and its pods, typed: whether a pod is the
//! launcher's (index 0, or a JobSet's replicated job `launcher`), its phase, readiness and
//! disruption, and the Job's true conditions.

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;

use crate::discovery::keys::{JOBSET_REPLICATED_JOB_LABEL, JOB_COMPLETION_INDEX};
use crate::workload::LAUNCHER;

/// The pod's completion index (in its Job).
fn index(p: &Pod) -> Option<&str> {
    label(p, JOB_COMPLETION_INDEX)
}

fn label<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether the pod is the launcher's: in a JobSet, the pod of the replicated job `launcher`
/// (each child Job has its own index 0); in the single Indexed Job, the pod with index 0.
pub(crate) fn launcher(p: &Pod) -> bool {
    match label(p, JOBSET_REPLICATED_JOB_LABEL) {
        Some(rj) => rj == LAUNCHER,
        None => index(p) == Some("0"),
    }
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

/// The first failed rank, its pod and its exit code or signal, as the batch launcher wrote
/// them in its container's termination message (`rank 2 in pod pi-2-x exited with code 7`),
/// if `p` is the launcher's pod and its container ended with one.
pub(crate) fn failed_rank(p: &Pod) -> Option<&str> {
    if !launcher(p) {
        return None;
    }
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.as_deref())
        .map(str::trim)
        .find(|m| m.starts_with("rank ") && !m.contains('\n'))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn the_launcher_is_index_0_of_one_job_or_the_jobsets_launcher_job() {
        assert!(launcher(&pod(&[(JOB_COMPLETION_INDEX, "0")])));
        assert!(!launcher(&pod(&[(JOB_COMPLETION_INDEX, "1")])));
        assert!(!launcher(&pod(&[])));
        // In a JobSet every child Job has an index 0: the replicated job tells.
        let js = |rj: &str, i: &str| {
            pod(&[(JOBSET_REPLICATED_JOB_LABEL, rj), (JOB_COMPLETION_INDEX, i)])
        };
        assert!(launcher(&js("launcher", "0")));
        assert!(!launcher(&js("worker", "0")));
        assert!(!launcher(&js("worker", "1")));
    }
}
