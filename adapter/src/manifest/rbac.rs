//! The ServiceAccount, the Role with exactly what discovery reads for the workload (the pods of
//! the namespace, which it selects by label and watches, and the workload kind's own rule on
//! the one workload object by name: `get`, an elastic job's also what `grow` changes), and its
//! RoleBinding.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use serde_json::Value;

use super::meta::{meta, names};
use super::plan::JobPlan;

/// The ServiceAccount, Role and RoleBinding.
pub(super) fn rbac(a: &JobPlan) -> Result<Vec<Value>, serde_json::Error> {
    let n = names(a);
    let sa = ServiceAccount {
        metadata: meta(a, &n.sa),
        // Mounted only where the pod template asks for it.
        automount_service_account_token: Some(false),
        ..Default::default()
    };
    let pods = PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["pods".into()]),
        verbs: ["get", "list", "watch"].map(String::from).to_vec(),
        ..Default::default()
    };
    // Discovery reads one owner, by name: the workload itself.
    let owner = a.kind.role_rule(&a.name, a.max_pods.is_some());
    let role = Role {
        metadata: meta(a, &n.role),
        rules: Some(vec![pods, owner]),
    };
    let binding = RoleBinding {
        metadata: meta(a, &n.role),
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: n.sa,
            namespace: a.namespace.clone(),
            api_group: None,
        }]),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: n.role,
        },
    };
    Ok(vec![
        serde_json::to_value(sa)?,
        serde_json::to_value(role)?,
        serde_json::to_value(binding)?,
    ])
}
