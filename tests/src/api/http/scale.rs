//! The `scale` subresource (autoscaling/v1 `Scale`) of the resources that have one: what
//! `kubectl scale` reads and patches. Writing it sets the object's `spec.replicas`.

use crate::api::admission::{self, Attributes, UserInfo};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use crate::api::store::{Part, Patch, Store};
use crate::api::table::label_selector_text;
use serde_json::{json, Value};

/// The Scale of an object.
pub(super) fn scale_of(obj: &Value) -> Value {
    let m = &obj["metadata"];
    let selector = label_selector_text(obj.pointer("/spec/selector"));
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"],
            "namespace": m["namespace"],
            "uid": m["uid"],
            "resourceVersion": m["resourceVersion"],
            "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": if selector == "<none>" { String::new() } else { selector },
        },
    })
}

/// Applies a patch (or, `patch` None, the replacement `body`) to an object's Scale and writes
/// the resulting replicas; answers the new Scale.
pub(super) fn write_scale(
    store: &Store,
    rt: &'static ResourceType,
    ns: &str,
    name: &str,
    change: ScaleChange,
    dry_run: bool,
    user: &UserInfo,
) -> Result<(Value, Vec<String>), ApiError> {
    let current = store.get(rt, ns, name)?;
    let mut scale = scale_of(&current);
    match change {
        ScaleChange::Replace(body) => scale = body,
        ScaleChange::Patch(Patch::Merge(p) | Patch::Apply(p)) => json_patch::merge(&mut scale, &p),
        ScaleChange::Patch(Patch::Json(p)) => {
            let ops: json_patch::Patch = serde_json::from_value(p)
                .map_err(|e| ApiError::bad_request(format!("the JSON patch is malformed: {e}")))?;
            json_patch::patch(&mut scale, &ops).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch could not be applied: {e}"),
                )
            })?;
        }
    }
    let replicas = match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::new(
                422,
                "Invalid",
                format!("Scale.autoscaling \"{name}\" is invalid: spec.replicas: Invalid value: {v}: must be greater than or equal to 0"),
            )
        })?,
    };
    // A resourceVersion in the Scale is a precondition on the object.
    let rv = scale
        .pointer("/metadata/resourceVersion")
        .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        .cloned();
    let old = scale_of(&current);
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(replicas);
    let warnings = admit_scale(store, rt, &old, &new, dry_run, user)?;
    let mut p = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = rv {
        p["metadata"] = json!({"resourceVersion": rv});
    }
    let obj = store.patch(rt, ns, name, Patch::Merge(p), Part::Main, dry_run)?;
    Ok((scale_of(&obj), warnings))
}

/// Admits `user`'s write of a Scale from `old` to `new`: the warnings to send, or the denial.
fn admit_scale(
    store: &Store,
    rt: &'static ResourceType,
    old: &Value,
    new: &Value,
    dry_run: bool,
    user: &UserInfo,
) -> Result<Vec<String>, ApiError> {
    let ns = old["metadata"]["namespace"].as_str().unwrap_or("");
    let policies = store.admission_policies(ns);
    if policies.bindings.is_empty() {
        return Ok(Vec::new());
    }
    admission::admit(
        &policies,
        &Attributes {
            resource: rt,
            subresource: "scale",
            kind: ("autoscaling", "v1", "Scale"),
            operation: "UPDATE",
            namespace: ns,
            name: old["metadata"]["name"].as_str().unwrap_or(""),
            user,
            dry_run,
            object: Some(new),
            old_object: Some(old),
        },
    )
}

/// How a Scale is written: replaced (PUT) or patched.
pub(super) enum ScaleChange {
    Replace(Value),
    Patch(Patch),
}
