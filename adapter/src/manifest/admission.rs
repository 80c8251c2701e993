//! An elastic job's guard: a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) and
//! its binding, rendered with the workload. A Job has no `scale` subresource, so `grow` raises
//! it by patching the Job, and its Role must grant `patch` on it; the token holding that Role is
//! mounted where the ranks run. The policy makes the Job's own service account unable to do
//! more than `grow` does: any update of the Job by that account must leave everything but
//! `spec.parallelism` and `spec.completions` unchanged (an allowlist: labels, annotations (the
//! max-pods limit among them), finalizers, owner references, `suspend`, the deadlines, the
//! limits and policies of failure and success, the pod template, and any field a later
//! Kubernetes adds; in `metadata` only what the API server itself sets may differ), keep the two equal, and neither lower
//! them below 1 (a release gives the highest pods back, never pod 0's DVM head) nor raise them
//! past the Job's `prrte-k8s.io/max-pods`. Updates by anyone else (a person, a
//! controller, Kueue) are not matched. A StatefulSet's token may patch only its `scale`
//! subresource (the Role sees to that); its policy keeps the Scale's replicas from being
//! lowered below 1 or raised past the max-pods rendered (a Scale carries no annotation to read it
//! from: raising the limit of a running StatefulSet means applying its policy anew).
//!
//! The policy and its binding are cluster-scoped (applying them needs the right to create
//! admission policies); their name is the job's namespace and name, `.`-separated (no two jobs
//! share it), and their content names
//! only the Job (by name) and its service account (in the namespace of the request), so two
//! manifests that render the same name render the same objects.

use serde_json::{json, Value};

use super::meta::{names, own_labels, MAX_PODS_ANNOTATION};
use super::plan::JobPlan;
use crate::workload::WorkloadKind;

/// The fields of a Job's `spec` the job's own account may change: the pod count. Every other
/// field, those a later Kubernetes adds included, must stay as it was.
const CHANGEABLE_SPEC: [&str; 2] = ["parallelism", "completions"];

/// The fields of a Job's `metadata` the API server itself changes on an update, before the
/// policy sees it: whatever the request carries there is not the requester's to decide. Every
/// other field (labels, annotations with the max-pods limit, finalizers, owner references,
/// `generateName`, a field a later Kubernetes adds) must stay as it was.
const SERVER_METADATA: [&str; 3] = ["resourceVersion", "generation", "managedFields"];

/// A CEL list literal of `fields`.
fn cel_list(fields: &[&str]) -> String {
    let quoted: Vec<String> = fields.iter().map(|f| format!("'{f}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// CEL: every field of `object.<path>` but those in `free` is in `oldObject.<path>` with the
/// same value, and no field of `oldObject.<path>` but those in `free` is gone: an allowlist, so
/// a field the policy never names is compared too. `dyn()` lets the macros range over an
/// object of the Job's schema (Kubernetes' type check admits only lists, maps and `dyn`
/// there; at run time an object iterates over the fields it has).
fn only_changes(path: &str, free: &[&str]) -> String {
    let (new, old, free) = (
        format!("dyn(object.{path})"),
        format!("dyn(oldObject.{path})"),
        cel_list(free),
    );
    format!(
        "{new}.all(k, k in {free} || (k in {old} && {new}[k] == {old}[k])) \
         && {old}.all(k, k in {free} || k in {new})"
    )
}

/// The cluster-wide name of the policy and its binding: `prrte-k8s.<namespace>.<name>`
/// (`prrte-k8s.<name>` without a namespace). A job name is a DNS label (no `.`), so the name
/// reads one way: the job is after the last `.`, its namespace (a DNS label too) between the
/// first and the last; two jobs never share it. At most 9 + 1 + 63 + 1 + 40 characters, a DNS
/// subdomain (253 at most).
pub(super) fn policy_name(a: &JobPlan) -> String {
    match &a.namespace {
        Some(ns) => format!("prrte-k8s.{ns}.{}", a.name),
        None => format!("prrte-k8s.{}", a.name),
    }
}

/// The policy's validations: (CEL expression, message).
pub(super) fn validations(a: &JobPlan) -> Vec<(String, String)> {
    let max = format!("int(oldObject.metadata.annotations['{MAX_PODS_ANNOTATION}'])");
    vec![
        (
            only_changes("metadata", &SERVER_METADATA),
            "the job's own service account may not change the Job's metadata (labels, \
             annotations, finalizers, owner references or any other field)"
                .into(),
        ),
        (
            only_changes("spec", &CHANGEABLE_SPEC),
            "the job's own service account may change only the Job's spec.parallelism and \
             spec.completions (not spec.suspend, spec.template, the deadlines, the policies or \
             any other field)"
                .into(),
        ),
        (
            "has(object.spec.parallelism) && has(object.spec.completions) \
             && object.spec.parallelism == object.spec.completions"
                .into(),
            "the job's own service account must keep the Job's parallelism and completions equal"
                .into(),
        ),
        (
            "has(object.spec.parallelism) && object.spec.parallelism >= 1".into(),
            "the job's own service account may not lower the Job's parallelism below 1 (pod 0 runs the DVM)"
                .into(),
        ),
        (
            format!(
                "has(oldObject.metadata.annotations) && '{MAX_PODS_ANNOTATION}' in oldObject.metadata.annotations \
                 && object.spec.parallelism <= {max}"
            ),
            format!(
                "the job's own service account may not raise Job {} past its {MAX_PODS_ANNOTATION}",
                a.name
            ),
        ),
    ]
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
