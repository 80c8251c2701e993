//! The JobSet (jobset.x-k8s.io/v1alpha2): one replicated Job, or an MPIJob's two, `launcher`
//! (its own pod) and `worker`. k8s-openapi has no type for it: the part rendered here is a
//! small typed struct of ours.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde::Serialize;
use serde_json::Value;

use super::job::spec_with_template;
use super::kind::{rule, Kind};
use super::parts::{LauncherParts, Parts, Success};

/// The JobSet a pod belongs to.
pub(crate) const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
/// The replicated job of its JobSet a pod belongs to.
pub(crate) const JOBSET_REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Which child Job of its replicated job a JobSet pod belongs to.
pub(crate) const JOBSET_JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
/// Which child Job of the whole JobSet a JobSet pod belongs to.
pub(crate) const JOBSET_JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";

/// The JobSet.
pub(super) struct JobSetKind;

/// The one replicated Job of a rendered JobSet.
const NODE: &str = "node";
/// An MPIJob's replicated Job of the launcher's pod.
pub(crate) const LAUNCHER: &str = "launcher";
/// An MPIJob's replicated Job of the workers' pods.
pub(crate) const WORKER: &str = "worker";

/// The pod annotation that places a pod's replicated Job in allocation order (discovery reads
/// it before the JobSet's `job-global-index`, which follows the order the JobSet lists its
/// replicated Jobs in): an MPIJob's launcher is 0 and its workers 1, also when the workers are
/// listed first to be started first.
pub(crate) const NODE_GROUP_ANNOTATION: &str = "prrte-k8s.io/node-group";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JobSet {
    api_version: &'static str,
    kind: &'static str,
    /// Untyped: see [`Parts::metadata`].
    metadata: Value,
    spec: JobSetSpec,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JobSetSpec {
    replicated_jobs: Vec<ReplicatedJob>,
    success_policy: SuccessPolicy,
    failure_policy: FailurePolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_seconds_after_finished: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    startup_policy: Option<StartupPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    suspend: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    managed_by: Option<String>,
}

#[derive(Serialize)]
struct ReplicatedJob {
    name: &'static str,
    replicas: u32,
    template: JobTemplate,
}

/// A Job's template: its spec (the Indexed Job's, with the pod template).
#[derive(Serialize)]
struct JobTemplate {
    spec: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SuccessPolicy {
    operator: &'static str,
    target_replicated_jobs: Vec<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FailurePolicy {
    max_restarts: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StartupPolicy {
    startup_policy_order: &'static str,
}

impl Kind for JobSetKind {
    fn name(&self) -> &'static str {
        "JobSet"
    }
    fn api_version(&self) -> &'static str {
        "jobset.x-k8s.io/v1alpha2"
    }
    fn plural(&self) -> &'static str {
        "jobsets"
    }
    fn name_labels(&self) -> &'static [&'static str] {
        &[JOBSET_NAME_LABEL]
    }
    /// Its child Jobs own the pods.
    fn owns_pods(&self) -> bool {
        false
    }
    fn restarts_as_a_whole(&self) -> bool {
        true
    }

    /// The sum over its replicated jobs of replicas × pods per Job.
    fn expected_pods(&self, object: &Value, only: Option<&BTreeSet<String>>) -> Option<u32> {
        let rjobs = object.get("spec")?.get("replicatedJobs")?.as_array()?;
        let mut total: u64 = 0;
        let mut counted = 0;
        for rj in rjobs {
            let name = rj.get("name").and_then(|n| n.as_str()).unwrap_or("");
            if only.is_some_and(|o| !o.contains(name)) {
                continue;
            }
            let replicas = rj.get("replicas").and_then(|r| r.as_u64()).unwrap_or(1);
            let jspec = rj.get("template").and_then(|t| t.get("spec"));
            let parallelism = jspec
                .and_then(|s| s.get("parallelism"))
                .and_then(|p| p.as_u64())
                .unwrap_or(1);
            let per_job = match jspec
                .and_then(|s| s.get("completions"))
                .and_then(|c| c.as_u64())
            {
                Some(c) => parallelism.min(c),
                None => parallelism,
            };
            total = total.saturating_add(replicas.saturating_mul(per_job));
            counted += 1;
        }
        if counted == 0 {
            return None;
        }
        u32::try_from(total).ok().filter(|n| *n > 0)
    }
    fn count_source(&self) -> &'static str {
        "replicated jobs"
    }

    fn fixed(&self) -> Option<&'static str> {
        Some("a JobSet's replicated Jobs cannot change while it runs; render the job with --kind job or statefulset and --elastic to grow it")
    }
    fn scaled_pods(&self, object: &Value) -> u32 {
        self.expected_pods(object, None).unwrap_or(0)
    }
    fn scale_patch(&self, _pods: u32) -> Option<Value> {
        None
    }

    fn role_rules(&self, name: &str, _elastic: bool) -> Vec<PolicyRule> {
        vec![rule(self.group(), &[self.plural()], name, &["get"])]
    }

    /// One replicated Job `node` (the Indexed Job's spec), restarted as a whole up to
    /// `max_restarts` times when it fails; or an MPIJob's `launcher` and `worker`
    /// ([`Parts::launcher`], see [`two_roles`]).
    fn render(&self, p: &Parts) -> Result<Value, serde_json::Error> {
        if let Some(l) = &p.launcher {
            return serde_json::to_value(two_roles(self, p, l)?);
        }
        let js = JobSet {
            api_version: self.api_version(),
            kind: self.name(),
            metadata: p.metadata.clone(),
            spec: JobSetSpec {
                replicated_jobs: vec![ReplicatedJob {
                    name: NODE,
                    replicas: 1,
                    template: JobTemplate {
                        spec: spec_with_template(p)?,
                    },
                }],
                success_policy: SuccessPolicy {
                    operator: "All",
                    target_replicated_jobs: vec![NODE],
                },
                failure_policy: FailurePolicy {
                    max_restarts: p.max_restarts,
                },
                ttl_seconds_after_finished: p.ttl,
                startup_policy: p.batch.then_some(StartupPolicy {
                    startup_policy_order: "AnyOrder",
                }),
                suspend: None,
                managed_by: None,
            },
        };
        serde_json::to_value(js)
    }
}

