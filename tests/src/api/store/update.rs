//! Updates: replace (PUT), patches (merge, JSON, apply), and atomic in-process changes.

use super::event::EventType;
use super::managed::FieldOwner;
use super::object::{check_type, meta_str, normalize, without_rv, Obj};
use super::params::{Part, Patch};
use super::state::{Inner, Store};
use crate::api::defaults::{self, ensure_object};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use crate::api::validation;
use serde_json::{json, Value};
use std::sync::Arc;

impl Store {
    /// Replaces an object (PUT). A non-empty metadata.resourceVersion must match the stored one.
    pub fn update(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        obj: Value,
        part: Part,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        let obj = super::kinds::to_storage(rt, obj)?;
        let stored = rt.view.map_or(rt, |v| v.storage);
        let mut g = self.lock();
        let updated = self.update_locked(&mut g, stored, ns, name, obj, part, true, dry_run)?;
        Ok(super::kinds::shown(rt, updated))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn update_locked(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        mut obj: Value,
        part: Part,
        check_rv: bool,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} update must be a JSON object",
                rt.kind
            )));
        }
        check_type(rt, &obj)?;
        let old = g.stored(rt, ns, name)?;
        ensure_object(&mut obj, "/metadata");
        check_identity(rt, ns, name, &obj)?;
        if check_rv {
            if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty()) {
                if Some(rv) != meta_str(&old, "resourceVersion") {
                    return Err(ApiError::conflict(
                        rt,
                        name,
                        "the object has been modified; please apply your changes to the latest version and try again",
                    ));
                }
            }
        }
        let mut new = replaced(rt, part, obj, &old);
        new["apiVersion"] = json!(rt.api_version());
        new["kind"] = json!(rt.kind);
        keep_metadata(&old, &mut new);
        defaults::apply(rt, &mut new, false);
        crate::api::crd::admit(rt, &mut new, Some(old.as_ref()))?;
        validation::validate(rt, &new, Some(&old))?;
        let mut new = normalize(rt, new)?;
        if spec_changed(rt, &old, &new) {
            let gen = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            new["metadata"]["generation"] = json!(gen + 1);
        }
        g.admit(rt, ns, Some(old.as_ref()), &new)?;
        if without_rv(&new) == without_rv(&old) {
            return Ok(old);
        }
        if dry_run {
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            return Ok(Arc::new(new));
        }
        if super::graceful::deletion_complete(&new) && !super::graceful::deletion_complete(&old) {
            // Its last finalizer removed: the deletion completes.
            return self.remove_locked(g, rt, &Arc::new(new));
        }
        Ok(self.commit(g, rt, EventType::Modified, new, Some(old)))
    }

    /// Applies a patch to an object (to its status only, for `Part::Status`).
    pub fn patch(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        patch: Patch,
        part: Part,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        self.patch_as(rt, ns, name, patch, part, dry_run, None)
    }

    /// [`Store::patch`] by `owner`, whose fields are recorded in `metadata.managedFields`: an
    /// apply that changes a field another manager owns fails with 409 Conflict unless forced.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_as(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        patch: Patch,
        part: Part,
        dry_run: bool,
        owner: Option<&FieldOwner>,
    ) -> Result<Obj, ApiError> {
        let stored = rt.view.map_or(rt, |v| v.storage);
        let mut g = self.lock();
        let key = (ns.to_string(), name.to_string());
        let current = g.tables.get(rt.key()).and_then(|t| t.get(&key)).cloned();
        let Some(current) = current else {
            if let (Patch::Apply(body), Part::Main) = (&patch, part) {
                let mut body = body.clone();
                ensure_object(&mut body, "/metadata");
                body["metadata"]["name"] = json!(name);
                if let Some(o) = owner {
                    let applied = body.clone();
                    super::managed::record(None, &mut body, Some(&applied), o, part)?;
                }
                let body = super::kinds::to_storage(rt, body)?;
                let created = self.create_locked(&mut g, stored, ns, body, dry_run)?;
                return Ok(super::kinds::shown(rt, created));
            }
            return Err(ApiError::not_found(rt, name));
        };
        // Patched as the client sees it (a view's conversion of the stored object).
        let current = super::kinds::shown(rt, current);
        let mut doc = (*current).clone();
        let applied = match &patch {
            Patch::Apply(p) => Some(p.clone()),
            _ => None,
        };
        match patch {
            Patch::Merge(p) | Patch::Apply(p) => {
                if !p.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                json_patch::merge(&mut doc, &p);
            }
            Patch::Json(p) => {
                let ops: json_patch::Patch = serde_json::from_value(p).map_err(|e| {
                    ApiError::bad_request(format!("the JSON patch is malformed: {e}"))
                })?;
                json_patch::patch(&mut doc, &ops).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!("the JSON patch could not be applied: {e}"),
                    )
                })?;
            }
        }
        // A resourceVersion in the patch is a precondition.
        let rv_in_patch =
            meta_str(&doc, "resourceVersion") != meta_str(&current, "resourceVersion");
        if let Some(o) = owner {
            if let Some(body) = &applied {
                super::managed::drop_released(&current, &mut doc, body, o, part);
            }
            super::managed::record(Some(&current), &mut doc, applied.as_ref(), o, part)?;
        }
        let doc = super::kinds::to_storage(rt, doc)?;
        let patched =
            self.update_locked(&mut g, stored, ns, name, doc, part, rv_in_patch, dry_run)?;
        Ok(super::kinds::shown(rt, patched))
    }

    /// Reads, changes and writes an object atomically (no conflicts), e.g. for status updates.
    pub fn modify(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        part: Part,
        f: impl FnOnce(&mut Value),
    ) -> Result<Obj, ApiError> {
        let mut g = self.lock();
        let current = g.stored(rt, ns, name)?;
        let mut doc = (*current).clone();
        f(&mut doc);
        self.update_locked(&mut g, rt, ns, name, doc, part, false, false)
    }
}

