//! An elastic job's guard: a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) and
//! its binding, rendered with the workload. A Job has no `scale` subresource, so `grow` raises
//! it by patching the Job, and its Role must grant `patch` on it; the token holding that Role is
//! mounted where the ranks run. The policy makes the Job's own service account unable to do
//! more than `grow` does: any update of the Job by that account must leave everything but
//! `spec.parallelism` and `spec.completions` unchanged (labels, annotations (the max-pods
//! limit among them), finalizers, owner references, `suspend`, the deadlines, the limits and
//! policies of failure and success, the pod template), keep the two equal, and neither lower
//! them below 1 (a release gives the highest pods back, never pod 0's DVM head) nor raise them
//! past the Job's `prrte-k8s.io/max-pods`. Updates by anyone else (a person, a
//! controller, Kueue) are not matched. A StatefulSet's token may patch only its `scale`
//! subresource (the Role sees to that); its policy keeps the Scale's replicas from being
//! lowered below 1 or raised past the max-pods rendered (a Scale carries no annotation to read it
//! from: raising the limit of a running StatefulSet means applying its policy anew).
//!
//! The policy and its binding are cluster-scoped (applying them needs the right to create
//! admission policies); their name is the job's namespace and name, and their content names
//! only the Job (by name) and its service account (in the namespace of the request), so two
//! manifests that render the same name render the same objects.

use serde_json::{json, Value};

use super::meta::{names, own_labels, MAX_PODS_ANNOTATION};
use super::plan::JobPlan;
use crate::workload::WorkloadKind;

/// The fields of a Job's `metadata` the job's own account may not change.
const FIXED_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// The fields of a Job's `spec` the job's own account may not change (all but `parallelism`
/// and `completions`).
const FIXED_SPEC: [&str; 12] = [
    "suspend",
    "activeDeadlineSeconds",
    "ttlSecondsAfterFinished",
    "backoffLimit",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
    "podFailurePolicy",
    "successPolicy",
    "completionMode",
    "podReplacementPolicy",
    "managedBy",
    "template",
];

/// CEL: `object.<path>.<field>` is what `oldObject.<path>.<field>` was (both absent, or equal).
fn unchanged(path: &str, field: &str) -> String {
    let (new, old) = (
        format!("object.{path}.{field}"),
        format!("oldObject.{path}.{field}"),
    );
    format!("has({new}) == has({old}) && (!has({new}) || {new} == {old})")
}

/// The cluster-wide name of the policy and its binding.
pub(super) fn policy_name(a: &JobPlan) -> String {
    match &a.namespace {
        Some(ns) => format!("prrte-k8s-{ns}-{}", a.name),
        None => format!("prrte-k8s-{}", a.name),
    }
}

/// The policy's validations: (CEL expression, message).
pub(super) fn validations(a: &JobPlan) -> Vec<(String, String)> {
    let max = format!("int(oldObject.metadata.annotations['{MAX_PODS_ANNOTATION}'])");
    let mut v: Vec<(String, String)> = FIXED_METADATA
        .iter()
        .map(|f| {
            (
                unchanged("metadata", f),
                format!("the job's own service account may not change the Job's metadata.{f}"),
            )
        })
        .collect();
    v.extend(FIXED_SPEC.iter().map(|f| {
        (
            unchanged("spec", f),
            format!("the job's own service account may not change the Job's spec.{f}"),
        )
    }));
    v.push((
        "has(object.spec.parallelism) && has(object.spec.completions) \
         && object.spec.parallelism == object.spec.completions"
            .into(),
        "the job's own service account must keep the Job's parallelism and completions equal"
            .into(),
    ));
    v.push((
        "has(object.spec.parallelism) && object.spec.parallelism >= 1".into(),
        "the job's own service account may not lower the Job's parallelism below 1 (pod 0 runs the DVM)"
            .into(),
    ));
    v.push((
        format!(
            "has(oldObject.metadata.annotations) && '{MAX_PODS_ANNOTATION}' in oldObject.metadata.annotations \
             && object.spec.parallelism <= {max}"
        ),
        format!(
            "the job's own service account may not raise Job {} past its {MAX_PODS_ANNOTATION}",
            a.name
        ),
    ));
    v
}

/// The validations of an elastic StatefulSet's policy, on its Scale (which carries no
/// annotation, so the limit is the rendered one): not below 1, not raised past M.
pub(super) fn scale_validations(a: &JobPlan, max: u32) -> Vec<(String, String)> {
    vec![
        (
            "has(object.spec.replicas) && object.spec.replicas >= 1".into(),
            "the job's own service account may not lower the StatefulSet's replicas below 1 (pod 0 runs the DVM)"
                .into(),
        ),
        (
            format!("has(object.spec.replicas) && object.spec.replicas <= {max}"),
            format!(
                "the job's own service account may not scale StatefulSet {} past its {MAX_PODS_ANNOTATION} ({max})",
                a.name
            ),
        ),
    ]
}

/// The ValidatingAdmissionPolicy and its binding for an elastic Job or StatefulSet (nothing
/// for another job).
pub(super) fn admission(a: &JobPlan) -> Vec<Value> {
    let (rule, validations) = match (a.max_pods, a.kind) {
        (Some(_), WorkloadKind::Job) => (
            json!({"apiGroups": ["batch"], "apiVersions": ["*"], "operations": ["UPDATE"],
                   "resources": ["jobs"], "resourceNames": [a.name]}),
            validations(a),
        ),
        (Some(max), WorkloadKind::StatefulSet) => (
            json!({"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["UPDATE"],
                   "resources": ["statefulsets/scale"], "resourceNames": [a.name]}),
            scale_validations(a, max),
        ),
        _ => return Vec::new(),
    };
    let name = policy_name(a);
    let sa = names(a).sa;
    let meta = json!({"name": name, "labels": own_labels(a)});
    let validations: Vec<Value> = validations
        .into_iter()
        .map(|(expression, message)| json!({"expression": expression, "message": message, "reason": "Forbidden"}))
        .collect();
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            // Only the job's own service account (the token in its pods) is narrowed.
            "matchConditions": [{
                "name": "by-the-jobs-own-service-account",
                "expression": format!("request.userInfo.username == 'system:serviceaccount:' + request.namespace + ':{sa}'"),
            }],
            "validations": validations,
        },
    });
    let mut binding_spec = json!({"policyName": name, "validationActions": ["Deny"]});
    if let Some(ns) = &a.namespace {
        binding_spec["matchResources"] =
            json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}});
    }
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": meta,
        "spec": binding_spec,
    });
    vec![policy, binding]
}
