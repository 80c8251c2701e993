//! Validation of objects on create and update, in the spirit of the real server's registry
//! strategies: names, labels, pod specs and the per-resource rules.
use super::resources::ResourceType;
use super::selector::{check_label_key, check_label_value, LabelSelector};
use super::status::ApiError;
use serde_json::{json, Value};

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Checks an object name for a resource type; returns the message of the failure.
pub fn check_name(rt: &ResourceType, name: &str) -> Result<(), String> {
    let ok = match rt.plural {
        "namespaces" | "services" => is_dns_label(name),
        // RBAC objects accept path-segment names (e.g. "system:controller:foo").
        "roles" | "rolebindings" | "clusterroles" | "clusterrolebindings" => {
            !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains('/')
                && !name.contains('%')
        }
        _ => is_dns_subdomain(name),
    };
    if ok {
        Ok(())
    } else if matches!(rt.plural, "namespaces" | "services") {
        Err(format!("Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', start and end with an alphanumeric character, and be at most 63 characters"))
    } else {
        Err(format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"))
    }
}

fn check_labels(obj: &Value, causes: &mut Vec<(String, String)>) {
    for (field, ptr) in [
        ("metadata.labels", "/metadata/labels"),
        ("metadata.annotations", "/metadata/annotations"),
    ] {
        if let Some(m) = obj.pointer(ptr).and_then(Value::as_object) {
            for (k, v) in m {
                if let Err(e) = check_label_key(k) {
                    causes.push((field.to_string(), e));
                }
                if field == "metadata.labels" {
                    match v.as_str() {
                        Some(s) => {
                            if let Err(e) = check_label_value(s) {
                                causes.push((format!("{field}[{k}]"), e));
                            }
                        }
                        None => causes.push((
                            format!("{field}[{k}]"),
                            "label values must be strings".into(),
                        )),
                    }
                }
            }
        }
    }
}

fn check_pod_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<(String, String)>) {
    let Some(spec) = spec else {
        causes.push((path.into(), "Required value".into()));
        return;
    };
    if spec
        .get("containers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        causes.push((format!("{path}.containers"), "Required value".into()));
    }
    // Names are unique among the init containers and the containers together.
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        let cs = spec.get(list).and_then(Value::as_array);
        for (i, c) in cs.into_iter().flatten().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            check_container(c, &at, &mut seen, causes);
            if list == "initContainers" {
                if let Some(rp) = c.get("restartPolicy").and_then(Value::as_str) {
                    if rp != "Always" {
                        causes.push((
                            format!("{at}.restartPolicy"),
                            format!("Unsupported value: {rp:?}: supported values: \"Always\""),
                        ));
                    }
                }
            }
        }
    }
    // As Kubernetes' ValidatePodSpec: the node selector's keys and values are labels'.
    if let Some(m) = spec.get("nodeSelector").and_then(Value::as_object) {
        let at = format!("{path}.nodeSelector");
        for (k, v) in m {
            if let Err(e) = check_label_key(k) {
                causes.push((at.clone(), e));
            }
            match v.as_str().map(check_label_value) {
                Some(Ok(())) => {}
                Some(Err(e)) => causes.push((format!("{at}[{k}]"), e)),
                None => causes.push((format!("{at}[{k}]"), "values must be strings".into())),
            }
        }
    }
    if let Some(rp) = spec.get("restartPolicy").and_then(Value::as_str) {
        if !["Always", "OnFailure", "Never"].contains(&rp) {
            causes.push((
                format!("{path}.restartPolicy"),
                format!("Unsupported value: {rp:?}: supported values: \"Always\", \"OnFailure\", \"Never\""),
            ));
        }
    }
}

