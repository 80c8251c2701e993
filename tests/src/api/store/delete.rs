//! Deletes: preconditions, namespace contents, garbage collection of dependents (or orphaning).

use super::object::{meta_str, Obj};
use super::params::{DeleteOptions, ListQuery, Part};
use super::state::{Inner, Store};
use crate::api::defaults::now_rfc3339;
use crate::api::resources::{self, ResourceType};
use crate::api::status::ApiError;
use serde_json::{json, Value};
use std::ops::Bound;
use std::sync::Arc;

impl Store {
    /// Deletes an object and, unless the propagation policy is "Orphan", the objects it owns
    /// (with "Foreground", before the object itself); deleting a namespace deletes its
    /// contents. A pod on a node that terminates pods is deleted gracefully (see `graceful`).
    pub fn delete(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Obj, ApiError> {
        let stored = rt.view.map_or(rt, |v| v.storage);
        let mut g = self.lock();
        let deleted = self.delete_locked(&mut g, stored, ns, name, opts)?;
        Ok(super::kinds::shown(rt, deleted))
    }

    pub(super) fn delete_locked(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Obj, ApiError> {
        let old = g.stored(rt, ns, name)?;
        check_preconditions(rt, name, &old, opts)?;
        if rt.is("", "pods") {
            if let Some(terminating) = self.delete_pod_gracefully(g, rt, &old, opts) {
                return Ok(terminating);
            }
        }
        let uid = meta_str(&old, "uid").unwrap_or("").to_string();
        if waits_for_dependents(&old) && !old["metadata"]["deletionTimestamp"].is_null() {
            // Deleted in the foreground already: it goes with its last blocking dependent.
            return Ok(old);
        }
        if opts.propagation.as_deref() == Some("Foreground") && g.dependents.contains_key(&uid) {
            return Ok(self.delete_in_foreground(g, rt, &old, &uid, opts));
        }
        if opts.dry_run {
            let mut last = (*old).clone();
            last["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return Ok(Arc::new(last));
        }
        if let Some(held) = self.hold_for_finalizers(g, rt, &old) {
            // Its dependents go as they would; it stays until its finalizers are removed.
            if !uid.is_empty() {
                let orphan = opts.propagation.as_deref() == Some("Orphan");
                self.collect_dependents(g, &uid, orphan);
            }
            return Ok(held);
        }
        if std::ptr::eq(rt, &resources::CUSTOMRESOURCEDEFINITIONS) {
            self.remove_custom_objects(g, &old);
        }
        let deleted = self.remove_locked(g, rt, &old)?;
        // Contents of a deleted namespace.
        if rt.is("", "namespaces") {
            for (r, n) in namespace_contents(g, name) {
                let _ = self.delete_locked(g, r, name, &n, &DeleteOptions::default());
            }
        }
        // Garbage collection of dependents.
        if !uid.is_empty() {
            let orphan = opts.propagation.as_deref() == Some("Orphan");
            self.collect_dependents(g, &uid, orphan);
        }
        Ok(deleted)
    }

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

    /// Removes every object of the resources CRD `crd` registers, as the API server does
    /// before a CRD goes (finalizers are not waited for).
    fn remove_custom_objects(&self, g: &mut Inner, crd: &Value) {
        let name = meta_str(crd, "name").unwrap_or("");
        let kinds: Vec<&'static ResourceType> = g
            .custom
            .iter()
            .copied()
            .filter(|r| r.crd.is_some_and(|c| c.crd_name == name))
            .collect();
        for rt in kinds {
            let objs: Vec<Obj> = g
                .tables
                .get(rt.key())
                .map(|t| t.values().cloned().collect())
                .unwrap_or_default();
            for o in objs {
                let _ = self.remove_locked(g, rt, &o);
                if let Some(uid) = meta_str(&o, "uid") {
                    self.collect_dependents(g, uid, false);
                }
            }
        }
    }

    /// Deletes every object of `rt` in `ns` (or everywhere) matching the query's selectors.
    pub fn delete_collection(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        q: &ListQuery,
        opts: &DeleteOptions,
    ) -> Result<Vec<Obj>, ApiError> {
        let all = ListQuery {
            labels: q.labels.clone(),
            fields: q.fields.clone(),
            limit: None,
            continue_token: None,
        };
        let items = self.list(rt, ns, &all)?.items;
        let stored = rt.view.map_or(rt, |v| v.storage);
        let mut g = self.lock();
        let mut out = Vec::new();
        for it in items {
            let ns = meta_str(&it, "namespace").unwrap_or("");
            let name = meta_str(&it, "name").unwrap_or("");
            if let Ok(o) = self.delete_locked(&mut g, stored, ns, name, opts) {
                out.push(super::kinds::shown(rt, o));
            }
        }
        Ok(out)
    }
}

/// The `preconditions` of a delete (uid, resourceVersion) against the stored object.
fn check_preconditions(
    rt: &ResourceType,
    name: &str,
    old: &Value,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    if let Some(uid) = &opts.precondition_uid {
        if meta_str(old, "uid") != Some(uid.as_str()) {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(old, "uid").unwrap_or("")
                ),
            ));
        }
    }
    if let Some(rv) = &opts.precondition_rv {
        if meta_str(old, "resourceVersion") != Some(rv.as_str()) {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
    }
    Ok(())
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
        .is_some_and(|f| f.iter().any(|x| x == super::graceful::FOREGROUND_FINALIZER))
}

/// Whether the object with `uid` is stored and being deleted in the foreground.
fn owner_waits_for_dependents(g: &Inner, uid: &str) -> bool {
    g.tables
        .values()
        .flat_map(|t| t.values())
        .any(|o| meta_str(o, "uid") == Some(uid) && waits_for_dependents(o))
}

/// Every namespaced object in namespace `ns`: (resource, name).
fn namespace_contents(g: &Inner, ns: &str) -> Vec<(&'static ResourceType, String)> {
    g.kinds()
        .filter(|r| r.namespaced && r.stored && r.view.is_none())
        .flat_map(|r| {
            g.tables
                .get(r.key())
                .map(|t| {
                    t.range((
                        Bound::Included((ns.to_string(), String::new())),
                        Bound::Unbounded,
                    ))
                    .take_while(|(k, _)| k.0 == ns)
                    .map(|(k, _)| (r, k.1.clone()))
                    .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}
