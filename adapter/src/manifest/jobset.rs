//! The JobSet (jobset.x-k8s.io/v1alpha2) with one replicated Job.

use serde_json::{json, Value};

use super::job::{job_spec, workload_meta};
use super::plan::JobPlan;

/// The JobSet object: one replicated Job `node` (the Indexed Job's spec), restarted as a
/// whole up to `max_restarts` times when it fails.
pub(super) fn jobset(a: &JobPlan, batch: bool) -> Value {
    let mut spec = json!({
        "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job_spec(a, batch)}}],
        "successPolicy": {"operator": "All", "targetReplicatedJobs": ["node"]},
        "failurePolicy": {"maxRestarts": a.max_restarts},
    });
    if let Some(ttl) = a.ttl {
        spec["ttlSecondsAfterFinished"] = json!(ttl);
    }
    if batch {
        spec["startupPolicy"] = json!({"startupPolicyOrder": "AnyOrder"});
    }
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": workload_meta(a), "spec": spec})
}