/// A container's name: required, a DNS label, not used by another container of the pod.
fn check_container(
    c: &Value,
    at: &str,
    seen: &mut std::collections::HashSet<String>,
    causes: &mut Vec<(String, String)>,
) {
    match c.get("name").and_then(Value::as_str) {
        None | Some("") => causes.push((format!("{at}.name"), "Required value".into())),
        Some(n) if !is_dns_label(n) => causes.push((
            format!("{at}.name"),
            format!("Invalid value: {n:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
        )),
        Some(n) => {
            if !seen.insert(n.to_string()) {
                causes.push((format!("{at}.name"), format!("Duplicate value: {n:?}")));
            }
        }
    }
}

/// Validates an object about to be stored; `old` is the stored object on update.
pub fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut causes = crate::api::admission::validate(rt, obj);
    check_labels(obj, &mut causes);
    match (rt.group, rt.plural) {
        ("", "pods") => check_pod(obj, old, &mut causes),
        ("batch", "jobs") => {
            check_job(obj, &mut causes);
            if let Some(old) = old {
                check_job_update(obj, old, &mut causes);
            }
        }
        ("apps", "statefulsets" | "deployments" | "replicasets") => {
            check_statefulset(obj, &mut causes)
        }
        ("rbac.authorization.k8s.io", "rolebindings")
        | ("rbac.authorization.k8s.io", "clusterrolebindings") => {
            check_binding(rt, obj, old, &mut causes)
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(rt, name, &causes))
    }
}

/// The checks of a pod: its spec; an update changes only images.
fn check_pod(obj: &Value, old: Option<&Value>, causes: &mut Vec<(String, String)>) {
    check_pod_spec(obj.get("spec"), "spec", causes);
    if let Some(old) = old {
        if old.pointer("/spec/containers") != obj.pointer("/spec/containers")
            && strip_images(old.pointer("/spec/containers"))
                != strip_images(obj.pointer("/spec/containers"))
        {
            causes.push(("spec".into(), "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`".into()));
        }
    }
}

/// The checks of a Job: its template, restart policy, counts, Indexed completions, selector.
fn check_job(obj: &Value, causes: &mut Vec<(String, String)>) {
    check_pod_spec(
        obj.pointer("/spec/template/spec"),
        "spec.template.spec",
        causes,
    );
    match obj
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
    {
        Some("Never") | Some("OnFailure") => {}
        other => causes.push((
            "spec.template.spec.restartPolicy".into(),
            format!(
                "Unsupported value: {:?}: supported values: \"OnFailure\", \"Never\"",
                other.unwrap_or("Always")
            ),
        )),
    }
    if obj.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed")
        && obj.pointer("/spec/completions").is_none_or(Value::is_null)
    {
        causes.push((
            "spec.completions".into(),
            "Required value: when completion mode is Indexed".into(),
        ));
    }
    for f in ["parallelism", "completions", "backoffLimit"] {
        if obj
            .pointer(&format!("/spec/{f}"))
            .and_then(Value::as_i64)
            .is_some_and(|n| n < 0)
        {
            causes.push((
                format!("spec.{f}"),
                "Invalid value: must be greater than or equal to 0".into(),
            ));
        }
    }
    check_selector_matches(obj, causes);
}

/// What a Job update may change in its counts: `completions` is immutable, but for an
/// Indexed Job whose new `completions` equals its `parallelism` (an elastic Indexed Job, so
/// both change in tandem).
fn check_job_update(obj: &Value, old: &Value, causes: &mut Vec<(String, String)>) {
    let (new_c, old_c) = (
        obj.pointer("/spec/completions"),
        old.pointer("/spec/completions"),
    );
    if new_c == old_c {
        return;
    }
    let shown = new_c.map_or("null".to_string(), Value::to_string);
    let indexed = obj.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    if !indexed {
        causes.push((
            "spec.completions".into(),
            format!("Invalid value: {shown}: field is immutable"),
        ));
    } else if new_c.is_some_and(|c| !c.is_null()) && new_c != obj.pointer("/spec/parallelism") {
        causes.push((
            "spec.completions".into(),
            format!("Invalid value: {shown}: can only be modified in tandem with spec.parallelism"),
        ));
    }
}

