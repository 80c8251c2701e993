//! Garbage collection through ownerReferences, as Kubernetes' garbage collector does it, for
//! every kind (custom ones too). When an object goes, the objects it owns go too
//! ([`Store::delete`] calls `collect_dependents`): in the background, or first, with
//! propagation Foreground (the owner stays, with the finalizer [`FOREGROUND_FINALIZER`], until
//! its dependents with `blockOwnerDeletion` are gone), or they are orphaned (they only lose the
//! reference); a dependent another owner still holds stays. An object whose owners went before
//! it was made goes when it appears ([`Store::collect_if_dangling`], called by the controllers'
//! event loop) or in a sweep ([`Store::collect_all_dangling`]). It all runs under the store's
//! lock, within the change that starts it.

use super::event::{EventType, StoreEvent};
use super::object::{meta_str, Obj};
use super::params::{DeleteOptions, Part};
use super::state::{Inner, Store};
use crate::api::defaults::{now_secs, rfc3339};
use crate::api::resources::ResourceType;
use serde_json::{json, Value};
use std::sync::Arc;

#[cfg(test)]
mod tests;

/// The finalizer of an owner waiting for its dependents (propagation Foreground).
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

impl Store {
    /// The garbage collector's work once the object with `uid` is gone or going: each object
    /// it owns is deleted, unless another of its owners still exists (then only the reference
    /// to `uid` is removed); with `orphan`, every dependent only loses that reference. A
    /// dependent that blocks its owner's deletion (`blockOwnerDeletion`) while the owner waits
    /// for it (Foreground) is deleted in the foreground too, as the real collector does.
    pub(super) fn collect_dependents(&self, g: &mut Inner, uid: &str, orphan: bool) {
        let deps: Vec<(&'static str, String, String)> = g
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        if deps.is_empty() {
            return;
        }
        let owner_waits = owner_waits_for_dependents(g, uid);
        for (k, dns, dname) in deps {
            let Some(drt) = g.kind_by_key(k) else {
                continue;
            };
            let dkey = (dns.clone(), dname.clone());
            let Some(cur) = g.tables.get(k).and_then(|t| t.get(&dkey)).cloned() else {
                continue;
            };
            let other_owner = owner_refs(&cur)
                .iter()
                .any(|o| o["uid"].as_str() != Some(uid) && owner_exists(g, &dns, o));
            if !orphan && !other_owner {
                let blocks = owner_refs(&cur).iter().any(|o| {
                    o["uid"].as_str() == Some(uid) && o["blockOwnerDeletion"] == json!(true)
                });
                let opts = DeleteOptions {
                    propagation: (owner_waits && blocks).then(|| "Foreground".to_string()),
                    ..Default::default()
                };
                let _ = self.delete_locked(g, drt, &dns, &dname, &opts);
                continue;
            }
            let mut doc = (*cur).clone();
            if let Some(a) = doc
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                a.retain(|o| o.get("uid").and_then(Value::as_str) != Some(uid));
            }
            let _ = self.update_locked(g, drt, &dns, &dname, doc, Part::Main, false, false);
        }
    }

    /// The garbage collector's work on an object whose owners went before it was made (or
    /// before it named them: a controller acting on a stale view does this): if none of its
    /// owners exists (by kind, name and uid, in its namespace), it is deleted in the
    /// background; if only some are gone, it loses the references to those. An owner of a
    /// kind the store does not know counts as existing. Returns whether anything changed.
    pub fn collect_dangling(&self, rt: &'static ResourceType, ns: &str, name: &str) -> bool {
        let mut g = self.lock();
        let Ok(cur) = g.stored(rt, ns, name) else {
            return false;
        };
        let refs = owner_refs(&cur);
        if refs.is_empty() || !cur["metadata"]["deletionTimestamp"].is_null() {
            return false;
        }
        let gone: Vec<&Value> = refs
            .iter()
            .filter(|r| stored_owner(&g, ns, r).is_none())
            .collect();
        if gone.is_empty() {
            return false;
        }
        if gone.len() == refs.len() {
            return self
                .delete_locked(&mut g, rt, ns, name, &DeleteOptions::default())
                .is_ok();
        }
        let gone: Vec<Value> = gone.into_iter().map(|r| r["uid"].clone()).collect();
        let mut doc = (*cur).clone();
        if let Some(a) = doc
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            a.retain(|o| !gone.contains(&o["uid"]));
        }
        self.update_locked(&mut g, rt, ns, name, doc, Part::Main, false, false)
            .is_ok()
    }

    /// [`Store::collect_dangling`] for every stored object that names an owner: what the
    /// collector does when it starts, or after it lost track of events.
    pub fn collect_all_dangling(&self) {
        let named: Vec<(&'static ResourceType, String, String)> = {
            let g = self.lock();
            g.kinds()
                .filter(|r| r.stored && r.view.is_none())
                .flat_map(|r| {
                    g.tables
                        .get(r.key())
                        .map(|t| {
                            t.iter()
                                .filter(|(_, o)| !owner_refs(o).is_empty())
                                .map(|(k, _)| (r, k.0.clone(), k.1.clone()))
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default()
                })
                .collect()
        };
        for (rt, ns, name) in named {
            self.collect_dangling(rt, &ns, &name);
        }
    }

    /// The collector's look at a change: an object added or changed that names owners goes
    /// if they are gone ([`Store::collect_dangling`]). Returns whether it did.
    pub fn collect_if_dangling(&self, ev: &StoreEvent) -> bool {
        ev.kind != EventType::Deleted
            && ev.object.pointer("/metadata/ownerReferences").is_some()
            && self.collect_dangling(ev.resource, &ev.namespace, &ev.name)
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
}

/// The owner references of `obj`.
fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether the owner `r` names (from a dependent in `ns`) exists and is not itself waiting for
/// its dependents to go. An owner of a kind the store does not know counts as existing: the
/// collector cannot tell it is gone.
fn owner_exists(g: &Inner, ns: &str, r: &Value) -> bool {
    stored_owner(g, ns, r).is_some_and(|o| !waits_for_dependents(&o))
}

/// The owner `r` names (from a dependent in `ns`), if it is stored with that uid; an owner of
/// a kind the store does not know is taken as stored (the collector cannot tell it is gone).
fn stored_owner(g: &Inner, ns: &str, r: &Value) -> Option<Obj> {
    let (av, kind) = (
        r["apiVersion"].as_str().unwrap_or(""),
        r["kind"].as_str().unwrap_or(""),
    );
    let Some(ort) = g.kind_of(av, kind) else {
        return Some(Arc::new(Value::Null));
    };
    let ons = if ort.namespaced { ns } else { "" };
    g.stored(ort, ons, r["name"].as_str().unwrap_or(""))
        .ok()
        .filter(|o| meta_str(o, "uid") == r["uid"].as_str())
}

/// Whether `obj` is being deleted in the foreground (finalizer `foregroundDeletion`).
pub(super) fn waits_for_dependents(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == FOREGROUND_FINALIZER))
}

/// Whether the object with `uid` is stored and being deleted in the foreground.
fn owner_waits_for_dependents(g: &Inner, uid: &str) -> bool {
    g.tables
        .values()
        .flat_map(|t| t.values())
        .any(|o| meta_str(o, "uid") == Some(uid) && waits_for_dependents(o))
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
