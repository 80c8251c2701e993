//! Deletes: preconditions, namespace contents, a CRD's objects; what a delete starts for the
//! objects it owns is the garbage collector's (`gc`).

use super::gc::waits_for_dependents;
use super::object::{meta_str, Obj};
use super::params::{DeleteOptions, ListQuery};
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
