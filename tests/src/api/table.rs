//! Server-side printing: `meta.k8s.io` Table responses as kubectl asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.

use super::pod_table::{summarize, PodSummary};
use super::resources::ResourceType;
use serde_json::{json, Value};

/// What each row carries in `object` (the `includeObject` parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: Option<&str>) -> IncludeObject {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

struct Col {
    name: &'static str,
    ty: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i32,
}

const fn col(
    name: &'static str,
    ty: &'static str,
    description: &'static str,
    priority: i32,
) -> Col {
    Col {
        name,
        ty,
        format: "",
        description,
        priority,
    }
}

const NAME: Col = Col {
    name: "Name",
    ty: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};
const AGE: Col = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
    0,
);

fn columns(rt: &ResourceType) -> Vec<Col> {
    match (rt.group, rt.plural) {
        ("", "pods") => vec![
            NAME,
            col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
            col("Status", "string", "The aggregate status of the containers in this pod.", 0),
            col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
            AGE,
            col("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
            col("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", 1),
            col("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node.", 1),
            col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
        ],
        ("batch", "jobs") => vec![
            NAME,
            col("Status", "string", "Status of the job.", 0),
            col("Completions", "string", "The completion status of the job.", 0),
            col("Duration", "string", "Time required to complete the job.", 0),
            AGE,
        ],
        ("apps", "statefulsets") => vec![NAME, col("Ready", "string", "Number of the pod with ready state.", 0), AGE],
        ("apps", "deployments") => vec![
            NAME,
            col("Ready", "string", "Number of the pod with ready state.", 0),
            col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
            col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0),
            AGE,
        ],
        ("apps", "replicasets") => vec![
            NAME,
            col("Desired", "integer", "Number of desired pods.", 0),
            col("Current", "integer", "Number of actual replicas.", 0),
            col("Ready", "integer", "Number of ready replicas.", 0),
            AGE,
        ],
        ("coordination.k8s.io", "leases") => vec![NAME, col("Holder", "string", "The holder of the lease.", 0), AGE],
        // The printer columns of JobSet's CRD.
        ("jobset.x-k8s.io", "jobsets") => vec![
            NAME,
            col("TerminalState", "string", "Final state of JobSet", 0),
            col("Restarts", "string", "Number of restarts", 0),
            col("Completed", "string", "", 0),
            col("Suspended", "string", "JobSet suspended", 0),
            col("Age", "date", "Time this JobSet was created", 0),
        ],
        ("", "secrets") => vec![
            NAME,
            col("Type", "string", "The type of the secret.", 0),
            col("Data", "string", "The number of keys in the secret.", 0),
            AGE,
        ],
        ("", "namespaces") => vec![NAME, col("Status", "string", "The status of the namespace.", 0), AGE],
        ("", "configmaps") => vec![NAME, col("Data", "string", "The number of keys in the config map.", 0), AGE],
        ("", "nodes") => vec![NAME, col("Status", "string", "The status of the node.", 0), AGE],
        ("networking.k8s.io", "networkpolicies") => {
            vec![NAME, col("Pod-Selector", "string", "Selects the pods the policy applies to.", 0), AGE]
        }
        _ => vec![NAME, AGE],
    }
}

/// A short age like kubectl shows: "5s", "3m2s", "17m", "4h5m", "3d", "2y40d".
pub fn human_age(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if d < 2 {
        format!("{h}h")
    } else if d < 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        let y = d / 365;
        if d % 365 == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{}y", d / 365)
    }
}

fn parse_time(v: Option<&Value>) -> Option<i64> {
    let s = v?.as_str()?;
    let ts: k8s_openapi::jiff::Timestamp = s.parse().ok()?;
    Some(ts.as_second())
}

fn age(obj: &Value, now: i64) -> String {
    match parse_time(obj.pointer("/metadata/creationTimestamp")) {
        Some(t) => human_age(now - t),
        None => "<unknown>".into(),
    }
}

fn none_if_empty(s: Option<&str>) -> Value {
    json!(s.filter(|s| !s.is_empty()).unwrap_or("<none>"))
}

/// The STATUS column of a pod, as kubectl shows it.
pub fn pod_status_reason(pod: &Value) -> String {
    summarize(pod).status
}

