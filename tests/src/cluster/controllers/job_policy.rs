//! A Job's `successPolicy` and `podFailurePolicy`: which rule a Job's pods meet.

use super::indexes::parse_indexes;
use serde_json::Value;
use std::collections::BTreeSet;

/// The first `successPolicy` rule the succeeded indexes meet, by position.
pub fn success_rule_met(policy: &Value, succeeded: &BTreeSet<i64>) -> Option<usize> {
    let rules = policy["rules"].as_array()?;
    rules.iter().position(|r| {
        let subset: Option<BTreeSet<i64>> = r["succeededIndexes"].as_str().and_then(parse_indexes);
        let within = match &subset {
            Some(set) => succeeded.intersection(set).count() as i64,
            None => succeeded.len() as i64,
        };
        match (&subset, r["succeededCount"].as_i64()) {
            (Some(set), None) => set.is_subset(succeeded),
            (_, Some(n)) => within >= n,
            (None, None) => false,
        }
    })
}

/// What a `podFailurePolicy` says about a failed pod: the rule's action, its index and the
/// message the Job controller writes.
pub fn pod_failure_rule(policy: &Value, pod: &Value) -> Option<(String, usize, String)> {
    let rules = policy["rules"].as_array()?;
    let pod_name = format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or(""),
        pod["metadata"]["name"].as_str().unwrap_or("")
    );
    for (i, r) in rules.iter().enumerate() {
        let action = r["action"].as_str().unwrap_or("Count").to_string();
        if let Some(oc) = r.get("onExitCodes").filter(|v| v.is_object()) {
            let values: Vec<i64> = oc["values"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let want_in = oc["operator"] != "NotIn";
            let only = oc["containerName"].as_str();
            // The regular containers first, then the init containers, as the Job controller
            // matches them.
            let statuses: Vec<Value> = ["containerStatuses", "initContainerStatuses"]
                .iter()
                .filter_map(|k| {
                    pod.pointer(&format!("/status/{k}"))
                        .and_then(Value::as_array)
                })
                .flatten()
                .cloned()
                .collect();
            for cs in statuses {
                if only.is_some_and(|n| cs["name"] != n) {
                    continue;
                }
                let Some(code) = cs
                    .pointer("/state/terminated/exitCode")
                    .and_then(Value::as_i64)
                else {
                    continue;
                };
                if code == 0 {
                    continue;
                }
                if values.contains(&code) == want_in {
                    let msg = format!(
                        "Container {} for pod {pod_name} failed with exit code {code} matching {action} rule at index {i}",
                        cs["name"].as_str().unwrap_or("")
                    );
                    return Some((action, i, msg));
                }
            }
        }
        if let Some(pcs) = r.get("onPodConditions").and_then(Value::as_array) {
            let conds = pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for pc in pcs {
                // Defaults to True (the typed round trip of the store leaves it empty).
                let status = pc["status"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("True");
                if conds
                    .iter()
                    .any(|c| c["type"] == pc["type"] && c["status"] == status)
                {
                    let msg = format!(
                        "Pod {pod_name} has condition {} matching {action} rule at index {i}",
                        pc["type"].as_str().unwrap_or("")
                    );
                    return Some((action, i, msg));
                }
            }
        }
    }
    None
}
