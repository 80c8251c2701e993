//! The container environment's pieces: downward-API fields, resource fields, `$(VAR)`
//! expansion.

use serde_json::Value;

/// The value of a downward-API field of a pod.
pub fn field_ref(pod: &Value, path: &str) -> Option<String> {
    let bracket = |prefix: &str| -> Option<String> {
        let rest = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(rest.to_string())
    };
    if let Some(k) = bracket("metadata.labels") {
        return Some(
            pod["metadata"]["labels"][&k]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
    }
    if let Some(k) = bracket("metadata.annotations") {
        return Some(
            pod["metadata"]["annotations"][&k]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
    }
    let v = match path {
        "metadata.name" => pod.pointer("/metadata/name"),
        "metadata.namespace" => pod.pointer("/metadata/namespace"),
        "metadata.uid" => pod.pointer("/metadata/uid"),
        "spec.nodeName" => pod.pointer("/spec/nodeName"),
        "spec.serviceAccountName" => pod.pointer("/spec/serviceAccountName"),
        "status.hostIP" | "status.hostIPs" => pod.pointer("/status/hostIP"),
        "status.podIP" | "status.podIPs" => pod.pointer("/status/podIP"),
        _ => return None,
    };
    v.and_then(Value::as_str).map(String::from)
}

pub(super) fn resource_field(c: &Value, r: &Value) -> String {
    let res = r["resource"].as_str().unwrap_or("");
    let (kind, name) = res.split_once('.').unwrap_or(("limits", res));
    let q = c["resources"][kind][name]
        .as_str()
        .map(String::from)
        .or_else(|| c["resources"]["limits"][name].as_str().map(String::from));
    match (name, q) {
        ("cpu", Some(q)) => {
            let milli = if let Some(m) = q.strip_suffix('m') {
                m.parse::<f64>().unwrap_or(0.0)
            } else {
                q.parse::<f64>().unwrap_or(0.0) * 1000.0
            };
            ((milli / 1000.0).ceil() as i64).max(1).to_string()
        }
        ("cpu", None) => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .to_string(),
        (_, Some(q)) => q,
        (_, None) => "0".into(),
    }
}

/// `$(VAR)` expansion as the kubelet does for env values, command and args.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'(' {
                if let Some(end) = s[i + 2..].find(')') {
                    let name = &s[i + 2..i + 2 + end];
                    if let Some((_, v)) = env.iter().rev().find(|(k, _)| k == name) {
                        out.push_str(v);
                        i += end + 3;
                        continue;
                    }
                }
            }
        }
        let ch = s[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expansion() {
        let env = vec![
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "x".to_string()),
        ];
        assert_eq!(expand("$(A)-$(B)-$(C)-$$(A)", &env), "1-x-$(C)-$(A)");
    }

    #[test]
    fn field_refs() {
        let pod = json!({"metadata": {"name": "p", "namespace": "n", "labels": {"a": "b"}, "annotations": {"batch.kubernetes.io/job-completion-index": "3"}}, "status": {"podIP": "10.0.0.2"}});
        assert_eq!(field_ref(&pod, "metadata.name").as_deref(), Some("p"));
        assert_eq!(
            field_ref(&pod, "metadata.labels['a']").as_deref(),
            Some("b")
        );
        assert_eq!(
            field_ref(
                &pod,
                "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            )
            .as_deref(),
            Some("3")
        );
        assert_eq!(field_ref(&pod, "status.podIP").as_deref(), Some("10.0.0.2"));
        assert_eq!(field_ref(&pod, "spec.bogus"), None);
    }
}