/// An MPIJob's JobSet: the replicated Job `launcher` (one Indexed Job of one pod, the
/// launcher's template) and `worker` (one Indexed Job of the workers, their template), each
/// Job failing at its pod's first failure or disruption (naming it) and the JobSet with it
/// (`maxRestarts` 0: a restart is the controller's, the whole MPI job made again). It succeeds
/// when the launcher's Job does (the workers still running are then stopped), or, with the
/// workers staying up (`cleanPodPolicy: None`), never by itself: the controller reads the
/// launcher's pod. Suspended and managed as a whole (`spec.suspend`, `spec.managedBy`: one
/// workload for Kueue). With `after_workers` the workers are listed first and started first
/// (`startupPolicy: InOrder`): the launcher's Job is made once they are all ready.
fn two_roles(kind: &JobSetKind, p: &Parts, l: &LauncherParts) -> Result<JobSet, serde_json::Error> {
    let child = |pods: u32, template: &Value, group: &str| {
        let mut template = template.clone();
        template["metadata"]["annotations"][NODE_GROUP_ANNOTATION] = Value::from(group);
        spec_with_template(&Parts {
            pods,
            template,
            // One pod, or every worker's success: no success policy on the workers' Job.
            success: Success::All,
            suspend: false,
            managed_by: None,
            launcher: None,
            ..p.clone()
        })
    };
    let launcher = ReplicatedJob {
        name: LAUNCHER,
        replicas: 1,
        template: JobTemplate {
            spec: child(1, &l.template, "0")?,
        },
    };
    let worker = ReplicatedJob {
        name: WORKER,
        replicas: 1,
        template: JobTemplate {
            spec: child(p.pods.saturating_sub(1).max(1), &p.template, "1")?,
        },
    };
    let (replicated_jobs, order) = if l.after_workers {
        (vec![worker, launcher], "InOrder")
    } else {
        (vec![launcher, worker], "AnyOrder")
    };
    let success_policy = match p.success {
        Success::Index0 => SuccessPolicy {
            operator: "Any",
            target_replicated_jobs: vec![LAUNCHER],
        },
        Success::All | Success::Index0WorkersStay => SuccessPolicy {
            operator: "All",
            target_replicated_jobs: vec![LAUNCHER, WORKER],
        },
    };
    Ok(JobSet {
        api_version: kind.api_version(),
        kind: kind.name(),
        metadata: p.metadata.clone(),
        spec: JobSetSpec {
            replicated_jobs,
            success_policy,
            failure_policy: FailurePolicy { max_restarts: 0 },
            ttl_seconds_after_finished: p.ttl,
            startup_policy: Some(StartupPolicy {
                startup_policy_order: order,
            }),
            suspend: p.suspend.then_some(true),
            managed_by: p.managed_by.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_replicas_times_pods_per_job() {
        let js = json!({"spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}},
        ]}});
        assert_eq!(JobSetKind.expected_pods(&js, None), Some(9));
        let only = |n: &str| Some([n.to_string()].into());
        assert_eq!(
            JobSetKind.expected_pods(&js, only("workers").as_ref()),
            Some(8)
        );
        assert_eq!(JobSetKind.expected_pods(&js, only("nope").as_ref()), None);
        assert!(JobSetKind.fixed().is_some() && JobSetKind.scale_patch(3).is_none());
    }
}
