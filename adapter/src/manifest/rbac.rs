//! The ServiceAccount, the Role with exactly what discovery reads for the workload (the pods of
//! the namespace, which it selects by label and watches, and `get` on the one workload object
//! by name), and its RoleBinding. An elastic job's Role also lets `grow` raise its pod count:
//! a StatefulSet's through its `scale` subresource alone (`get`, `patch` on
//! `statefulsets/scale`: the token cannot touch the StatefulSet's template), a Job's (which has
//! no scale subresource) by `patch` on the Job, which the admission policy of
//! [`super::admission`] narrows to its parallelism and completions within its max-pods.

use serde_json::{json, Value};

use super::meta::{meta, names};
use super::plan::JobPlan;
use super::plan::Kind;

/// The ServiceAccount, Role and RoleBinding.
pub(super) fn rbac(a: &JobPlan) -> Vec<Value> {
    let n = names(a);
    // Discovery reads one owner, by name: the workload itself.
    let (group, resource) = match a.kind {
        Kind::Job => ("batch", "jobs"),
        Kind::Statefulset => ("apps", "statefulsets"),
        Kind::Jobset => ("jobset.x-k8s.io", "jobsets"),
    };
    // An elastic job also raises it: a StatefulSet through its scale subresource only (a patch
    // of the StatefulSet itself could rewrite its pod template), a Job by a patch the admission
    // policy narrows.
    let rule = |resource: String, verbs: Value| json!({"apiGroups": [group], "resources": [resource], "resourceNames": [a.name], "verbs": verbs});
    let mut owner = vec![match (a.max_pods, a.kind) {
        (Some(_), Kind::Job) => rule(resource.into(), json!(["get", "patch"])),
        _ => rule(resource.into(), json!(["get"])),
    }];
    if let (Some(_), Kind::Statefulset) = (a.max_pods, a.kind) {
        owner.push(rule(format!("{resource}/scale"), json!(["get", "patch"])));
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(a, &n.sa),
        // Mounted only where the pod template asks for it.
        "automountServiceAccountToken": false});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(a, &n.role),
    "rules": std::iter::once(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}))
        .chain(owner)
        .collect::<Vec<_>>()});
    let mut subject = json!({"kind": "ServiceAccount", "name": n.sa});
    if let Some(ns) = &a.namespace {
        subject["namespace"] = json!(ns);
    }
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(a, &n.role),
        "subjects": [subject],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": n.role}});
    vec![sa, role, binding]
}