/// The checks of a StatefulSet: its template, selector, restart policy, replicas.
fn check_statefulset(obj: &Value, causes: &mut Vec<(String, String)>) {
    check_pod_spec(
        obj.pointer("/spec/template/spec"),
        "spec.template.spec",
        causes,
    );
    if obj.pointer("/spec/selector").is_none() {
        causes.push(("spec.selector".into(), "Required value".into()));
    } else {
        check_selector_matches(obj, causes);
    }
    if let Some(rp) = obj
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
    {
        if rp != "Always" {
            causes.push((
                "spec.template.spec.restartPolicy".into(),
                format!("Unsupported value: {rp:?}: supported values: \"Always\""),
            ));
        }
    }
    if obj
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .is_some_and(|n| n < 0)
    {
        causes.push((
            "spec.replicas".into(),
            "Invalid value: must be greater than or equal to 0".into(),
        ));
    }
}

/// The checks of a RoleBinding or ClusterRoleBinding: its roleRef, which never changes.
fn check_binding(
    rt: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
    causes: &mut Vec<(String, String)>,
) {
    let kind = obj
        .pointer("/roleRef/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let ok = if rt.plural == "rolebindings" {
        ["Role", "ClusterRole"].contains(&kind)
    } else {
        kind == "ClusterRole"
    };
    if !ok {
        causes.push((
            "roleRef.kind".into(),
            format!("Unsupported value: {kind:?}"),
        ));
    }
    if let Some(old) = old {
        if old.get("roleRef") != obj.get("roleRef") {
            causes.push((
                "roleRef".into(),
                "Invalid value: cannot change roleRef".into(),
            ));
        }
    }
}

fn strip_images(cs: Option<&Value>) -> Option<Value> {
    let mut cs = cs.cloned()?;
    if let Some(a) = cs.as_array_mut() {
        for c in a {
            if let Some(m) = c.as_object_mut() {
                m.remove("image");
            }
        }
    }
    Some(cs)
}

fn check_selector_matches(obj: &Value, causes: &mut Vec<(String, String)>) {
    if let Some(sel) = obj.pointer("/spec/selector") {
        match LabelSelector::from_object(sel) {
            Ok(s) => {
                let tmpl = json!({"metadata": {"labels": obj.pointer("/spec/template/metadata/labels").cloned().unwrap_or(json!({}))}});
                if s.is_empty() {
                    causes.push((
                        "spec.selector".into(),
                        "Invalid value: empty selector is invalid for deployment".into(),
                    ));
                } else if !s.matches(&tmpl) {
                    causes.push((
                        "spec.template.metadata.labels".into(),
                        "Invalid value: `selector` does not match template `labels`".into(),
                    ));
                }
            }
            Err(e) => causes.push(("spec.selector".into(), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let p = &super::super::resources::PODS;
        assert!(check_name(p, "a-b.c").is_ok());
        assert!(check_name(p, "A").is_err());
        assert!(check_name(p, "").is_err());
        assert!(check_name(&super::super::resources::NAMESPACES, "a.b").is_err());
    }

    /// A node selector's keys and values are labels' (Kubernetes answers 422 otherwise).
    #[test]
    fn a_node_selector_is_labels() {
        let job = |sel: serde_json::Value| {
            serde_json::json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
                "restartPolicy": "Never", "nodeSelector": sel,
                "containers": [{"name": "c", "image": "i"}]}}}})
        };
        let rt = &super::super::resources::JOBS;
        assert!(validate(
            rt,
            &job(serde_json::json!({"kubernetes.io/os": "linux"})),
            None
        )
        .is_ok());
        let e = validate(rt, &job(serde_json::json!({"bad key!": "x"})), None).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("spec.template.spec.nodeSelector: invalid label key \"bad key!\""),
            "{}",
            e.message
        );
        let e = validate(rt, &job(serde_json::json!({"k": "not a value"})), None).unwrap_err();
        assert!(
            e.message.contains("spec.template.spec.nodeSelector[k]"),
            "{}",
            e.message
        );
    }
}
