//! Where volume files and environment values come from: Secret and ConfigMap data, the pod's
//! downward-API fields, the container's resource fields.

use base64::Engine;
use serde_json::Value;

/// The data of a Secret (`data`: base64 values).
pub(super) fn decoded(data: &Value) -> Vec<(String, Vec<u8>)> {
    data.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        base64::engine::general_purpose::STANDARD
                            .decode(v.as_str().unwrap_or(""))
                            .unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The data of a ConfigMap (`data`: text values).
pub(super) fn config_map_data(data: &Value) -> Vec<(String, Vec<u8>)> {
    data.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").as_bytes().to_vec()))
                .collect()
        })
        .unwrap_or_default()
}

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

/// A `resourceFieldRef` of container `c` (CPUs rounded up, at least 1).
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
