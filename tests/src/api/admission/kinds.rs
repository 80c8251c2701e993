//! The two resources, cluster-scoped, as a Kubernetes 1.30+ API server lists them.

use crate::api::resources::ResourceType;
use k8s_openapi::api::admissionregistration::v1 as ar;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

fn norm<K: DeserializeOwned + Serialize>(v: Value) -> Result<Value, String> {
    let k: K = serde_json::from_value(v).map_err(|e| e.to_string())?;
    serde_json::to_value(&k).map_err(|e| e.to_string())
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub static VALIDATINGADMISSIONPOLICIES: ResourceType = ResourceType {
    group: "admissionregistration.k8s.io",
    version: "v1",
    plural: "validatingadmissionpolicies",
    singular: "validatingadmissionpolicy",
    kind: "ValidatingAdmissionPolicy",
    namespaced: false,
    short_names: &[],
    categories: &["api-extensions"],
    verbs: VERBS,
    subresources: &["status"],
    stored: true,
    normalize: norm::<ar::ValidatingAdmissionPolicy>,
    crd: None,
    view: None,
};

/// Both, in discovery order.
pub static KINDS: &[&ResourceType] = &[
    &VALIDATINGADMISSIONPOLICIES,
    &VALIDATINGADMISSIONPOLICYBINDINGS,
];

pub static VALIDATINGADMISSIONPOLICYBINDINGS: ResourceType = ResourceType {
    group: "admissionregistration.k8s.io",
    version: "v1",
    plural: "validatingadmissionpolicybindings",
    singular: "validatingadmissionpolicybinding",
    kind: "ValidatingAdmissionPolicyBinding",
    namespaced: false,
    short_names: &[],
    categories: &["api-extensions"],
    verbs: VERBS,
    subresources: &[],
    stored: true,
    normalize: norm::<ar::ValidatingAdmissionPolicyBinding>,
    crd: None,
    view: None,
};
