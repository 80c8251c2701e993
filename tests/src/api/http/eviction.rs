//! `pods/eviction`: an Eviction (policy/v1) deletes its pod with the eviction's
//! DeleteOptions (by default the pod's own grace period: its containers get SIGTERM first),
//! after marking it with the condition `DisruptionTarget` (reason `EvictionByEvictionAPI`), as
//! the API server does. The sandbox has no PodDisruptionBudgets, so no eviction is refused.

use super::request::delete_options_from;
use super::response::{json_response, Body};
use super::state::State;
use crate::api::defaults::now_rfc3339;
use crate::api::resources::PODS;
use crate::api::status::ApiError;
use crate::api::store::{DeleteOptions, Part};
use http::Response;
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) fn evict(
    st: &Arc<State>,
    ns: &str,
    name: &str,
    body: &Value,
) -> Result<Response<Body>, ApiError> {
    if let Some(k) = body.get("kind").and_then(Value::as_str) {
        if k != "Eviction" {
            return Err(ApiError::bad_request(format!(
                "pods/eviction takes an Eviction (policy/v1), not a {k}"
            )));
        }
    }
    if let Some(n) = body.pointer("/metadata/name").and_then(Value::as_str) {
        if n != name {
            return Err(ApiError::bad_request(format!(
                "the Eviction names pod {n:?} but was posted for pod {name:?}: use the same name"
            )));
        }
    }
    let mut opts = DeleteOptions::default();
    if let Some(d) = body.get("deleteOptions").filter(|d| d.is_object()) {
        delete_options_from(d, &mut opts)?;
    }
    let pod = st.store.get(&PODS, ns, name)?;
    let running = pod["metadata"]["deletionTimestamp"].is_null()
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
    if running && !opts.dry_run {
        let uid = pod["metadata"]["uid"].clone();
        st.store.modify(&PODS, ns, name, Part::Status, |p| {
            if p["metadata"]["uid"] == uid {
                mark_disruption_target(p);
            }
        })?;
    }
    st.store.delete(&PODS, ns, name, &opts)?;
    Ok(json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// The condition `DisruptionTarget` the API server sets on a pod it evicts.
fn mark_disruption_target(pod: &mut Value) {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let st = &mut pod["status"];
    if !st["conditions"].is_array() {
        st["conditions"] = json!([]);
    }
    let conds = st["conditions"].as_array_mut().expect("an array");
    conds.retain(|c| c["type"] != "DisruptionTarget");
    conds.push(json!({
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": now_rfc3339(),
    }));
}
