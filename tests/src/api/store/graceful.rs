//! Graceful deletion, as the API server does it. A pod bound to a node whose kubelet
//! terminates pods (see [`Store::set_node_terminates_pods`]) and not yet Succeeded or Failed is
//! not removed: it gets `deletionTimestamp` (now plus its grace period) and
//! `deletionGracePeriodSeconds`, and stays until its kubelet has stopped its containers
//! (SIGTERM, SIGKILL once the grace period is over) and deletes it with grace period 0. A
//! second delete can only shorten the grace period. An owner deleted with propagation
//! Foreground stays (finalizer `foregroundDeletion`) until its dependents are gone. An object
//! with other finalizers (a Job's pod: `batch.kubernetes.io/job-tracking`) stays, marked
//! deleted, until they are removed; the update that removes the last one removes it.

use super::event::EventType;
use super::object::{meta_str, Obj};
use super::params::DeleteOptions;
use super::state::{Inner, Store};
use crate::api::defaults::{now_secs, rfc3339};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use serde_json::{json, Value};
use std::sync::Arc;

/// The finalizer of an owner waiting for its dependents (propagation Foreground).
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

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

    /// Starts the Foreground deletion of `old`, which has dependents: it gets its
    /// `deletionTimestamp` and the finalizer, its dependents are deleted, and it goes with the
    /// last of them.
    pub(super) fn delete_in_foreground(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        old: &Obj,
        uid: &str,
        opts: &DeleteOptions,
    ) -> Obj {
        let mut doc = (**old).clone();
        let m = &mut doc["metadata"];
        if m["deletionTimestamp"].is_null() {
            m["deletionTimestamp"] = json!(rfc3339(now_secs()));
            m["deletionGracePeriodSeconds"] = json!(0);
        }
        if !m["finalizers"].is_array() {
            m["finalizers"] = json!([]);
        }
        let f = m["finalizers"].as_array_mut().expect("an array");
        if !f.iter().any(|x| x == FOREGROUND_FINALIZER) {
            f.push(json!(FOREGROUND_FINALIZER));
        }
        if opts.dry_run {
            return Arc::new(doc);
        }
        let marked = self.commit(g, rt, EventType::Modified, doc, Some(old.clone()));
        self.collect_dependents(g, uid, false);
        if !has_blocking_dependents(g, uid) {
            // Nothing (left) to wait for.
            let ns = meta_str(&marked, "namespace").unwrap_or("").to_string();
            let name = meta_str(&marked, "name").unwrap_or("").to_string();
            if let Ok(cur) = g.stored(rt, &ns, &name) {
                if meta_str(&cur, "uid") == Some(uid) {
                    return self.release_foreground(g, rt, &cur).unwrap_or(cur);
                }
            }
        }
        marked
    }

    /// Ends the foreground wait of `owner`: it loses the finalizer `foregroundDeletion` and
    /// is removed, unless other finalizers still hold it.
    fn release_foreground(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        owner: &Obj,
    ) -> Option<Obj> {
        let mut doc = (**owner).clone();
        if let Some(f) = doc["metadata"]["finalizers"].as_array_mut() {
            f.retain(|x| x != FOREGROUND_FINALIZER);
        }
        if held_by_finalizers(&doc) {
            return Some(self.commit(g, rt, EventType::Modified, doc, Some(owner.clone())));
        }
        self.remove_locked(g, rt, owner).ok()
    }

    /// After `gone` was removed: each of its owners that waits for its dependents
    /// (Foreground) and has no blocking one (`blockOwnerDeletion`) left is released.
    pub(super) fn finish_foreground_owners(&self, g: &mut Inner, gone: &Value) {
        let ns = meta_str(gone, "namespace").unwrap_or("").to_string();
        let owners: Vec<Value> = gone
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for o in owners {
            let uid = o["uid"].as_str().unwrap_or("");
            if has_blocking_dependents(g, uid) {
                continue;
            }
            let (av, kind) = (
                o["apiVersion"].as_str().unwrap_or(""),
                o["kind"].as_str().unwrap_or(""),
            );
            let Some(ort) = g.kind_of(av, kind) else {
                continue;
            };
            let oname = o["name"].as_str().unwrap_or("");
            let ons = if ort.namespaced { ns.as_str() } else { "" };
            let Ok(owner) = g.stored(ort, ons, oname) else {
                continue;
            };
            let waiting = owner["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == FOREGROUND_FINALIZER));
            if meta_str(&owner, "uid") == Some(uid) && waiting {
                let _ = self.release_foreground(g, ort, &owner);
            }
        }
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

/// Whether the object with `uid` has a dependent that blocks its deletion
/// (`blockOwnerDeletion: true` in the reference to it).
fn has_blocking_dependents(g: &Inner, uid: &str) -> bool {
    let Some(deps) = g.dependents.get(uid) else {
        return false;
    };
    deps.iter().any(|(k, ns, name)| {
        g.tables
            .get(k)
            .and_then(|t| t.get(&(ns.clone(), name.clone())))
            .and_then(|o| o.pointer("/metadata/ownerReferences"))
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    r["uid"].as_str() == Some(uid) && r["blockOwnerDeletion"] == json!(true)
                })
            })
    })
}

/// Whether `obj` has a finalizer other than `foregroundDeletion` (which its dependents' end
/// completes): its deletion waits for whoever set it.
pub(super) fn held_by_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x != FOREGROUND_FINALIZER))
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
