//! Graceful deletion, as the API server does it. A pod bound to a node whose kubelet
//! terminates pods (see [`Store::set_node_terminates_pods`]) and not yet Succeeded or Failed is
//! not removed: it gets `deletionTimestamp` (now plus its grace period) and
//! `deletionGracePeriodSeconds`, and stays until its kubelet has stopped its containers
//! (SIGTERM, SIGKILL once the grace period is over) and deletes it with grace period 0. A
//! second delete can only shorten the grace period. An object with finalizers (a Job's pod:
//! `batch.kubernetes.io/job-tracking`; the garbage collector's `foregroundDeletion` is `gc`'s)
//! stays, marked deleted, until they are removed; the update that removes the last one removes
//! it.

use super::event::EventType;
use super::gc::held_by_finalizers;
use super::object::Obj;
use super::params::DeleteOptions;
use super::state::{Inner, Store};
use crate::api::defaults::{now_secs, rfc3339};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use serde_json::{json, Value};
use std::sync::Arc;

/// A pod's grace period when none is given or set (the API's default).
const DEFAULT_GRACE: i64 = 30;

impl Store {
    /// Whether the kubelet of `node` terminates pods gracefully (`on`); pods of other nodes
    /// are deleted at once (no kubelet would ever finish their deletion).
    pub fn set_node_terminates_pods(&self, node: &str, on: bool) {
        let mut g = self.lock();
        if on {
            g.graceful_nodes.insert(node.to_string());
        } else {
            g.graceful_nodes.remove(node);
        }
    }

    /// Deletes pod `old` gracefully if it is to be: marks it terminating (or shortens its
    /// grace period) and returns it; None when it is to be removed now.
    pub(super) fn delete_pod_gracefully(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        old: &Obj,
        opts: &DeleteOptions,
    ) -> Option<Obj> {
        let grace = pod_grace(g, old, opts)?;
        let deadline = now_secs() + grace;
        let m = &old["metadata"];
        if let Some(t) = m["deletionTimestamp"].as_str() {
            let current: Option<k8s_openapi::jiff::Timestamp> = t.parse().ok();
            if current.is_some_and(|c| c.as_second() <= deadline) {
                // Already terminating as soon or sooner.
                return Some(old.clone());
            }
        }
        let mut doc = (**old).clone();
        doc["metadata"]["deletionTimestamp"] = json!(rfc3339(deadline));
        doc["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if opts.dry_run {
            return Some(Arc::new(doc));
        }
        Some(self.commit(g, rt, EventType::Modified, doc, Some(old.clone())))
    }

    /// Deletes `old`, which has finalizers (other than `foregroundDeletion`), as the API
    /// server does: it gets its `deletionTimestamp` (now) and `deletionGracePeriodSeconds` 0
    /// and stays until the last finalizer is removed (an update then removes it). None when it
    /// has no such finalizer.
    pub(super) fn hold_for_finalizers(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        old: &Obj,
    ) -> Option<Obj> {
        if !held_by_finalizers(old) {
            return None;
        }
        let m = &old["metadata"];
        if !m["deletionTimestamp"].is_null() && m["deletionGracePeriodSeconds"] == json!(0) {
            return Some(old.clone());
        }
        let mut doc = (**old).clone();
        if doc["metadata"]["deletionTimestamp"].is_null() {
            doc["metadata"]["deletionTimestamp"] = json!(rfc3339(now_secs()));
        }
        doc["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        // A pod no kubelet will stop (unscheduled, or on a node without one) and not ended is
        // marked Failed, as the pod garbage collector does, so that whoever holds it sees it
        // end.
        let phase = doc["status"]["phase"].as_str().unwrap_or("");
        let node = doc["spec"]["nodeName"].as_str().unwrap_or("");
        if rt.is("", "pods")
            && !g.graceful_nodes.contains(node)
            && !matches!(phase, "Succeeded" | "Failed")
        {
            doc["status"]["phase"] = json!("Failed");
        }
        Some(self.commit(g, rt, EventType::Modified, doc, Some(old.clone())))
    }

    /// Removes `old` from the store now (the last step of every delete).
    pub(super) fn remove_locked(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        old: &Obj,
    ) -> Result<Obj, ApiError> {
        let mut last = (**old).clone();
        if last["metadata"]["deletionTimestamp"].is_null() {
            last["metadata"]["deletionTimestamp"] = json!(rfc3339(now_secs()));
        }
        last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        let deleted = self.commit(g, rt, EventType::Deleted, last, Some(old.clone()));
        self.finish_foreground_owners(g, old);
        Ok(deleted)
    }
}

/// Whether `obj`, being deleted, waits only for finalizers and has none left: an update that
/// removed its last finalizer removes it.
pub(super) fn deletion_complete(obj: &Value) -> bool {
    let m = &obj["metadata"];
    !m["deletionTimestamp"].is_null()
        && m["deletionGracePeriodSeconds"] == json!(0)
        && m["finalizers"].as_array().is_none_or(|f| f.is_empty())
}

/// The grace period of deleting `pod` with `opts`, None when it goes at once: grace period 0,
/// not bound to a node that terminates pods, or already Succeeded or Failed.
fn pod_grace(g: &Inner, pod: &Value, opts: &DeleteOptions) -> Option<i64> {
    let grace = opts
        .grace_period
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(DEFAULT_GRACE);
    // A negative grace period means the shortest one.
    let grace = if grace < 0 { 1 } else { grace };
    let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    let graceful =
        grace > 0 && g.graceful_nodes.contains(node) && !matches!(phase, "Succeeded" | "Failed");
    graceful.then_some(grace)
}
