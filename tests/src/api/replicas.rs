//! The defaults of Deployments and ReplicaSets (`apps/v1`), as the API server fills them
//! (their pod templates get a pod's, see [`super::defaults`]).

use serde_json::{json, Value};

/// (JSON pointer, value) of each default of `plural` ("deployments" or "replicasets").
pub(super) fn defaults(plural: &str) -> Vec<(&'static str, Value)> {
    let mut out = vec![("/spec/replicas", json!(1))];
    if plural == "deployments" {
        out.extend([
            (
                "/spec/strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
            ),
            ("/spec/revisionHistoryLimit", json!(10)),
            ("/spec/progressDeadlineSeconds", json!(600)),
        ]);
    }
    out
}
