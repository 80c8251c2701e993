//! A stored object: its type, the metadata the store reads, its conversion to a typed object
//! and its checks against the resource it is stored as.

use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

/// A stored object (always JSON with apiVersion, kind and metadata).
pub type Obj = Arc<Value>;

pub(super) fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

pub(super) fn owner_uids(v: &Value) -> Vec<String> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| o.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

/// Converts a stored object to a typed one.
pub fn from_obj<K: DeserializeOwned>(o: &Value) -> Result<K, ApiError> {
    K::deserialize(o).map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))
}

pub(super) fn check_type(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if (!av.is_empty() && av != rt.api_version()) || (!kind.is_empty() && kind != rt.kind) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) and kind ({kind}) do not match the expected {} {} for {}",
            rt.api_version(),
            rt.kind,
            rt.qualified()
        )));
    }
    Ok(())
}

pub(super) fn normalize(rt: &ResourceType, obj: Value) -> Result<Value, ApiError> {
    (rt.normalize)(obj).map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            rt.kind, rt.version, rt.kind
        ))
    })
}
