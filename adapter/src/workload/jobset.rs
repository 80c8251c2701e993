//! The JobSet (jobset.x-k8s.io/v1alpha2) with one replicated Job. k8s-openapi has no type for
//! it: the part rendered here is a small typed struct of ours.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde::Serialize;
use serde_json::Value;

use super::job::spec_with_template;
use super::kind::{rule, Kind};
use super::parts::Parts;

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
    /// `max_restarts` times when it fails.
    fn render(&self, p: &Parts) -> Result<Value, serde_json::Error> {
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
            },
        };
        serde_json::to_value(js)
    }
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
