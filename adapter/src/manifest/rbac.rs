//! The ServiceAccount, the Role with exactly what discovery reads for the workload (the pods of
//! the namespace, which it selects by label and watches, and `get` on the one workload object
//! by name; an elastic job's also `patch` on it, to grow), and its RoleBinding.

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
    // An elastic job also raises it (`patch`; a StatefulSet's scale subresource too, so
    // `kubectl scale` works with the same rights).
    let (verbs, resources) = match (a.max_pods, a.kind) {
        (None, _) => (json!(["get"]), json!([resource])),
        (Some(_), Kind::Statefulset) => (
            json!(["get", "patch"]),
            json!([resource, format!("{resource}/scale")]),
        ),
        (Some(_), _) => (json!(["get", "patch"]), json!([resource])),
    };
    let owner = json!({"apiGroups": [group], "resources": resources, "resourceNames": [a.name], "verbs": verbs});
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(a, &n.sa),
        // Mounted only where the pod template asks for it.
        "automountServiceAccountToken": false});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(a, &n.role),
    "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        owner,
    ]});
    let mut subject = json!({"kind": "ServiceAccount", "name": n.sa});
    if let Some(ns) = &a.namespace {
        subject["namespace"] = json!(ns);
    }
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(a, &n.role),
        "subjects": [subject],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": n.role}});
    vec![sa, role, binding]
}
