//! The end of a graceful deletion: the pod object goes once nothing of the pod runs.

use super::fields::s;
use crate::api::resources::PODS;
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};

/// Removes pod object `pod` (this very pod: same uid) once nothing of it runs any more, as the
/// kubelet ends a graceful deletion.
/// A pod that never reached a terminal phase (deleted before its containers ran, or while the
/// node prepared it) ends `Failed`, as the kubelet reports every pod it stops, so that its
/// controller, holding it by a finalizer, sees how it ended.
pub(super) fn remove_terminated(store: &Store, pod: &Value) {
    let uid = s(pod, "/metadata/uid");
    let (ns, name) = (s(pod, "/metadata/namespace"), s(pod, "/metadata/name"));
    let _ = store.modify(&PODS, &ns, &name, Part::Status, |v| {
        if s(v, "/metadata/uid") != uid
            || matches!(s(v, "/status/phase").as_str(), "Succeeded" | "Failed")
        {
            return;
        }
        if !v["status"].is_object() {
            v["status"] = json!({});
        }
        v["status"]["phase"] = json!("Failed");
    });
    let opts = DeleteOptions {
        grace_period: Some(0),
        precondition_uid: Some(uid),
        ..Default::default()
    };
    let _ = store.delete(&PODS, &ns, &name, &opts);
}
