//! The names and metadata of the objects: every object is named after the job and carries its
//! labels.

use serde_json::{json, Value};

use super::options::{Kind, ManifestArgs};

/// The names of the objects beside the workload.
pub(super) struct Names {
    pub sa: String,
    pub role: String,
    pub secret: String,
    pub policy: String,
}

/// `<name>-prrte` for each.
pub(super) fn names(a: &ManifestArgs) -> Names {
    let base = format!("{}-prrte", a.name);
    Names {
        sa: base.clone(),
        role: base.clone(),
        secret: base.clone(),
        policy: base,
    }
}

/// The metadata of an object: its name, the job's labels, the namespace if given.
pub(super) fn meta(a: &ManifestArgs, name: &str) -> Value {
    let mut m = json!({"name": name, "labels": {"app.kubernetes.io/name": "prrte-k8s", "app.kubernetes.io/instance": a.name}});
    if let Some(ns) = &a.namespace {
        m["namespace"] = json!(ns);
    }
    m
}

/// The label every pod of the job carries, and its value (what the NetworkPolicy selects).
pub(super) fn job_label(a: &ManifestArgs) -> (&'static str, String) {
    match a.kind {
        Kind::Job => ("batch.kubernetes.io/job-name", a.name.clone()),
        Kind::Statefulset => ("app.kubernetes.io/instance", a.name.clone()),
        Kind::Jobset => ("jobset.sigs.k8s.io/jobset-name", a.name.clone()),
    }
}
