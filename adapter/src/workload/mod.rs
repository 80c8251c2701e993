//! The workload kinds a job runs as, each in one file that brings everything the rest of the
//! crate asks of its kind: how its pods are found (the labels its controller sets, whether it
//! owns them) and counted, how its object is read and grown (the scale patch), the Role rule
//! its job needs on it, and its renderer. [`WorkloadKind`] names a kind and hands out its
//! behaviour; discovery (and through it `prrte-k8s doctor`), `grow` and the manifest ask it,
//! never a kind's name.
//!
//! Adding a kind: a file implementing [`Kind`] and one variant of [`WorkloadKind`]. A
//! kind whose pods belong to a child object rather than to itself (a JobSet's Jobs own its
//! pods; so would the Indexed Job an MPIJob is reconciled into) says so with
//! [`Kind::owns_pods`] and counts its pods from its own spec; one that cannot be grown says why
//! with [`Kind::fixed`]. Its renderer gets the same [`Parts`] as the others, so a controller
//! that makes the workload of a custom resource renders it like `prrte-k8s manifest` does.
//!
//! Layout: `kind` the interface, `parts` what a renderer is given; `job` (the Indexed Job),
//! `statefulset`, `jobset` the kinds. This file only names them.

mod job;
mod jobset;
mod kind;
mod parts;
mod statefulset;

use std::collections::BTreeSet;
use std::fmt;

use clap::ValueEnum;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use serde_json::Value;

pub use job::JOB_COMPLETION_INDEX;
#[cfg(test)]
pub(crate) use job::KUEUE_ELASTIC_ANNOTATION;
pub(crate) use job::{JOB_NAME_LABEL, LEGACY_JOB_NAME_LABEL};
pub(crate) use jobset::{
    JOBSET_JOB_GLOBAL_INDEX, JOBSET_JOB_INDEX, JOBSET_NAME_LABEL, JOBSET_REPLICATED_JOB_LABEL,
    LAUNCHER, NODE_GROUP_ANNOTATION, WORKER,
};
pub use kind::Kind;
pub(crate) use parts::LauncherParts;
pub use parts::{Parts, Success};
pub(crate) use statefulset::STATEFULSET_POD_INDEX;

/// A workload kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum WorkloadKind {
    /// An Indexed Job (batch or interactive).
    Job,
    /// A StatefulSet (interactive only: its pods are restarted when they exit).
    #[value(name = "statefulset")]
    StatefulSet,
    /// A JobSet (jobset.x-k8s.io/v1alpha2) with one replicated Job.
    #[value(name = "jobset")]
    JobSet,
}

impl WorkloadKind {
    /// Every kind.
    pub const ALL: [WorkloadKind; 3] = [
        WorkloadKind::Job,
        WorkloadKind::StatefulSet,
        WorkloadKind::JobSet,
    ];

