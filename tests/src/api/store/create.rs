//! Creates: names (generateName), metadata, defaults and validation, admission.

use super::event::EventType;
use super::object::{check_type, meta_str, normalize, Obj};
use super::state::{Inner, Key, Store};
use crate::api::defaults::{self, ensure_object, new_uid, now_rfc3339, random_suffix};
use crate::api::resources::{self, ResourceType};
use crate::api::status::ApiError;
use crate::api::validation;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

impl Store {
    /// Creates an object of `rt` in namespace `ns` ("" for cluster-scoped resources).
    pub fn create(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        obj: Value,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        let obj = super::kinds::to_storage(rt, obj)?;
        let stored = rt.view.map_or(rt, |v| v.storage);
        let mut g = self.lock();
        let created = self.create_locked(&mut g, stored, ns, obj, dry_run)?;
        Ok(super::kinds::shown(rt, created))
    }

    pub(super) fn create_locked(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        ns: &str,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} create must be a JSON object",
                rt.kind
            )));
        }
        check_type(rt, &obj)?;
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        ensure_object(&mut obj, "/metadata");
        place(g, rt, ns, &mut obj)?;
        let table = g.tables.entry(rt.key()).or_default();
        let name = name_of(table, rt, ns, &mut obj)?;
        if let Err(e) = validation::check_name(rt, &name) {
            return Err(ApiError::invalid(rt, &name, &[("metadata.name".into(), e)]));
        }
        if table.contains_key(&(ns.to_string(), name.clone())) {
            return Err(ApiError::already_exists(rt, &name));
        }
        new_metadata(&mut obj, rt.crd.is_some());
        defaults::apply(rt, &mut obj, true);
        crate::api::crd::admit(rt, &mut obj, None)?;
        validation::validate(rt, &obj, None)?;
        if rt.is("", "pods") {
            admit_pod(g, ns, &name, &obj)?;
        }
        let obj = normalize(rt, obj)?;
        g.admit(rt, ns, None, &obj)?;
        if dry_run {
            return Ok(Arc::new(obj));
        }
        let created = self.commit(g, rt, EventType::Added, obj, None);
        if rt.is("", "namespaces") {
            // As the service-account controller does: every namespace gets a "default" SA.
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}});
            let _ = crate::api::admission::as_server(|| {
                self.create_locked(g, &resources::SERVICEACCOUNTS, &name, sa, false)
            });
        }
        Ok(created)
    }
}

/// Puts the object into namespace `ns` (which must exist) if `rt` is namespaced, else into
/// none.
fn place(g: &Inner, rt: &ResourceType, ns: &str, obj: &mut Value) -> Result<(), ApiError> {
    let body_ns = meta_str(obj, "namespace").unwrap_or("").to_string();
    if !rt.namespaced {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        return Ok(());
    }
    if !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(format!(
            "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
        )));
    }
    if ns.is_empty() {
        return Err(ApiError::bad_request(format!(
            "{} must be created in a namespace",
            rt.qualified()
        )));
    }
    let ns_key = (String::new(), ns.to_string());
    if !g
        .tables
        .get(resources::NAMESPACES.key())
        .is_some_and(|t| t.contains_key(&ns_key))
    {
        return Err(ApiError::not_found(&resources::NAMESPACES, ns));
    }
    obj["metadata"]["namespace"] = json!(ns);
    Ok(())
}

/// The object's name: `metadata.name`, or one made from `generateName` that `table` does not
/// have in `ns` (then set in the object).
fn name_of(
    table: &BTreeMap<Key, Obj>,
    rt: &ResourceType,
    ns: &str,
    obj: &mut Value,
) -> Result<String, ApiError> {
    let name = meta_str(obj, "name").unwrap_or("").to_string();
    if !name.is_empty() {
        return Ok(name);
    }
    let Some(prefix) = meta_str(obj, "generateName")
        .filter(|s| !s.is_empty())
        .map(String::from)
    else {
        return Err(ApiError::invalid(
            rt,
            "",
            &[(
                "metadata.name".into(),
                "Required value: name or generateName is required".into(),
            )],
        ));
    };
    let name = (0..100)
        .map(|_| format!("{prefix}{}", random_suffix()))
        .find(|candidate| !table.contains_key(&(ns.to_string(), candidate.clone())))
        .ok_or_else(|| {
            ApiError::new(
                409,
                "AlreadyExists",
                format!("could not generate a unique name from generateName {prefix:?}"),
            )
        })?;
    obj["metadata"]["name"] = json!(name);
    Ok(name)
}

/// The metadata the server sets on create: uid, creationTimestamp, generation 1 (objects with
/// a spec, and custom objects); nothing of a deletion or a resourceVersion.
fn new_metadata(obj: &mut Value, custom: bool) {
    let m = obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object");
    m.insert("uid".into(), json!(new_uid()));
    m.insert("creationTimestamp".into(), json!(now_rfc3339()));
    m.remove("resourceVersion");
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    m.remove("selfLink");
    if obj.get("spec").is_some() || custom {
        obj["metadata"]["generation"] = json!(1);
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("generation");
    }
}

/// The ServiceAccount admission check of a pod `name` in `ns`.
fn admit_pod(g: &Inner, ns: &str, name: &str, obj: &Value) -> Result<(), ApiError> {
    let sa = obj
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let sa_key = (ns.to_string(), sa.clone());
    if g.tables
        .get(resources::SERVICEACCOUNTS.key())
        .is_some_and(|t| t.contains_key(&sa_key))
    {
        return Ok(());
    }
    Err(ApiError::new(
        403,
        "Forbidden",
        format!("pods \"{name}\" is forbidden: error looking up service account {ns}/{sa}: serviceaccount \"{sa}\" not found"),
    ))
}
