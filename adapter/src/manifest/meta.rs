//! The names and metadata of the objects: every object is named after the job and carries its
//! labels.

use serde_json::{json, Value};

use super::plan::JobPlan;
use super::plan::Kind;

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
pub(super) fn own_labels(p: &JobPlan) -> Value {
    json!({"app.kubernetes.io/name": "prrte-k8s", "app.kubernetes.io/instance": p.name})
}

/// The metadata of an object: its name, the job's labels, the namespace if given.
pub(super) fn meta(p: &JobPlan, name: &str) -> Value {
    let mut m = json!({"name": name, "labels": own_labels(p)});
    if let Some(ns) = &p.namespace {
        m["namespace"] = json!(ns);
    }
    m
}

/// The label every pod of the job carries with the job's name, set by the manifest alone (no
/// controller or chart puts it on other pods): what the StatefulSet and the NetworkPolicy
/// select. Not `app.kubernetes.io/instance`, which Helm puts on every pod of a release.
pub const JOB_LABEL: &str = "prrte-k8s.io/job";

/// The annotation of an elastic job's workload object: the most pods it may grow to (what
/// `prrte-k8s grow` reads; absent: the job does not grow).
pub const MAX_PODS_ANNOTATION: &str = "prrte-k8s.io/max-pods";

/// Kueue's annotation of a Job that may change its parallelism while admitted.
pub const KUEUE_ELASTIC_ANNOTATION: &str = "kueue.x-k8s.io/elastic-job";

/// [`JOB_LABEL`] and its value.
pub(super) fn job_label(p: &JobPlan) -> (&'static str, String) {
    (JOB_LABEL, p.name.clone())
}

/// The label the workload's controller puts on its pods, which discovery infers the job's pods
/// from (the pod template carries it as well), if the kind has one.
pub(super) fn workload_label(p: &JobPlan) -> Option<(&'static str, String)> {
    match p.kind {
        Kind::Job => Some(("batch.kubernetes.io/job-name", p.name.clone())),
        Kind::Statefulset => None,
        Kind::Jobset => Some(("jobset.sigs.k8s.io/jobset-name", p.name.clone())),
    }
}