fn cells(rt: &ResourceType, obj: &Value, now: i64) -> Vec<Value> {
    if let Some(info) = rt.crd {
        return super::crd::cells(&info.columns(), obj, now, human_age);
    }
    let name = json!(obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or(""));
    match (rt.group, rt.plural) {
        ("", "pods") => pod_cells(obj, name, now),
        ("batch", "jobs") => job_cells(obj, name, now),
        ("jobset.x-k8s.io", "jobsets") => {
            let text = |p: &str| match obj.pointer(p) {
                None | Some(Value::Null) => json!(""),
                Some(Value::String(s)) => json!(s),
                Some(v) => json!(v.to_string()),
            };
            let completed = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|c| c["type"] == "Completed"))
                .map(|c| c["status"].clone())
                .unwrap_or(json!(""));
            vec![
                name,
                text("/status/terminalState"),
                text("/status/restarts"),
                completed,
                text("/spec/suspend"),
                json!(age(obj, now)),
            ]
        }
        ("apps", "statefulsets") => {
            let ready = obj
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = obj
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            vec![name, json!(format!("{ready}/{want}")), json!(age(obj, now))]
        }
        ("apps", "deployments" | "replicasets") => {
            let n = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
            let want = obj
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            if rt.plural == "replicasets" {
                let (cur, ready) = (n("/status/replicas"), n("/status/readyReplicas"));
                return vec![
                    name,
                    json!(want),
                    json!(cur),
                    json!(ready),
                    json!(age(obj, now)),
                ];
            }
            let ready = n("/status/readyReplicas");
            vec![
                name,
                json!(format!("{ready}/{want}")),
                json!(n("/status/updatedReplicas")),
                json!(n("/status/availableReplicas")),
                json!(age(obj, now)),
            ]
        }
        ("coordination.k8s.io", "leases") => {
            let holder = obj.pointer("/spec/holderIdentity").and_then(Value::as_str);
            vec![name, none_if_empty(holder), json!(age(obj, now))]
        }
        ("", "secrets") => {
            let n = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            vec![
                name,
                obj.get("type").cloned().unwrap_or(json!("Opaque")),
                json!(n),
                json!(age(obj, now)),
            ]
        }
        ("", "namespaces") => {
            vec![
                name,
                obj.pointer("/status/phase")
                    .cloned()
                    .unwrap_or(json!("Active")),
                json!(age(obj, now)),
            ]
        }
        ("", "configmaps") => {
            let n = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + obj
                    .get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            vec![name, json!(n), json!(age(obj, now))]
        }
        ("", "nodes") => {
            let ready = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|c| c["type"] == "Ready"))
                .map(|c| c["status"] == "True")
                .unwrap_or(false);
            vec![
                name,
                json!(if ready { "Ready" } else { "NotReady" }),
                json!(age(obj, now)),
            ]
        }
        ("networking.k8s.io", "networkpolicies") => {
            vec![
                name,
                json!(label_selector_text(obj.pointer("/spec/podSelector"))),
                json!(age(obj, now)),
            ]
        }
        _ => vec![name, json!(age(obj, now))],
    }
}

/// A pod's row: ready containers, status, restarts, age, IP, node, nominated node, gates.
fn pod_cells(obj: &Value, name: Value, now: i64) -> Vec<Value> {
    let PodSummary {
        ready,
        total,
        status,
        restarts,
    } = summarize(obj);
    let gates = obj
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    vec![
        name,
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
        json!(age(obj, now)),
        none_if_empty(obj.pointer("/status/podIP").and_then(Value::as_str)),
        none_if_empty(obj.pointer("/spec/nodeName").and_then(Value::as_str)),
        none_if_empty(
            obj.pointer("/status/nominatedNodeName")
                .and_then(Value::as_str),
        ),
        if gates == 0 {
            json!("<none>")
        } else {
            json!(format!("0/{gates}"))
        },
    ]
}

/// A Job's row: status, completions, duration, age.
fn job_cells(obj: &Value, name: Value, now: i64) -> Vec<Value> {
    let conds = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has = |t: &str| {
        conds
            .iter()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    let status = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
        "Suspended"
    } else {
        "Running"
    };
    let succeeded = obj
        .pointer("/status/succeeded")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let completions = match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => format!(
            "{succeeded}/1 of {}",
            obj.pointer("/spec/parallelism")
                .and_then(Value::as_i64)
                .unwrap_or(1)
        ),
    };
    let start = parse_time(obj.pointer("/status/startTime"));
    let end = parse_time(obj.pointer("/status/completionTime")).unwrap_or(now);
    let duration = start.map(|s| human_age(end - s)).unwrap_or_default();
    vec![
        name,
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(obj, now)),
    ]
}

/// A structured label selector as kubectl prints it ("a=b,c in (d,e)"; "<none>" when empty).
pub(crate) fn label_selector_text(sel: Option<&Value>) -> String {
    let Some(sel) = sel else {
        return "<none>".into();
    };
    let mut parts: Vec<String> = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op}"),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

/// The metadata-only form of an object (`PartialObjectMetadata`).
pub fn partial_metadata(obj: &Value, api_version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

fn row(
    rt: &ResourceType,
    obj: &Value,
    include: IncludeObject,
    table_version: &str,
    now: i64,
) -> Value {
    let mut r = json!({ "cells": cells(rt, obj, now) });
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => r["object"] = partial_metadata(obj, table_version),
        IncludeObject::Object => r["object"] = obj.clone(),
    }
    r
}

/// A Table of `objs`; `list_meta` becomes its metadata (resourceVersion, continue).
pub fn table(
    rt: &ResourceType,
    objs: &[&Value],
    include: IncludeObject,
    table_version: &str,
    list_meta: Value,
) -> Value {
    let now = super::defaults::now_secs();
    let defs: Vec<Value> = match rt.crd {
        Some(info) => super::crd::column_definitions(&info.columns()),
        None => columns(rt)
            .iter()
            .map(|c| json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority}))
            .collect(),
    };
    json!({
        "kind": "Table",
        "apiVersion": table_version,
        "metadata": list_meta,
        "columnDefinitions": defs,
        "rows": objs.iter().map(|o| row(rt, o, include, table_version, now)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(185), "3m5s");
        assert_eq!(human_age(60 * 17), "17m");
        assert_eq!(human_age(3600 * 4 + 300), "4h5m");
        assert_eq!(human_age(86400 * 3), "3d");
    }

    #[test]
    fn pod_row() {
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n"},
            "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {}}}]}
        });
        let t = table(
            &super::super::resources::PODS,
            &[&pod],
            IncludeObject::Metadata,
            "meta.k8s.io/v1",
            json!({}),
        );
        let c = &t["rows"][0]["cells"];
        assert_eq!(c[0], "p");
        assert_eq!(c[1], "1/1");
        assert_eq!(c[2], "Running");
        assert_eq!(c[5], "10.0.0.5");
        assert_eq!(t["columnDefinitions"][5]["priority"], 1);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
