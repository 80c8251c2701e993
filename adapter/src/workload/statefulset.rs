//! The StatefulSet: interactive only, its pods restarted when they exit.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use super::kind::{rule, spec_of, with, Kind};
use super::parts::Parts;

/// The label the StatefulSet controller puts on each pod with its ordinal.
pub(crate) const STATEFULSET_POD_INDEX: &str = "apps.kubernetes.io/pod-index";
/// The label it puts on each pod with the pod's name.
const STATEFULSET_POD_NAME: &str = "statefulset.kubernetes.io/pod-name";

/// The StatefulSet.
pub(super) struct Sts;

impl Kind for Sts {
    fn name(&self) -> &'static str {
        "StatefulSet"
    }
    fn api_version(&self) -> &'static str {
        "apps/v1"
    }
    fn plural(&self) -> &'static str {
        "statefulsets"
    }
    fn per_pod_labels(&self) -> &'static [&'static str] {
        &[STATEFULSET_POD_NAME, STATEFULSET_POD_INDEX]
    }
    fn owns_pods(&self) -> bool {
        true
    }
    fn index_label_for_env(&self) -> Option<&'static str> {
        Some(STATEFULSET_POD_INDEX)
    }
    fn runs_to_completion(&self) -> bool {
        false
    }
    fn selector(&self, object: &Value) -> Option<LabelSelector> {
        spec_of::<StatefulSetSpec>(object).map(|s| s.selector)
    }

    /// Its replicas (default 1).
    fn expected_pods(&self, object: &Value, _only: Option<&BTreeSet<String>>) -> Option<u32> {
        let spec: StatefulSetSpec = spec_of(object)?;
        u32::try_from(spec.replicas.unwrap_or(1))
            .ok()
            .filter(|n| *n > 0)
    }
    fn count_source(&self) -> &'static str {
        "spec.replicas"
    }

    fn scaled_pods(&self, object: &Value) -> u32 {
        let replicas = spec_of::<StatefulSetSpec>(object).and_then(|s| s.replicas);
        u32::try_from(replicas.unwrap_or(1)).unwrap_or(0)
    }
    fn scale_patch(&self, pods: u32) -> Option<Value> {
        Some(json!({"spec": {"replicas": pods}}))
    }

    fn scales_through_subresource(&self) -> bool {
        true
    }

    /// `get` on the StatefulSet; an elastic one's also `get`, `patch` on its `scale`
    /// subresource alone, so that its token cannot touch the StatefulSet's template.
    fn role_rules(&self, name: &str, elastic: bool) -> Vec<PolicyRule> {
        let mut rules = vec![rule(self.group(), &[self.plural()], name, &["get"])];
        if elastic {
            let scale = format!("{}/scale", self.plural());
            rules.push(rule(self.group(), &[&scale], name, &["get", "patch"]));
        }
        rules
    }

    /// Every pod at once, none restarted into a batch command.
    fn render(&self, p: &Parts) -> Result<Value, serde_json::Error> {
        let spec = StatefulSetSpec {
            replicas: Some(i32::try_from(p.pods).unwrap_or(i32::MAX)),
            service_name: Some(p.name.clone()),
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector {
                match_labels: Some(p.selector.clone()),
                match_expressions: None,
            },
            ..Default::default()
        };
        let spec = with(&spec, vec![("template", p.template.clone())])?;
        with(
            &StatefulSet::default(),
            vec![("metadata", p.metadata.clone()), ("spec", spec)],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_grows_by_replicas() {
        assert_eq!(
            Sts.expected_pods(&json!({"spec": {"replicas": 3}}), None),
            Some(3)
        );
        assert_eq!(Sts.expected_pods(&json!({"spec": {}}), None), Some(1));
        assert_eq!(Sts.expected_pods(&json!({}), None), None);
        assert_eq!(Sts.scaled_pods(&json!({"spec": {"replicas": 2}})), 2);
        assert_eq!(Sts.scale_patch(3), Some(json!({"spec": {"replicas": 3}})));
        let r = Sts.role_rules("s", true);
        assert_eq!(
            r[0].resources.as_deref(),
            Some(&["statefulsets".to_string()][..])
        );
        assert_eq!(r[0].verbs, ["get"]);
        assert_eq!(
            r[1].resources.as_deref(),
            Some(&["statefulsets/scale".to_string()][..])
        );
        assert_eq!(r[1].verbs, ["get", "patch"]);
        assert_eq!(Sts.role_rules("s", false).len(), 1);
    }
}
