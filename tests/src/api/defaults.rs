//! Per-resource defaulting and validation applied on create and update, in the spirit of
//! the real server's registry strategies.

use super::resources::ResourceType;
use super::selector::{check_label_key, check_label_value, LabelSelector};
use super::status::ApiError;
use serde_json::{json, Map, Value};

/// Current time as RFC 3339 with second precision (the wire form of `metav1.Time`).
pub fn now_rfc3339() -> String {
    rfc3339(now_secs())
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A Unix time as RFC 3339 with second precision.
pub fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A random version-4 UUID.
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    let variant = ["8", "9", "a", "b"][(b[8] >> 6) as usize];
    format!(
        "{}-{}-4{}-{}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        variant,
        &h[17..20],
        &h[20..32]
    )
}

/// Five random characters from the alphabet used for generated names.
pub fn random_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHA[rand::random::<usize>() % ALPHA.len()] as char)
        .collect()
}

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

fn set_default(obj: &mut Value, ptr: &str, v: Value) {
    if obj.pointer(ptr).is_none() {
        let (parent, key) = ptr.rsplit_once('/').expect("pointer has a parent");
        ensure_object(obj, parent);
        if let Some(m) = obj.pointer_mut(parent).and_then(Value::as_object_mut) {
            m.insert(key.to_string(), v);
        }
    }
}

/// Makes sure the value at `ptr` (and every parent) is an object.
pub fn ensure_object(obj: &mut Value, ptr: &str) {
    let mut cur = obj;
    for part in ptr.split('/').skip(1) {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let m = cur.as_object_mut().expect("just made an object");
        cur = m
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
}

fn pod_spec_defaults(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "/restartPolicy", json!("Always"));
    set_default(spec, "/dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "/schedulerName", json!("default-scheduler"));
    set_default(spec, "/terminationGracePeriodSeconds", json!(30));
    set_default(spec, "/securityContext", json!({}));
    set_default(spec, "/enableServiceLinks", json!(true));
    if let Some(sa) = spec.get("serviceAccount").cloned() {
        set_default(spec, "/serviceAccountName", sa);
    }
    set_default(spec, "/serviceAccountName", json!("default"));
    let sa = spec["serviceAccountName"].clone();
    set_default(spec, "/serviceAccount", sa);
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                if !c.is_object() {
                    continue;
                }
                set_default(c, "/terminationMessagePath", json!("/dev/termination-log"));
                set_default(c, "/terminationMessagePolicy", json!("File"));
                set_default(c, "/resources", json!({}));
                if let Some(image) = c.get("image").and_then(Value::as_str) {
                    let policy = crate::images::default_pull_policy(image);
                    set_default(c, "/imagePullPolicy", json!(policy));
                }
            }
        }
    }
}

