//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`), as the API server serves them: a
//! stored CRD is checked, gets its status (`NamesAccepted`, `Established`), and its resource
//! is served from then on (namespaced or cluster-scoped, with the `status` subresource when it
//! declares one), each object checked against the version's structural schema (`schema`:
//! types, required fields, enums, bounds, defaults; unknown fields pruned unless
//! `x-kubernetes-preserve-unknown-fields`) and shown in tables with its
//! `additionalPrinterColumns` (`columns`), then against the schema's `x-kubernetes-validations`
//! CEL rules (`rules`; on an update with the old object for transition rules). Deleting the CRD deletes its objects. The unknown
//! fields of a write ([`unknown_fields`]) are what its `fieldValidation` judges; each served
//! version is published as OpenAPI (`openapi`).
//!
//! The sandbox serves a CRD's storage version only, does not run conversion webhooks, refuses a
//! CRD whose CEL rules it cannot evaluate (see `rules`), and keeps the resource types it registered allocated
//! for the life of the process (a changed schema replaces the old one in place).

mod columns;
pub mod openapi;
mod rules;
mod schema;

pub use columns::{cells, column_definitions};

use super::custom::CrdInfo;
use super::defaults::now_rfc3339;
use super::resources::{self, ResourceType, CUSTOMRESOURCEDEFINITIONS};
use super::status::ApiError;
use serde_json::{json, Value};

const RW: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The version of `crd` that is stored (and served).
fn storage_version(crd: &Value) -> Option<&Value> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)?
        .iter()
        .find(|v| v["storage"] == json!(true))
}

