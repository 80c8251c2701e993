//! Pod status pieces: conditions in the kubelet's order, a terminated container's state.

use crate::podnet::PodExit;
use serde_json::{json, Value};

pub(super) fn set_cond(st: &mut Value, ty: &str, status: bool, now: &str) {
    set_cond_reason(st, ty, status, now, "", "");
}

pub(super) fn set_cond_reason(
    st: &mut Value,
    ty: &str,
    status: bool,
    now: &str,
    reason: &str,
    message: &str,
) {
    if !st["conditions"].is_array() {
        st["conditions"] = json!([]);
    }
    let want = if status { "True" } else { "False" };
    let conds = st["conditions"].as_array_mut().expect("array");
    match conds.iter_mut().find(|c| c["type"] == ty) {
        Some(c) => {
            if c["status"] != want {
                c["status"] = json!(want);
                c["lastTransitionTime"] = json!(now);
                if let Some(m) = c.as_object_mut() {
                    m.remove("reason");
                    m.remove("message");
                }
            }
            if !reason.is_empty() {
                c["reason"] = json!(reason);
                c["message"] = json!(message);
            }
        }
        None => {
            let mut c = json!({"type": ty, "status": want, "lastProbeTime": null, "lastTransitionTime": now});
            if !reason.is_empty() {
                c["reason"] = json!(reason);
                c["message"] = json!(message);
            }
            conds.push(c);
        }
    }
    // Keep the order the real kubelet reports.
    let order = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
        "DisruptionTarget",
    ];
    conds.sort_by_key(|c| {
        order
            .iter()
            .position(|o| c["type"] == *o)
            .unwrap_or(order.len())
    });
}

pub(super) fn terminated(exit: Option<PodExit>, started: &str, finished: &str, cid: &str) -> Value {
    let (code, signal) = match exit {
        Some(PodExit { code: Some(c), .. }) => (c as i64, None),
        Some(PodExit {
            signal: Some(s), ..
        }) => (128 + s as i64, Some(s)),
        _ => (137, None),
    };
    let mut t = json!({
        "exitCode": code,
        "reason": if code == 0 { "Completed" } else { "Error" },
        "startedAt": started,
        "finishedAt": finished,
        "containerID": cid,
    });
    if let Some(s) = signal {
        t["signal"] = json!(s);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_keep_order() {
        let mut st = json!({});
        set_cond(&mut st, "PodScheduled", true, "t");
        set_cond(&mut st, "Ready", false, "t");
        set_cond(&mut st, "Initialized", true, "t");
        let types: Vec<&str> = st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Initialized", "Ready", "PodScheduled"]);
    }
}
