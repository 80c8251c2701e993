//! The ends of an MPIJob's pods that its child alone does not tell (pure): a pod of the job
//! deleted while the job runs (by hand, or a node drained without the eviction API), and a
//! worker that failed (a worker cut off from its launcher ends so: its agent stops prted when
//! the launcher's heartbeats stop, and exits non-zero). Each is one event on the MPIJob,
//! naming the pod, its role and its exit code or grace period; the reconcile posts each pod's
//! once ([`super::reconcile`]). Evictions and disruptions are named by the `Failed`
//! condition's events ([`super::status`]), and a launcher's failure by the Job's own message.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::observe::{disrupted, launcher, name, phase};
use super::status::Notice;

/// The event reason of a pod deleted while its job ran.
pub(crate) const POD_DELETED: &str = "MPIJobPodDeleted";
/// The event reason of a worker that failed.
pub(crate) const POD_FAILED: &str = "MPIJobPodFailed";

/// One pod's end, and its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodEnd {
    /// The pod's uid (its name where it has none): what the event is posted once for.
    pub uid: String,
    pub notice: Notice,
}

/// The first container that ended with a non-zero code: "container C exited with code N
/// (REASON): MESSAGE".
fn exit_of(p: &Pod) -> Option<String> {
    let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let t = c.state.as_ref()?.terminated.as_ref()?;
        let code = Some(t.exit_code).filter(|c| *c != 0)?;
        let mut s = format!("container {} exited with code {code}", c.name);
        if let Some(r) = t.reason.as_deref().filter(|r| !r.is_empty()) {
            s.push_str(&format!(" ({r})"));
        }
        if let Some(m) = t.message.as_deref().filter(|m| !m.is_empty()) {
            let m: String = m.chars().take(300).collect();
            s.push_str(&format!(": {}", m.trim_end()));
        }
        Some(s)
    })
}

