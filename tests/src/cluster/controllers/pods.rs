//! What the controllers share about the pods they make: the owner reference, the pod from a
//! template, a pod's phase and readiness, the pods an owner has.

use crate::api::Store;
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) fn owner_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!([{
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

/// A pod from the template of `owner` (`spec.template`), with an object as metadata.
pub(super) fn pod_from_template(owner: &Value) -> Value {
    let tmpl = &owner["spec"]["template"];
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": tmpl.get("metadata").cloned().unwrap_or(json!({})),
        "spec": tmpl.get("spec").cloned().unwrap_or(json!({})),
    });
    if !pod["metadata"].is_object() {
        pod["metadata"] = json!({});
    }
    pod
}

pub(super) fn phase(p: &Value) -> &str {
    p.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending")
}

pub(super) fn is_ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The pods `owner` has, those being deleted (`deletionTimestamp`) included.
pub(super) fn owned_pods(store: &Store, owner: &Value) -> Vec<Arc<Value>> {
    owned(store, owner, "Pod")
}

/// The objects of `kind` that `owner` has.
pub(super) fn owned(store: &Store, owner: &Value, kind: &str) -> Vec<Arc<Value>> {
    let uid = owner["metadata"]["uid"].as_str().unwrap_or("");
    store
        .dependents(uid)
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect()
}
