//! Reading fields of a Kubernetes object (JSON).

use serde_json::Value;

/// The string at JSON pointer `ptr` of `v` ("" when absent).
pub(super) fn s(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}