/// The ends worth an event among `pods`, the pods of the MPIJob's child, which ends them
/// itself when `ending` ([`super::child::Child::ending`]).
pub(crate) fn pod_ends(pods: &[Arc<Pod>], ending: bool) -> Vec<PodEnd> {
    pods.iter()
        .filter(|p| !disrupted(p))
        .filter_map(|p| {
            let name = name(p);
            let uid = p.metadata.uid.as_deref().unwrap_or(name).to_string();
            let role = if launcher(p) { "launcher" } else { "worker" };
            let phase = phase(p);
            let exit = exit_of(p);
            let notice = if p.metadata.deletion_timestamp.is_some() {
                if phase == "Succeeded" || ending {
                    return None;
                }
                let grace = p
                    .metadata
                    .deletion_grace_period_seconds
                    .map(|g| format!(", grace period {g} s"))
                    .unwrap_or_default();
                let end = exit.map(|e| format!("; {e}")).unwrap_or_default();
                Notice {
                    warning: true,
                    reason: POD_DELETED.into(),
                    message: format!("{role} pod {name} was deleted while the job ran{grace}{end}"),
                }
            } else if phase == "Failed" && role == "worker" {
                let why = exit.unwrap_or_else(|| {
                    let st = p.status.as_ref();
                    let r = st
                        .and_then(|s| s.reason.as_deref())
                        .unwrap_or("no exit code");
                    let m = st.and_then(|s| s.message.as_deref()).unwrap_or("");
                    format!("{r} {m}").trim().to_string()
                });
                Notice {
                    warning: true,
                    reason: POD_FAILED.into(),
                    message: format!(
                        "worker pod {name} failed: {why} (a worker cut off from its launcher \
                         ends so)"
                    ),
                }
            } else {
                return None;
            };
            Some(PodEnd { uid, notice })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use serde_json::{json, Value};

    fn pod(index: u32, phase: &str) -> Value {
        json!({"metadata": {"name": format!("pi-{index}-x"), "uid": format!("u{index}"),
                "labels": {"batch.kubernetes.io/job-completion-index": index.to_string()}},
               "status": {"phase": phase}})
    }

    /// `pod_ends` of the pods and the Job given as JSON.
    fn ends_of(pods: &[Value], job: Option<&Value>) -> Vec<PodEnd> {
        let pods: Vec<Arc<Pod>> = pods
            .iter()
            .map(|p| Arc::new(serde_json::from_value(p.clone()).unwrap()))
            .collect();
        let job: Option<Job> = job.map(|j| serde_json::from_value(j.clone()).unwrap());
        let ending = job.is_some_and(|j| crate::controller::child::Child::Job(j).ending());
        pod_ends(&pods, ending)
    }

    fn failed_with(mut p: Value, code: i64) -> Value {
        p["status"]["containerStatuses"] = json!([{"name": "agent", "state": {"terminated":
            {"exitCode": code, "reason": "Error", "message": "launcher silent for 10 s\n"}}}]);
        p
    }

    fn deleted(mut p: Value) -> Value {
        p["metadata"]["deletionTimestamp"] = json!("2026-12-03T12:00:00Z");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        p
    }

    fn messages(ends: &[PodEnd]) -> Vec<(&str, &str, &str)> {
        ends.iter()
            .map(|e| {
                (
                    e.uid.as_str(),
                    e.notice.reason.as_str(),
                    e.notice.message.as_str(),
                )
            })
            .collect()
    }

    #[test]
    fn running_and_succeeded_pods_say_nothing() {
        let pods = [pod(0, "Running"), pod(1, "Succeeded"), pod(2, "Pending")];
        assert!(ends_of(&pods, None).is_empty());
    }

    #[test]
    fn a_worker_deleted_by_hand_is_named_with_its_grace_period() {
        let pods = [pod(0, "Running"), deleted(pod(1, "Running"))];
        assert_eq!(
            messages(&ends_of(&pods, None)),
            [(
                "u1",
                POD_DELETED,
                "worker pod pi-1-x was deleted while the job ran, grace period 30 s"
            )]
        );
        let ended = [failed_with(deleted(pod(0, "Failed")), 143)];
        let m = &ends_of(&ended, None)[0].notice;
        assert_eq!(m.reason, POD_DELETED);
        assert!(
            m.message.starts_with("launcher pod pi-0-x was deleted"),
            "{}",
            m.message
        );
        assert!(
            m.message
                .contains("container agent exited with code 143 (Error)"),
            "{}",
            m.message
        );
    }

    #[test]
    fn a_failed_worker_is_named_with_its_exit_code_and_a_launcher_is_left_to_the_job() {
        let pods = [
            failed_with(pod(0, "Failed"), 1),
            failed_with(pod(2, "Failed"), 1),
        ];
        let ends = ends_of(&pods, None);
        assert_eq!(
            messages(&ends),
            [(
                "u2",
                POD_FAILED,
                "worker pod pi-2-x failed: container agent exited with code 1 (Error): \
                 launcher silent for 10 s (a worker cut off from its launcher ends so)"
            )]
        );
        assert!(ends[0].notice.warning);
        let mut bare = pod(3, "Failed");
        bare["status"]["reason"] = json!("NodeLost");
        let ends = ends_of(&[bare], None);
        assert!(
            ends[0].notice.message.contains("failed: NodeLost"),
            "{ends:?}"
        );
    }

    #[test]
    fn evictions_and_the_jobs_own_cleanup_are_left_to_the_failed_condition() {
        let mut evicted = deleted(pod(1, "Running"));
        evicted["status"]["conditions"] = json!([{"type": "DisruptionTarget", "status": "True"}]);
        let mut by_kubelet = failed_with(pod(2, "Failed"), 137);
        by_kubelet["status"]["reason"] = json!("Evicted");
        assert!(ends_of(&[evicted, by_kubelet], None).is_empty());
        let failing =
            json!({"status": {"conditions": [{"type": "FailureTarget", "status": "True"}]}});
        assert!(ends_of(&[deleted(pod(1, "Running"))], Some(&failing)).is_empty());
        let running = json!({"status": {"conditions": [{"type": "Suspended", "status": "False"}]}});
        assert_eq!(
            ends_of(&[deleted(pod(1, "Running"))], Some(&running)).len(),
            1
        );
        // Nor are the pods a suspended Job deletes.
        let suspended = json!({"spec": {"suspend": true, "template": {}}});
        assert!(ends_of(&[deleted(pod(1, "Running"))], Some(&suspended)).is_empty());
        // A worker the Job stops after its launcher failed is not news; one that failed by
        // itself is, whatever the Job shows by then.
        let stopped = failed_with(deleted(pod(1, "Failed")), 143);
        assert!(ends_of(&[stopped], Some(&failing)).is_empty());
        let cut_off = failed_with(pod(2, "Failed"), 1);
        assert_eq!(ends_of(&[cut_off], Some(&failing)).len(), 1);
    }
}
