//! Policy evaluation: which policies select a pod, and the sources and ports their ingress
//! rules admit.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Whether `labels` match a structured LabelSelector (`matchLabels`, `matchExpressions`); the
/// empty selector matches everything.
pub fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(m) = sel["matchLabels"].as_object() {
        if !m.iter().all(|(k, v)| label(k) == v.as_str()) {
            return false;
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let ok = match e["operator"].as_str().unwrap_or("") {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

fn ns_labels(ns: &str, namespaces: &[Value]) -> Value {
    let mut labels = namespaces
        .iter()
        .find(|n| n["metadata"]["name"] == ns)
        .and_then(|n| n["metadata"]["labels"].as_object().cloned())
        .unwrap_or_default();
    labels.insert(
        "kubernetes.io/metadata.name".into(),
        Value::String(ns.to_string()),
    );
    Value::Object(labels)
}

/// Where a pod's traffic may come from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Source {
    Ip(String),
    Block(String, Vec<String>),
}

/// A set of destination ports of one protocol (None: every port).
pub(super) type Ports = BTreeMap<String, Option<BTreeSet<(u32, u32)>>>;

pub(super) fn pod_ip(p: &Value) -> Option<&str> {
    let live = !matches!(
        p["status"]["phase"].as_str(),
        Some("Succeeded") | Some("Failed")
    );
    p["status"]["podIP"]
        .as_str()
        .filter(|ip| live && !ip.is_empty())
}

pub(super) fn ns_of(v: &Value) -> &str {
    v["metadata"]["namespace"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

pub(super) fn policy_types(pol: &Value) -> Vec<String> {
    match pol["spec"]["policyTypes"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        _ => {
            let mut v = vec!["Ingress".to_string()];
            if pol["spec"].get("egress").is_some_and(|e| !e.is_null()) {
                v.push("Egress".into());
            }
            v
        }
    }
}

/// The sources an ingress rule admits (None: any source).
pub(super) fn rule_sources(
    pol_ns: &str,
    rule: &Value,
    pods: &[Value],
    namespaces: &[Value],
) -> Option<BTreeSet<Source>> {
    let from = rule["from"].as_array().filter(|a| !a.is_empty())?;
    let mut out = BTreeSet::new();
    for peer in from {
        if let Some(b) = peer.get("ipBlock").filter(|b| !b.is_null()) {
            let except = b["except"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect();
            out.insert(Source::Block(
                b["cidr"].as_str().unwrap_or("").to_string(),
                except,
            ));
            continue;
        }
        let pod_sel = peer.get("podSelector").filter(|s| !s.is_null());
        let ns_sel = peer.get("namespaceSelector").filter(|s| !s.is_null());
        for p in pods {
            let Some(ip) = pod_ip(p) else { continue };
            let ns = ns_of(p);
            let ns_ok = match ns_sel {
                Some(sel) => selector_matches(sel, &ns_labels(ns, namespaces)),
                None => ns == pol_ns,
            };
            let pod_ok = pod_sel.is_none_or(|sel| selector_matches(sel, &p["metadata"]["labels"]));
            if ns_ok && pod_ok && (pod_sel.is_some() || ns_sel.is_some()) {
                out.insert(Source::Ip(ip.to_string()));
            }
        }
    }
    Some(out)
}

/// The ports of an ingress rule on pod `dst` (None: every port of every protocol). Named
/// ports are looked up in the destination pod's containers.
pub(super) fn rule_ports(rule: &Value, dst: &Value) -> Option<Ports> {
    let ports = rule["ports"].as_array().filter(|a| !a.is_empty())?;
    let mut out: Ports = BTreeMap::new();
    for p in ports {
        let proto = p["protocol"].as_str().unwrap_or("TCP").to_ascii_lowercase();
        let range = match &p["port"] {
            Value::Null => None,
            Value::Number(n) => {
                let start = n.as_u64().unwrap_or(0) as u32;
                let end = p["endPort"]
                    .as_u64()
                    .map(|e| e as u32)
                    .unwrap_or(start)
                    .max(start);
                Some((start, end))
            }
            Value::String(name) => match name.parse::<u32>() {
                Ok(n) => Some((n, n)),
                Err(_) => {
                    let found = dst["spec"]["containers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                        .find(|cp| {
                            cp["name"] == name.as_str()
                                && cp["protocol"]
                                    .as_str()
                                    .unwrap_or("TCP")
                                    .eq_ignore_ascii_case(&proto)
                        })
                        .and_then(|cp| cp["containerPort"].as_u64());
                    match found {
                        Some(n) => Some((n as u32, n as u32)),
                        // A name the pod does not have admits nothing here.
                        None => {
                            out.entry(proto).or_insert_with(|| Some(BTreeSet::new()));
                            continue;
                        }
                    }
                }
            },
            _ => continue,
        };
        match range {
            None => {
                out.insert(proto, None);
            }
            Some(r) => {
                if let Some(set) = out.entry(proto).or_insert_with(|| Some(BTreeSet::new())) {
                    set.insert(r);
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors() {
        let labels = json!({"a": "1", "b": "2"});
        assert!(selector_matches(&json!({}), &labels));
        assert!(selector_matches(
            &json!({"matchLabels": {"a": "1"}}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchLabels": {"a": "2"}}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "b", "operator": "In", "values": ["2", "3"]}]}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions": [{"key": "c", "operator": "Exists"}]}),
            &labels
        ));
    }
}
