//! The defaults of Deployments and ReplicaSets (`apps/v1`), as the API server fills them.

use super::defaults::{set_default, template_defaults};
use super::resources::ResourceType;
use serde_json::{json, Value};

pub(super) fn defaults(rt: &ResourceType, obj: &mut Value) {
    set_default(obj, "/spec/replicas", json!(1));
    if rt.plural == "deployments" {
        set_default(
            obj,
            "/spec/strategy",
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
        );
        set_default(obj, "/spec/revisionHistoryLimit", json!(10));
        set_default(obj, "/spec/progressDeadlineSeconds", json!(600));
    }
    template_defaults(obj);
}
