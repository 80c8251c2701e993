//! The ServiceAccount, the Role with exactly what discovery reads for the workload (the pods of
//! the namespace, which it selects by label and watches, and `get` on the one workload object
//! by name), and its RoleBinding. An elastic job's Role also lets `grow` raise its pod count:
//! a StatefulSet's through its `scale` subresource alone (`get`, `patch` on
//! `statefulsets/scale`: the token cannot touch the StatefulSet's template), a Job's (which has
//! no scale subresource) by `patch` on the Job, which the admission policy of
//! [`super::admission`] narrows to its parallelism and completions within its max-pods. A job
//! the controller made for an MPIJob may also `create` Events (its launcher's `DaemonsUp`).

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
    let owner = a.kind.role_rules(&a.name, a.max_pods.is_some());
    // A job the controller made records its launcher's events on the MPIJob: `create` on
    // `events`, nothing more (no read, no update).
    let events = a.events_to.as_ref().map(|_| PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["events".into()]),
        verbs: vec!["create".into()],
        ..Default::default()
    });
    let role = Role {
        metadata: meta(a, &n.role),
        rules: Some(std::iter::once(pods).chain(owner).chain(events).collect()),
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