fn qos_class(spec: &Value) -> &'static str {
    let cs = spec
        .get("containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !cs.is_empty();
    for c in &cs {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        if req.is_some_and(|m| !m.is_empty()) || lim.is_some_and(|m| !m.is_empty()) {
            any = true;
        }
        for r in ["cpu", "memory"] {
            let l = lim.and_then(|m| m.get(r));
            let q = req.and_then(|m| m.get(r)).or(l);
            if l.is_none() || q != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn template_defaults(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        pod_spec_defaults(spec);
    }
}

/// Fills defaults the real server would (on create and on update).
pub fn apply(rt: &ResourceType, obj: &mut Value, creating: bool) {
    match (rt.group, rt.plural) {
        ("", "pods") => pod_defaults(obj, creating),
        ("", "namespaces") => namespace_defaults(obj),
        ("", "secrets") => secret_defaults(obj),
        ("batch", "jobs") => job_defaults(obj, creating),
        ("apps", "statefulsets") => statefulset_defaults(obj, creating),
        ("apps", "deployments" | "replicasets") => {
            for (ptr, v) in super::replicas::defaults(rt.plural) {
                set_default(obj, ptr, v);
            }
            template_defaults(obj);
        }
        _ => {}
    }
}

/// The defaults of a pod: its spec's, phase Pending, the QoS class.
fn pod_defaults(obj: &mut Value, creating: bool) {
    ensure_object(obj, "/spec");
    pod_spec_defaults(&mut obj["spec"]);
    if creating || obj.pointer("/status/phase").is_none() {
        set_default(obj, "/status/phase", json!("Pending"));
    }
    let q = qos_class(&obj["spec"]);
    set_default(obj, "/status/qosClass", json!(q));
}

/// The defaults of a namespace: its name label, the kubernetes finalizer, phase Active.
fn namespace_defaults(obj: &mut Value) {
    let name = obj.pointer("/metadata/name").cloned().unwrap_or(json!(""));
    ensure_object(obj, "/metadata/labels");
    obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
    set_default(obj, "/spec/finalizers", json!(["kubernetes"]));
    set_default(obj, "/status/phase", json!("Active"));
}

/// The defaults of a Secret: type Opaque, stringData into data.
fn secret_defaults(obj: &mut Value) {
    set_default(obj, "/type", json!("Opaque"));
    if let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
        if let Some(sd) = sd.as_object() {
            ensure_object(obj, "/data");
            use base64::Engine;
            for (k, v) in sd {
                let s = v.as_str().unwrap_or_default();
                obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(s));
            }
        }
    }
}

/// The defaults of a Job: parallelism, completions, backoff limit, completion mode, its selector and template labels.
fn job_defaults(obj: &mut Value, creating: bool) {
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    ensure_object(obj, "/spec");
    let par_set = obj.pointer("/spec/parallelism").is_some();
    set_default(obj, "/spec/parallelism", json!(1));
    if !par_set {
        set_default(obj, "/spec/completions", json!(1));
    }
    set_default(obj, "/spec/backoffLimit", json!(6));
    set_default(obj, "/spec/completionMode", json!("NonIndexed"));
    set_default(obj, "/spec/suspend", json!(false));
    // As the API server: a Job with a pod failure policy replaces a pod only once it Failed.
    let replacement = if obj
        .pointer("/spec/podFailurePolicy")
        .is_some_and(|p| !p.is_null())
    {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    set_default(obj, "/spec/podReplacementPolicy", json!(replacement));
    let manual = obj
        .pointer("/spec/manualSelector")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !manual && !uid.is_empty() {
        set_default(
            obj,
            "/spec/selector",
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        ensure_object(obj, "/spec/template/metadata/labels");
        let labels = obj
            .pointer_mut("/spec/template/metadata/labels")
            .and_then(Value::as_object_mut)
            .expect("object");
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("job-name", &name),
        ] {
            labels.entry(k.to_string()).or_insert_with(|| json!(v));
        }
    }
    template_defaults(obj);
    if creating {
        set_default(obj, "/status", json!({}));
    }
}

/// The defaults of a StatefulSet: replicas, pod management, update strategy, history.
fn statefulset_defaults(obj: &mut Value, creating: bool) {
    ensure_object(obj, "/spec");
    set_default(obj, "/spec/replicas", json!(1));
    set_default(obj, "/spec/podManagementPolicy", json!("OrderedReady"));
    set_default(
        obj,
        "/spec/updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
    );
    set_default(obj, "/spec/revisionHistoryLimit", json!(10));
    template_defaults(obj);
    if creating {
        set_default(
            obj,
            "/status",
            json!({"replicas": 0, "availableReplicas": 0}),
        );
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
    let mut causes = Vec::new();
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
    fn uid_shape() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(new_uid(), u);
    }

    #[test]
    fn names() {
        let p = &super::super::resources::PODS;
        assert!(check_name(p, "a-b.c").is_ok());
        assert!(check_name(p, "A").is_err());
        assert!(check_name(p, "").is_err());
        assert!(check_name(&super::super::resources::NAMESPACES, "a.b").is_err());
    }
}
