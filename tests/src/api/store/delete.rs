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
        let mut g = self.lock();
        self.delete_locked(&mut g, rt, ns, name, opts)
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

    /// Deletes the objects the object with `uid` owns, or (`orphan`) removes it from their
    /// owners.
    pub(super) fn collect_dependents(&self, g: &mut Inner, uid: &str, orphan: bool) {
        let deps: Vec<(&'static str, String, String)> = g
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for (k, dns, dname) in deps {
            let Some(drt) = resources::ALL.iter().copied().find(|r| r.key() == k) else {
                continue;
            };
            if !orphan {
                let _ = self.delete_locked(g, drt, &dns, &dname, &DeleteOptions::default());
                continue;
            }
            let dkey = (dns.clone(), dname.clone());
            if let Some(cur) = g.tables.get(k).and_then(|t| t.get(&dkey)).cloned() {
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
        let mut g = self.lock();
        let mut out = Vec::new();
        for it in items {
            let ns = meta_str(&it, "namespace").unwrap_or("");
            let name = meta_str(&it, "name").unwrap_or("");
            if let Ok(o) = self.delete_locked(&mut g, rt, ns, name, opts) {
                out.push(o);
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
    resources::ALL
        .iter()
        .filter(|r| r.namespaced)
        .flat_map(|r| {
            g.tables
                .get(r.key())
                .map(|t| {
                    t.range((
                        Bound::Included((ns.to_string(), String::new())),
                        Bound::Unbounded,
                    ))
                    .take_while(|(k, _)| k.0 == ns)
                    .map(|(k, _)| (*r, k.1.clone()))
                    .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}
