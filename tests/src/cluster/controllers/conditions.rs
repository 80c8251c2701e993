//! Status conditions (set one, find one that holds) and the age of a status time.

use crate::api::defaults::now_rfc3339;
use serde_json::{json, Value};

pub(super) fn set_condition(conds: &mut Vec<Value>, ty: &str, reason: &str, message: &str) {
    if !conds.iter().any(|c| c["type"] == ty) {
        let now = now_rfc3339();
        conds.push(json!({
            "type": ty, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now,
        }));
    }
}

/// Kubernetes' `ensureJobConditionStatus`: the condition `ty` made `status` with `reason` and
/// `message` (its transition time now) if it differs; a condition that is absent is added only
/// when True. Returns whether the list changed.
pub(super) fn ensure_condition_status(
    conds: &mut Vec<Value>,
    ty: &str,
    status: bool,
    reason: &str,
    message: &str,
) -> bool {
    let status = if status { "True" } else { "False" };
    let now = now_rfc3339();
    let fresh = json!({
        "type": ty, "status": status, "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    });
    match conds.iter_mut().find(|c| c["type"] == ty) {
        Some(c) => {
            if c["status"] == status && c["reason"] == reason && c["message"] == message {
                return false;
            }
            *c = fresh;
            true
        }
        None if status == "True" => {
            conds.push(fresh);
            true
        }
        None => false,
    }
}

pub(super) fn seconds_since(rfc3339: &str) -> Option<i64> {
    let t: k8s_openapi::jiff::Timestamp = rfc3339.parse().ok()?;
    Some(crate::api::defaults::now_secs() - t.as_second())
}

pub(super) fn condition_true<'a>(conds: &'a [Value], ty: &str) -> Option<&'a Value> {
    conds
        .iter()
        .find(|c| c["type"] == ty && c["status"] == "True")
}
