//! The StatefulSet (interactive only: its pods are restarted when they exit).

use serde_json::{json, Value};

use super::job::workload_meta;
use super::meta::job_label;
use super::plan::JobPlan;
use super::pod::pod_template;

/// The StatefulSet object: every pod at once, none restarted into a batch command.
pub(super) fn statefulset(a: &JobPlan) -> Value {
    let (lk, lv) = job_label(a);
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": workload_meta(a), "spec": {
        "replicas": a.pods,
        "serviceName": a.name,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {lk: lv}},
        "template": pod_template(a, false),
    }})
}
