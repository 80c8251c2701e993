//! `events.k8s.io/v1` Events: the same objects as `core/v1` Events, converted field by field
//! as the API server converts them (`regarding` is `involvedObject`, `note` is `message`,
//! `reportingController` is `reportingComponent`, `deprecatedSource`/`deprecatedCount`/
//! `deprecated{First,Last}Timestamp` are `source`/`count`/`{first,last}Timestamp`). An
//! event recorded through either API shows in both, so `kubectl describe` lists the events a
//! controller records with kube-runtime's `Recorder`.

use serde_json::{json, Map, Value};

/// (events.k8s.io/v1 field, core/v1 field) of the fields named differently.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedCount", "count"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
];

/// The fields both versions have under one name.
const SAME: &[&str] = &[
    "metadata",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingInstance",
];

fn copy(from: &Map<String, Value>, pairs: &[(&str, &str)]) -> Map<String, Value> {
    let mut out = Map::new();
    for (a, b) in pairs {
        if let Some(v) = from.get(*a).filter(|v| !v.is_null()) {
            out.insert(b.to_string(), v.clone());
        }
    }
    out
}

fn same_pairs() -> Vec<(&'static str, &'static str)> {
    SAME.iter().map(|f| (*f, *f)).collect()
}

/// An events.k8s.io/v1 Event as a core/v1 one; what the API server requires of a new one
/// (eventTime, reportingController, reportingInstance, action, reason, a type of Normal or
/// Warning) is checked.
pub fn to_storage(v: Value) -> Result<Value, Vec<(String, String)>> {
    let m = v.as_object().cloned().unwrap_or_default();
    let mut causes = Vec::new();
    for f in [
        "eventTime",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if m.get(f).is_none_or(|x| x.is_null() || x == "") {
            causes.push((f.to_string(), "Required value".to_string()));
        }
    }
    match m.get("type").and_then(Value::as_str) {
        Some("Normal" | "Warning") => {}
        other => causes.push((
            "type".into(),
            format!(
                "Unsupported value: {:?}: supported values: \"Normal\", \"Warning\"",
                other.unwrap_or("")
            ),
        )),
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    let mut out = copy(&m, &same_pairs());
    out.extend(copy(&m, RENAMED));
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    Ok(Value::Object(out))
}

/// A core/v1 Event as events.k8s.io/v1 shows it; one recorded without `eventTime` (through
/// the core API) shows its first timestamp there.
pub fn from_storage(v: Value) -> Value {
    let m = v.as_object().cloned().unwrap_or_default();
    let back: Vec<(&str, &str)> = RENAMED.iter().map(|(a, b)| (*b, *a)).collect();
    let mut out = copy(&m, &same_pairs());
    out.extend(copy(&m, &back));
    if out.get("eventTime").is_none_or(Value::is_null) {
        let t = ["firstTimestamp", "lastTimestamp"]
            .iter()
            .find_map(|f| m.get(*f).and_then(Value::as_str))
            .or_else(|| {
                v.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
            });
        if let Some(t) = t {
            let micro = t.strip_suffix('Z').map_or(t.to_string(), |s| {
                if s.contains('.') {
                    format!("{s}Z")
                } else {
                    format!("{s}.000000Z")
                }
            });
            out.insert("eventTime".into(), json!(micro));
        }
    }
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// A field selector on events.k8s.io/v1 Events as one on core/v1 Events.
pub fn fields(sel: &str) -> String {
    sel.split(',')
        .map(|term| {
            let mut t = term.trim().to_string();
            for (a, b) in RENAMED {
                if let Some(rest) = t.strip_prefix(a) {
                    if rest.starts_with(['.', '=', '!']) {
                        t = format!("{b}{rest}");
                        break;
                    }
                }
            }
            t
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "pi.1", "namespace": "default"},
            "eventTime": "2026-01-02T03:04:05.000000Z",
            "reportingController": "prrte-k8s.io/controller",
            "reportingInstance": "controller-0",
            "action": "Reconcile", "reason": "Created", "type": "Normal",
            "note": "created the launcher",
            "regarding": {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "namespace": "default", "uid": "u-1"},
            "series": {"count": 2, "lastObservedTime": "2026-01-02T03:04:06.000000Z"},
        })
    }

    /// Written through events.k8s.io/v1, stored as core/v1 and shown back unchanged.
    #[test]
    fn converts_both_ways() {
        let core = to_storage(v1_event()).unwrap();
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["kind"], "MPIJob");
        assert_eq!(core["message"], "created the launcher");
        assert_eq!(core["reportingComponent"], "prrte-k8s.io/controller");
        assert!(core.get("note").is_none() && core.get("regarding").is_none());
        assert_eq!(from_storage(core), v1_event());
    }

    /// A core event without eventTime gets one; a v1 event missing what is required is refused
    /// naming each field.
    #[test]
    fn core_events_show_and_bad_ones_are_refused() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Pulled", "message": "m",
            "firstTimestamp": "2026-01-02T03:04:05Z", "count": 3, "source": {"component": "kubelet"}});
        let v1 = from_storage(core);
        assert_eq!(v1["eventTime"], "2026-01-02T03:04:05.000000Z");
        assert_eq!(v1["regarding"]["name"], "p");
        assert_eq!(v1["deprecatedCount"], 3);
        assert_eq!(v1["deprecatedSource"]["component"], "kubelet");
        let mut bad = v1_event();
        bad.as_object_mut().unwrap().remove("reportingController");
        bad["type"] = json!("Info");
        let causes = to_storage(bad).unwrap_err();
        let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["reportingController", "type"]);
    }

    #[test]
    fn field_selectors_are_translated() {
        assert_eq!(
            fields("regarding.name=pi,regarding.kind=MPIJob,type=Warning,reportingController!=x"),
            "involvedObject.name=pi,involvedObject.kind=MPIJob,type=Warning,reportingComponent!=x"
        );
    }
}