    /// Its behaviour.
    pub fn spec(self) -> &'static dyn Kind {
        match self {
            WorkloadKind::Job => &job::IndexedJob,
            WorkloadKind::StatefulSet => &statefulset::Sts,
            WorkloadKind::JobSet => &jobset::JobSetKind,
        }
    }

    /// Its API kind ("Job").
    pub fn name(self) -> &'static str {
        self.spec().name()
    }

    /// Its API group ("batch").
    pub fn group(self) -> &'static str {
        self.spec().group()
    }

    /// Its resource ("jobs").
    pub fn plural(self) -> &'static str {
        self.spec().plural()
    }

    /// Its resource, for a dynamic API client.
    pub(crate) fn api_resource(self) -> ApiResource {
        let s = self.spec();
        let version = s.api_version().rsplit('/').next().unwrap_or_default();
        let gvk = GroupVersionKind::gvk(s.group(), version, s.name());
        ApiResource::from_gvk_with_plural(&gvk, s.plural())
    }

    /// The kind whose controller puts the label `key` on its pods with its name.
    pub(crate) fn named_by_label(key: &str) -> Option<WorkloadKind> {
        Self::ALL
            .into_iter()
            .find(|k| k.spec().name_labels().contains(&key))
    }

    /// The label its controller puts on its pods with its name, if it has one.
    pub(crate) fn pod_label(self) -> Option<&'static str> {
        self.spec().name_labels().first().copied()
    }

    /// See [`Kind::per_pod_labels`].
    pub(crate) fn per_pod_labels(self) -> &'static [&'static str] {
        self.spec().per_pod_labels()
    }

    /// See [`Kind::owns_pods`].
    pub(crate) fn owns_pods(self) -> bool {
        self.spec().owns_pods()
    }

    /// See [`Kind::index_label_for_env`].
    pub(crate) fn index_label_for_env(self) -> Option<&'static str> {
        self.spec().index_label_for_env()
    }

    /// See [`Kind::runs_to_completion`].
    pub(crate) fn runs_to_completion(self) -> bool {
        self.spec().runs_to_completion()
    }

    /// See [`Kind::restarts_as_a_whole`].
    pub(crate) fn restarts_as_a_whole(self) -> bool {
        self.spec().restarts_as_a_whole()
    }

    /// See [`Kind::expected_pods`].
    pub fn expected_pods(self, object: &Value, only: Option<&BTreeSet<String>>) -> Option<u32> {
        self.spec().expected_pods(object, only)
    }

    /// See [`Kind::count_source`].
    pub(crate) fn count_source(self) -> &'static str {
        self.spec().count_source()
    }

    /// See [`Kind::selector`].
    pub fn selector(self, object: &Value) -> Option<LabelSelector> {
        self.spec().selector(object)
    }

    /// See [`Kind::fixed`].
    pub fn fixed(self) -> Option<&'static str> {
        self.spec().fixed()
    }

    /// See [`Kind::scaled_pods`].
    pub(crate) fn scaled_pods(self, object: &Value) -> u32 {
        self.spec().scaled_pods(object)
    }

    /// See [`Kind::scale_refusal`].
    pub(crate) fn scale_refusal(self, object: &Value) -> Option<&'static str> {
        self.spec().scale_refusal(object)
    }

    /// See [`Kind::scale_patch`].
    pub(crate) fn scale_patch(self, pods: u32) -> Option<Value> {
        self.spec().scale_patch(pods)
    }

    /// See [`Kind::scales_through_subresource`].
    pub(crate) fn scales_through_subresource(self) -> bool {
        self.spec().scales_through_subresource()
    }

    /// See [`Kind::role_rules`].
    pub fn role_rules(self, name: &str, elastic: bool) -> Vec<PolicyRule> {
        self.spec().role_rules(name, elastic)
    }

    /// See [`Kind::elastic_annotations`].
    pub(crate) fn elastic_annotations(self) -> &'static [(&'static str, &'static str)] {
        self.spec().elastic_annotations()
    }

    /// See [`Kind::render`].
    pub fn render(self, parts: &Parts) -> Result<Value, serde_json::Error> {
        self.spec().render(parts)
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One workload object: its kind and name (in a namespace the context gives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkloadRef {
    pub kind: WorkloadKind,
    pub name: String,
}

impl WorkloadRef {
    pub fn new(kind: WorkloadKind, name: impl Into<String>) -> WorkloadRef {
        WorkloadRef {
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_found_by_their_pod_labels_and_resources() {
        assert_eq!(
            WorkloadKind::named_by_label("batch.kubernetes.io/job-name"),
            Some(WorkloadKind::Job)
        );
        assert_eq!(
            WorkloadKind::named_by_label("job-name"),
            Some(WorkloadKind::Job)
        );
        assert_eq!(
            WorkloadKind::named_by_label(JOBSET_NAME_LABEL),
            Some(WorkloadKind::JobSet)
        );
        assert_eq!(WorkloadKind::named_by_label("app"), None);
        let ar = WorkloadKind::JobSet.api_resource();
        assert_eq!(
            (ar.group.as_str(), ar.version.as_str(), ar.plural.as_str()),
            ("jobset.x-k8s.io", "v1alpha2", "jobsets")
        );
        let ar = WorkloadKind::StatefulSet.api_resource();
        assert_eq!(ar.api_version, "apps/v1");
        assert_eq!(WorkloadKind::StatefulSet.to_string(), "StatefulSet");
        assert_eq!(
            WorkloadKind::from_str("statefulset", false),
            Ok(WorkloadKind::StatefulSet)
        );
    }

    #[test]
    fn role_rules_read_the_one_object_and_raise_it_when_elastic() {
        let r = &WorkloadKind::Job.role_rules("j", false)[0];
        assert_eq!(r.api_groups.as_deref(), Some(&["batch".to_string()][..]));
        assert_eq!(r.resource_names.as_deref(), Some(&["j".to_string()][..]));
        assert_eq!(r.verbs, ["get"]);
        assert_eq!(
            WorkloadKind::Job.role_rules("j", true)[0].verbs,
            ["get", "patch"]
        );
        assert_eq!(WorkloadKind::JobSet.role_rules("j", true)[0].verbs, ["get"]);
        // An elastic StatefulSet's token patches its scale subresource alone.
        let s = WorkloadKind::StatefulSet.role_rules("s", true);
        let of = |r: &PolicyRule| (r.resources.clone().unwrap_or_default(), r.verbs.clone());
        assert_eq!(
            s.iter().map(of).collect::<Vec<_>>(),
            [
                (vec!["statefulsets".to_string()], vec!["get".to_string()]),
                (
                    vec!["statefulsets/scale".to_string()],
                    vec!["get".to_string(), "patch".to_string()]
                ),
            ]
        );
        assert!(WorkloadKind::StatefulSet.scales_through_subresource());
        assert!(!WorkloadKind::Job.scales_through_subresource());
    }

    #[test]
    fn only_a_jobset_restarts_as_a_whole_and_only_a_statefulset_restarts_its_pods() {
        let whole: Vec<_> = WorkloadKind::ALL
            .into_iter()
            .filter(|k| k.restarts_as_a_whole())
            .collect();
        assert_eq!(whole, [WorkloadKind::JobSet]);
        let restarted: Vec<_> = WorkloadKind::ALL
            .into_iter()
            .filter(|k| !k.runs_to_completion())
            .collect();
        assert_eq!(restarted, [WorkloadKind::StatefulSet]);
    }
}
