//! The Job tracking finalizer: it keeps a Job's pod until the Job controller has counted it.

use crate::api::resources::{JOBS, PODS};
use crate::api::{Part, Store};
use serde_json::Value;

/// The finalizer that keeps a Job's pod until the Job controller has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// Whether pod `p` still waits to be counted.
pub(super) fn tracked(p: &Value) -> bool {
    p.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == TRACKING_FINALIZER))
}

/// Removes the tracking finalizer from pod `p` (this very pod: same uid), if it is stored.
pub(super) fn release(store: &Store, p: &Value) {
    if !tracked(p) {
        return;
    }
    let ns = p["metadata"]["namespace"].as_str().unwrap_or("");
    let name = p["metadata"]["name"].as_str().unwrap_or("");
    let uid = p["metadata"]["uid"].clone();
    let _ = store.modify(&PODS, ns, name, Part::Main, |v| {
        if v["metadata"]["uid"] != uid {
            return;
        }
        if let Some(f) = v
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            f.retain(|x| x != TRACKING_FINALIZER);
        }
    });
}

/// Releases the tracked pods whose Job is gone (or is another Job of the same name).
pub(super) fn release_orphans(store: &Store) {
    let Ok(l) = store.list(&PODS, None, &Default::default()) else {
        return;
    };
    for p in l.items.iter().filter(|p| tracked(p)) {
        let ns = p["metadata"]["namespace"].as_str().unwrap_or("");
        let owner = p
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .find(|o| o["kind"] == "Job" && o["controller"] == true)
            });
        let alive = owner.is_some_and(|o| {
            store
                .get(&JOBS, ns, o["name"].as_str().unwrap_or(""))
                .is_ok_and(|j| j["metadata"]["uid"] == o["uid"])
        });
        if !alive {
            release(store, p);
        }
    }
}