/// Checks a CRD as the API server does, fills its defaults and sets its status; or a custom
/// object against its CRD's schema and rules (`old`: the stored object an update replaces).
pub fn admit(rt: &ResourceType, obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    if std::ptr::eq(rt, &CUSTOMRESOURCEDEFINITIONS) {
        return admit_definition(obj);
    }
    let Some(info) = rt.crd else {
        return Ok(());
    };
    let mut causes = Vec::new();
    let schema = info.schema();
    schema::check_root(&schema, obj, &mut causes);
    if causes.is_empty() {
        // As the API server: the rules of an object that has the schema's shape.
        rules::validate(&schema, obj, old, "", &mut causes);
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut e = ApiError::invalid(rt, &name, &causes);
    e.message = e.message.replacen(
        &format!("{} ", rt.kind),
        &format!("{}.{} ", rt.kind, rt.group),
        1,
    );
    Err(e)
}

/// The fields of `obj` (a whole object, or a merge patch of one) that the schema of custom
/// resource `rt` does not declare: what pruning would drop (`spec.foo`), sorted. None for a
/// resource that is not a CRD's.
pub fn unknown_fields(rt: &ResourceType, obj: &Value) -> Vec<String> {
    match rt.crd {
        Some(info) => schema::unknown_fields(&info.schema(), obj),
        None => Vec::new(),
    }
}

fn admit_definition(crd: &mut Value) -> Result<(), ApiError> {
    let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut causes: Vec<(String, String)> = Vec::new();
    let mut need = |ptr: &str, field: &str| {
        if crd
            .pointer(ptr)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push((field.to_string(), "Required value".to_string()));
        }
    };
    need("/spec/group", "spec.group");
    need("/spec/names/plural", "spec.names.plural");
    need("/spec/names/kind", "spec.names.kind");
    let group = crd["spec"]["group"].as_str().unwrap_or("").to_string();
    let plural = crd["spec"]["names"]["plural"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let kind = crd["spec"]["names"]["kind"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group ({plural}.{group})"),
        ));
    }
    let scope = crd["spec"]["scope"].as_str().unwrap_or("");
    if !["Namespaced", "Cluster"].contains(&scope) {
        causes.push((
            "spec.scope".into(),
            format!("Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""),
        ));
    }
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push((
            "spec.versions".into(),
            "Required value: must have exactly one version marked as storage version".into(),
        ));
    } else if versions
        .iter()
        .filter(|v| v["storage"] == json!(true))
        .count()
        != 1
    {
        causes.push((
            "spec.versions".into(),
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v["name"].as_str().is_none_or(str::is_empty) {
            causes.push((format!("spec.versions[{i}].name"), "Required value".into()));
        }
        let root = &v["schema"]["openAPIV3Schema"];
        if !root.is_object() {
            causes.push((
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required".into(),
            ));
        } else if root["type"] != "object" {
            causes.push((
                format!("spec.versions[{i}].schema.openAPIV3Schema.type"),
                "Unsupported value: must be object at the root".into(),
            ));
        } else {
            let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
            rules::check_definition(root, &at, &mut causes);
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &CUSTOMRESOURCEDEFINITIONS,
            &name,
            &causes,
        ));
    }
    // Defaults, then the status the API server's controllers set.
    let names = &mut crd["spec"]["names"];
    if names["singular"].as_str().is_none_or(str::is_empty) {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) {
        names["listKind"] = json!(format!("{kind}List"));
    }
    if crd["spec"]["conversion"].is_null() {
        crd["spec"]["conversion"] = json!({"strategy": "None"});
    }
    let accepted = crd["spec"]["names"].clone();
    let stored = storage_version(crd)
        .and_then(|v| v["name"].as_str())
        .unwrap_or("")
        .to_string();
    let mut stored_versions = strings(&crd["status"]["storedVersions"]);
    if !stored_versions.contains(&stored) {
        stored_versions.push(stored);
    }
    let now = now_rfc3339();
    let cond = |ty: &str, reason: &str, message: &str| json!({"type": ty, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now});
    let mut conditions = vec![
        cond("NamesAccepted", "NoConflicts", "no conflicts found"),
        cond(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ];
    // A condition that holds keeps the time it began to.
    if let Some(old) = crd["status"]["conditions"].as_array() {
        for c in conditions.iter_mut() {
            if let Some(o) = old
                .iter()
                .find(|o| o["type"] == c["type"] && o["status"] == "True")
            {
                c["lastTransitionTime"] = o["lastTransitionTime"].clone();
            }
        }
    }
    crd["status"] = json!({
        "acceptedNames": accepted,
        "storedVersions": stored_versions,
        "conditions": conditions,
    });
    Ok(())
}

/// What identifies a served resource (a change of any of these makes a new type).
fn identity(rt: &ResourceType) -> String {
    format!(
        "{}/{}/{}/{}/{}/{}/{:?}/{:?}/{:?}",
        rt.group,
        rt.version,
        rt.plural,
        rt.singular,
        rt.kind,
        rt.namespaced,
        rt.short_names,
        rt.categories,
        rt.subresources
    )
}

/// Serves the resource of CRD `crd` from now on (or, `removed`, no more): `custom` is the
/// store's list of custom resources.
pub fn register(custom: &mut Vec<&'static ResourceType>, crd: &Value, removed: bool) {
    let name = crd["metadata"]["name"].as_str().unwrap_or("");
    let mine = |r: &&'static ResourceType| r.crd.is_some_and(|c| c.crd_name == name);
    if removed {
        custom.retain(|r| !mine(r));
        return;
    }
    let Some(version) = storage_version(crd) else {
        return;
    };
    let spec = &crd["spec"];
    let names = &spec["names"];
    let (group, plural) = (
        spec["group"].as_str().unwrap_or(""),
        names["plural"].as_str().unwrap_or(""),
    );
    // A resource the sandbox serves built in (JobSet) stays served as it is.
    if resources::ALL
        .iter()
        .any(|r| r.group == group && r.plural == plural)
    {
        return;
    }
    let schema = version["schema"]["openAPIV3Schema"].clone();
    let cols = columns::from_version(version);
    let leak_all = |v: &Value| -> &'static [&'static str] {
        Box::leak(
            strings(v)
                .iter()
                .map(|s| leak(s))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        )
    };
    let status: &'static [&'static str] = if version["subresources"]["status"].is_object() {
        &["status"]
    } else {
        &[]
    };
    let kind = names["kind"].as_str().unwrap_or("");
    let singular = names["singular"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| kind.to_lowercase());
    let wanted = ResourceType {
        group: leak(group),
        version: leak(version["name"].as_str().unwrap_or("")),
        plural: leak(plural),
        singular: leak(&singular),
        kind: leak(kind),
        namespaced: spec["scope"] != "Cluster",
        short_names: leak_all(&names["shortNames"]),
        categories: leak_all(&names["categories"]),
        verbs: RW,
        subresources: status,
        stored: true,
        normalize: normalize_custom,
        crd: None,
        view: None,
    };
    if let Some(existing) = custom.iter().find(|r| mine(r)) {
        if identity(existing) == identity(&wanted) {
            if let Some(info) = existing.crd {
                info.replace(schema, cols);
                return;
            }
        }
    }
    custom.retain(|r| !mine(r));
    let key = leak(&format!("{plural}.{group}"));
    let info: &'static CrdInfo = Box::leak(Box::new(CrdInfo::new(key, name, schema, cols)));
    custom.push(Box::leak(Box::new(ResourceType {
        crd: Some(info),
        ..wanted
    })));
}

/// A custom object's metadata as ObjectMeta has it; the rest as its schema left it.
fn normalize_custom(mut v: Value) -> Result<Value, String> {
    let meta = v.get_mut("metadata").map(Value::take).unwrap_or_default();
    let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
        serde_json::from_value(meta).map_err(|e| format!("metadata: {e}"))?;
    v["metadata"] = serde_json::to_value(meta).map_err(|e| e.to_string())?;
    Ok(v)
}

#[cfg(test)]
mod rules_tests;
#[cfg(test)]
pub(crate) mod tests;
