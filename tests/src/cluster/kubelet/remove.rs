//! The end of a graceful deletion: the pod object goes once nothing of the pod runs.

use super::fields::s;
use crate::api::resources::PODS;
use crate::api::{DeleteOptions, Store};
use serde_json::Value;

/// Removes pod object `pod` (this very pod: same uid) once nothing of it runs any more, as the
/// kubelet ends a graceful deletion.
pub(super) fn remove_terminated(store: &Store, pod: &Value) {
    let opts = DeleteOptions {
        grace_period: Some(0),
        precondition_uid: Some(s(pod, "/metadata/uid")),
        ..Default::default()
    };
    let (ns, name) = (s(pod, "/metadata/namespace"), s(pod, "/metadata/name"));
    let _ = store.delete(&PODS, &ns, &name, &opts);
}
