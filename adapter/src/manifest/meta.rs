//! The names and metadata of the objects: every object is named after the job and carries its
//! labels.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};

use super::plan::JobPlan;

/// The names of the objects beside the workload.
pub(super) struct Names {
    pub sa: String,
    pub role: String,
    pub secret: String,
    pub policy: String,
}

/// `<name>-prrte` for each.
pub(super) fn names(p: &JobPlan) -> Names {
    let base = format!("{}-prrte", p.name);
    Names {
        sa: base.clone(),
        role: base.clone(),
        secret: base.clone(),
        policy: base,
    }
}

/// The labels every object of the job carries.
pub(super) fn own_labels(p: &JobPlan) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "prrte-k8s".to_string(),
        ),
        ("app.kubernetes.io/instance".to_string(), p.name.clone()),
    ])
}

/// The metadata of an object: its name, the job's labels, the namespace if given.
pub(super) fn meta(p: &JobPlan, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(own_labels(p)),
        namespace: p.namespace.clone(),
        ..Default::default()
    }
}

/// The workload object's metadata: the job's own, plus the labels and annotations the plan
/// gives it (the job's own labels win), and an elastic job's annotations. Untyped: the plan's
/// labels and annotations are kept verbatim.
pub(super) fn workload_meta(a: &JobPlan) -> Result<Value, serde_json::Error> {
    let mut m = serde_json::to_value(meta(a, &a.name))?;
    if !a.labels.is_empty() {
        let mut labels = a.labels.clone();
        labels.extend(own_labels(a).into_iter().map(|(k, v)| (k, json!(v))));
        m["labels"] = Value::Object(labels);
    }
    let mut annotations = a.annotations.clone();
    if let Some(max) = a.max_pods {
        annotations.insert(MAX_PODS_ANNOTATION.into(), json!(max.to_string()));
        for (k, v) in a.kind.elastic_annotations() {
            annotations.insert(k.to_string(), json!(v));
        }
    }
    if !annotations.is_empty() {
        m["annotations"] = Value::Object(annotations);
    }
    Ok(m)
}

/// The label every pod of the job carries with the job's name, set by the manifest (no
/// controller or chart puts it on other pods): what the StatefulSet and the NetworkPolicy
/// select. Not `app.kubernetes.io/instance`, which Helm puts on every pod of a release. It
/// selects, it does not authenticate: anyone who may create pods in the namespace may set it
/// (the agent's key is what authenticates a peer).
pub(crate) const JOB_LABEL: &str = "prrte-k8s.io/job";

/// The annotation of an elastic job's workload object: the most pods it may grow to (what
/// `prrte-k8s grow` reads; absent: the job does not grow).
pub(crate) const MAX_PODS_ANNOTATION: &str = "prrte-k8s.io/max-pods";

/// The annotation every object `prrte-k8s manifest` prints carries (value [`RENDERED_BY_VALUE`]):
/// an object made by hand from a rendering, which the MPIJob controller never takes for its
/// own, even with an ownerReference naming an MPIJob (the controller's objects do not carry it).
pub(crate) const RENDERED_BY: &str = "prrte-k8s.io/rendered-by";

/// [`RENDERED_BY`]'s value: the command that printed the object.
pub(crate) const RENDERED_BY_VALUE: &str = "prrte-k8s-manifest";

/// The object `o` (a rendered object's JSON) marked with [`RENDERED_BY`].
pub(super) fn mark_rendered(o: &mut Value) {
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        let a = m.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = a.as_object_mut() {
            a.insert(RENDERED_BY.into(), json!(RENDERED_BY_VALUE));
        }
    }
}

/// [`JOB_LABEL`] and its value.
pub(super) fn job_label(p: &JobPlan) -> (&'static str, String) {
    (JOB_LABEL, p.name.clone())
}

/// The label the workload's controller puts on its pods, which discovery infers the job's pods
/// from (the pod template carries it as well), if the kind has one.
pub(super) fn workload_label(p: &JobPlan) -> Option<(&'static str, String)> {
    p.kind.pod_label().map(|l| (l, p.name.clone()))
}