/// Whether an update changes what `metadata.generation` counts: the spec (for a custom
/// resource, everything but its metadata and, with a status subresource, its status).
fn spec_changed(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    if rt.crd.is_none() {
        return new.get("spec") != old.get("spec") && new.get("spec").is_some();
    }
    let counted = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            if rt.has_status() {
                m.remove("status");
            }
        }
        v
    };
    counted(old) != counted(new)
}

/// The body's name and namespace, when given, are those of the URL.
fn check_identity(rt: &ResourceType, ns: &str, name: &str, obj: &Value) -> Result<(), ApiError> {
    let body_name = meta_str(obj, "name").unwrap_or("");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta_str(obj, "namespace").unwrap_or("");
    if rt.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(format!(
            "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
        )));
    }
    Ok(())
}

/// The object after the update: the body with the stored status (the main part of a
/// resource with a status subresource), or the stored object with the body's status.
fn replaced(rt: &ResourceType, part: Part, obj: Value, old: &Value) -> Value {
    let set_status = |new: &mut Value, status: Option<&Value>| match status {
        Some(s) => new["status"] = s.clone(),
        None => {
            if let Some(m) = new.as_object_mut() {
                m.remove("status");
            }
        }
    };
    match part {
        Part::Main => {
            let mut new = obj;
            if rt.has_status() {
                set_status(&mut new, old.get("status"));
            }
            new
        }
        Part::Status => {
            let mut new = old.clone();
            set_status(&mut new, obj.get("status"));
            // The status' own entries of the managed fields, as the write recorded them.
            if let Some(mf) = obj.pointer("/metadata/managedFields") {
                new["metadata"]["managedFields"] = mf.clone();
            }
            new
        }
    }
}

/// What an update cannot change: identity, creation, deletion and generation (the stored
/// object's); the resourceVersion is the server's to set.
fn keep_metadata(old: &Value, new: &mut Value) {
    let om = old["metadata"]
        .as_object()
        .expect("stored objects have metadata");
    let nm = new["metadata"]
        .as_object_mut()
        .expect("metadata is an object");
    for f in [
        "uid",
        "creationTimestamp",
        "namespace",
        "name",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    ] {
        match om.get(f) {
            Some(v) => nm.insert(f.into(), v.clone()),
            None => nm.remove(f),
        };
    }
    nm.remove("resourceVersion");
    let gen = om.get("generation").and_then(Value::as_i64);
    match gen {
        Some(g) => nm.insert("generation".into(), json!(g)),
        None => nm.remove("generation"),
    };
}
