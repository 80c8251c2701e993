//! Per-resource defaulting applied on create and update (the values the real server fills in),
//! and the times, UIDs and generated names objects get; validation is in `validation`.

use super::resources::ResourceType;
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
        ("admissionregistration.k8s.io", _) => crate::api::admission::defaults(rt, obj),
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
}
