//! The Indexed Job: one pod per completion index, batch or interactive. Its spec is also the
//! template of a JobSet's Job.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule, SuccessPolicy, SuccessPolicyRule,
};
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{json, Value};

use super::kind::{rule, spec_of, with, Kind};
use super::parts::{Parts, Success};

/// The label the Job controller puts on its pods with the Job's name.
pub(crate) const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Its former name, still set.
pub(crate) const LEGACY_JOB_NAME_LABEL: &str = "job-name";
/// The label the Job controller puts on an Indexed Job's pod with its completion index.
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Kueue's annotation of a Job that may change its parallelism while admitted.
pub(crate) const KUEUE_ELASTIC_ANNOTATION: &str = "kueue.x-k8s.io/elastic-job";

/// The Indexed Job.
pub(super) struct IndexedJob;

impl Kind for IndexedJob {
    fn name(&self) -> &'static str {
        "Job"
    }
    fn api_version(&self) -> &'static str {
        "batch/v1"
    }
    fn plural(&self) -> &'static str {
        "jobs"
    }
    fn name_labels(&self) -> &'static [&'static str] {
        &[JOB_NAME_LABEL, LEGACY_JOB_NAME_LABEL]
    }
    fn owns_pods(&self) -> bool {
        true
    }

    /// Parallelism (default 1), at most completions.
    fn expected_pods(&self, object: &Value, _only: Option<&BTreeSet<String>>) -> Option<u32> {
        let spec: JobSpec = spec_of(object)?;
        let parallelism = spec.parallelism.unwrap_or(1);
        let n = match spec.completions {
            Some(c) => parallelism.min(c),
            None => parallelism,
        };
        u32::try_from(n).ok().filter(|n| *n > 0)
    }
    fn count_source(&self) -> &'static str {
        "spec.parallelism"
    }

    fn scaled_pods(&self, object: &Value) -> u32 {
        let spec: JobSpec = spec_of(object).unwrap_or_default();
        u32::try_from(spec.parallelism.unwrap_or(1)).unwrap_or(0)
    }
    fn scale_refusal(&self, object: &Value) -> Option<&'static str> {
        let spec: JobSpec = spec_of(object).unwrap_or_default();
        (spec.completion_mode.as_deref() != Some("Indexed")).then_some(
            "is not Indexed: only an Indexed Job's completions may change with its parallelism",
        )
    }
    /// Parallelism and completions in tandem: one pod per index.
    fn scale_patch(&self, pods: u32) -> Option<Value> {
        Some(json!({"spec": {"parallelism": pods, "completions": pods}}))
    }

    /// An elastic one's also `patch` (a Job has no scale subresource): the admission policy
    /// rendered with it narrows that patch to its parallelism and completions.
    fn role_rules(&self, name: &str, elastic: bool) -> Vec<PolicyRule> {
        let verbs: &[&str] = if elastic { &["get", "patch"] } else { &["get"] };
        vec![rule(self.group(), &[self.plural()], name, verbs)]
    }
    fn elastic_annotations(&self) -> &'static [(&'static str, &'static str)] {
        &[(KUEUE_ELASTIC_ANNOTATION, "true")]
    }

    fn render(&self, p: &Parts) -> Result<Value, serde_json::Error> {
        let mut spec = spec(p);
        spec.ttl_seconds_after_finished = p.ttl.map(|t| i32::try_from(t).unwrap_or(i32::MAX));
        let spec = with(&spec, vec![("template", p.template.clone())])?;
        with(
            &Job::default(),
            vec![("metadata", p.metadata.clone()), ("spec", spec)],
        )
    }
}

/// The Indexed Job's spec but its template and time to live: one pod per index, one try,
/// failing at the first disruption or non-zero exit.
fn spec(p: &Parts) -> JobSpec {
    let pods = i32::try_from(p.pods).unwrap_or(i32::MAX);
    JobSpec {
        completion_mode: Some("Indexed".into()),
        completions: Some(pods),
        parallelism: Some(pods),
        // One MPI job, one try: a failed pod fails the Job.
        backoff_limit: Some(0),
        pod_failure_policy: Some(PodFailurePolicy {
            rules: vec![
                // Evicted, preempted or deleted pods end the job at once, saying so.
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                    }]),
                    on_exit_codes: None,
                },
                // So does a non-zero exit, naming the pod and the code.
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some(p.container.clone()),
                        operator: "NotIn".into(),
                        values: vec![0],
                    }),
                    on_pod_conditions: None,
                },
            ],
        }),
        success_policy: (p.batch && p.success == Success::Index0).then(|| SuccessPolicy {
            rules: vec![SuccessPolicyRule {
                succeeded_indexes: Some("0".into()),
                succeeded_count: None,
            }],
        }),
        active_deadline_seconds: p.deadline.map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
        suspend: p.suspend.then_some(true),
        managed_by: p.managed_by.clone(),
        ..Default::default()
    }
}

/// The Job spec of `p` with its pod template, as a JobSet's replicated Job carries it.
pub(super) fn spec_with_template(p: &Parts) -> Result<Value, serde_json::Error> {
    with(&spec(p), vec![("template", p.template.clone())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parallelism_at_most_completions() {
        let job =
            |p: Option<i32>, c: Option<i32>| json!({"spec": {"parallelism": p, "completions": c}});
        assert_eq!(IndexedJob.expected_pods(&job(Some(4), None), None), Some(4));
        assert_eq!(
            IndexedJob.expected_pods(&job(Some(8), Some(3)), None),
            Some(3)
        );
        assert_eq!(IndexedJob.expected_pods(&job(None, None), None), Some(1));
        assert_eq!(IndexedJob.expected_pods(&job(Some(0), None), None), None);
        assert_eq!(IndexedJob.expected_pods(&json!({}), None), None);
    }

    #[test]
    fn grows_by_parallelism_and_completions_only_when_indexed() {
        let indexed = json!({"spec": {"parallelism": 3, "completionMode": "Indexed"}});
        assert_eq!(IndexedJob.scaled_pods(&indexed), 3);
        assert_eq!(IndexedJob.scale_refusal(&indexed), None);
        let plain = json!({"spec": {"parallelism": 3}});
        assert!(IndexedJob.scale_refusal(&plain).is_some());
        assert_eq!(IndexedJob.scaled_pods(&json!({})), 1);
        assert_eq!(
            IndexedJob.scale_patch(6),
            Some(json!({"spec": {"parallelism": 6, "completions": 6}}))
        );
    }
}
