//! Field ownership (`metadata.managedFields`) as server-side apply keeps it, for the fields a
//! patch names: an apply owns the fields it sets, and one that would change a field another
//! manager owns fails with 409 Conflict unless forced (which takes the field over); any other
//! write makes its manager the owner of what it changed. Lists are owned whole (no merge keys).
//! A write through the status subresource owns status fields only, in an entry of its own
//! (`subresource: status`), and one through the main resource never a status field: so a
//! status apply that leaves a field out deletes it, as an apply of the main resource does.
//! Leader election through a Lease (kube-lease-manager) relies on this: of two candidates that
//! apply themselves as holder of a free Lease, the second gets the conflict.

use super::params::Part;
use crate::api::defaults::now_rfc3339;
use crate::api::status::ApiError;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// Who writes, as the request says (`fieldManager`, `force`).
#[derive(Clone, Debug)]
pub struct FieldOwner {
    pub manager: String,
    /// A forced apply takes conflicting fields over.
    pub force: bool,
}

type Path = Vec<String>;

/// What a write through `part` cannot own: what the server sets or keeps itself, and the
/// other part's fields (the status is the status subresource's alone).
fn ignored(p: &[String], part: Part) -> bool {
    let first = p.first().map(String::as_str);
    let server = matches!(first, Some("apiVersion" | "kind"))
        || (first == Some("metadata")
            && !matches!(p.get(1).map(String::as_str), Some("labels" | "annotations")));
    server
        || match part {
            Part::Main => first == Some("status"),
            Part::Status => first != Some("status"),
        }
}

/// The leaves (non-object values) of `v` a write through `part` owns, as paths.
fn leaves(v: &Value, part: Part, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                prefix.push(k.clone());
                leaves(x, part, prefix, out);
                prefix.pop();
            }
        }
        _ if !ignored(prefix, part) && !prefix.is_empty() => {
            out.insert(prefix.clone());
        }
        _ => {}
    }
}

fn leaf_set(v: &Value, part: Part) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    leaves(v, part, &mut Vec::new(), &mut out);
    out
}

/// The leaves of `v` some write may own (through either part).
fn owned_leaves(v: &Value) -> BTreeSet<Path> {
    let mut out = leaf_set(v, Part::Main);
    out.extend(leaf_set(v, Part::Status));
    out
}

/// The `subresource` of the managed fields' entry of a write through `part`.
fn subresource(part: Part) -> &'static str {
    match part {
        Part::Main => "",
        Part::Status => "status",
    }
}

fn value_at<'a>(v: &'a Value, p: &[String]) -> Option<&'a Value> {
    p.iter().try_fold(v, |cur, k| cur.get(k))
}

/// A `fieldsV1` set as paths, and back.
fn from_fields(f: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(m) = f.as_object() else { return };
    if m.is_empty() && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
    for (k, x) in m {
        if let Some(name) = k.strip_prefix("f:") {
            prefix.push(name.to_string());
            from_fields(x, prefix, out);
            prefix.pop();
        }
    }
}

fn to_fields(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for k in p {
            cur = cur
                .entry(format!("f:{k}"))
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

struct Entry {
    manager: String,
    operation: String,
    subresource: String,
    raw: Value,
    fields: BTreeSet<Path>,
}

impl Entry {
    /// Whether this is the entry of `owner`'s `operation` through `part`.
    fn of(&self, owner: &FieldOwner, operation: &str, part: Part) -> bool {
        self.manager == owner.manager
            && self.operation == operation
            && self.subresource == subresource(part)
    }
}

fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = BTreeSet::new();
            from_fields(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Entry {
                manager: e["manager"].as_str().unwrap_or("").to_string(),
                operation: e["operation"].as_str().unwrap_or("").to_string(),
                subresource: e["subresource"].as_str().unwrap_or("").to_string(),
                raw: e.clone(),
                fields,
            }
        })
        .collect()
}

/// Records the write through `part` of `new` over `old` (None: a create) by `owner` in
/// `new`'s managed fields; `applied` is the body of an apply. A conflict with another manager
/// fails an unforced apply.
pub(super) fn record(
    old: Option<&Value>,
    new: &mut Value,
    applied: Option<&Value>,
    owner: &FieldOwner,
    part: Part,
) -> Result<(), ApiError> {
    let mut list = old.map(entries).unwrap_or_default();
    let operation = if applied.is_some() { "Apply" } else { "Update" };
    let mine = match applied {
        Some(body) => {
            let set = leaf_set(body, part);
            let mut conflicts = Vec::new();
            for e in list.iter().filter(|e| !e.of(owner, "Apply", part)) {
                for p in set.intersection(&e.fields) {
                    let before = old.and_then(|o| value_at(o, p));
                    if before != value_at(body, p) {
                        conflicts.push((e.manager.clone(), format!(".{}", p.join("."))));
                    }
                }
            }
            if !conflicts.is_empty() && !owner.force {
                return Err(conflict(&conflicts));
            }
            set
        }
        None => {
            let set = |v: &Value| leaf_set(v, part);
            let (a, b) = (old.map(set).unwrap_or_default(), set(new));
            a.symmetric_difference(&b)
                .chain(
                    b.iter()
                        .filter(|p| old.and_then(|o| value_at(o, p)) != value_at(new, p)),
                )
                .filter(|p| value_at(new, p).is_some())
                .cloned()
                .collect()
        }
    };
    let present = owned_leaves(new);
    let mut out = Vec::new();
    let mut merged = mine.clone();
    for mut e in list.drain(..) {
        if e.of(owner, operation, part) {
            if operation == "Update" {
                merged.extend(e.fields.iter().cloned());
            }
            continue;
        }
        // A changed (or forced) field belongs to its new owner alone; a gone one to nobody.
        e.fields
            .retain(|p| present.contains(p) && !(mine.contains(p) && value_changed(old, new, p)));
        if !e.fields.is_empty() {
            e.raw["fieldsV1"] = to_fields(&e.fields);
            out.push(e.raw);
        }
    }
    merged.retain(|p| present.contains(p));
    if !merged.is_empty() {
        let mut entry = json!({
            "manager": owner.manager,
            "operation": operation,
            "apiVersion": new["apiVersion"],
            "time": now_rfc3339(),
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields(&merged),
        });
        if part == Part::Status {
            entry["subresource"] = json!(subresource(part));
        }
        out.push(entry);
    }
    new["metadata"]["managedFields"] = Value::Array(out);
    Ok(())
}

/// Removes from `doc` (the object after an apply through `part` by `owner` of `applied`) the
/// fields the manager's earlier apply through that part set and this one leaves out, unless
/// another manager owns them too: as Kubernetes documents it, a field dropped from the applied
/// configuration is deleted when no other manager owns it.
pub(super) fn drop_released(
    old: &Value,
    doc: &mut Value,
    applied: &Value,
    owner: &FieldOwner,
    part: Part,
) {
    let list = entries(old);
    let now = leaf_set(applied, part);
    let mine = list
        .iter()
        .filter(|e| e.of(owner, "Apply", part))
        .flat_map(|e| e.fields.iter());
    for p in mine.filter(|p| !now.contains(*p)) {
        let shared = list
            .iter()
            .any(|e| !e.of(owner, "Apply", part) && e.fields.contains(p));
        if !shared {
            remove(doc, p);
        }
    }
}

/// Removes the field at `p`, and each object on its path that it leaves empty (the map that
/// held only released fields goes with them, as a map the apply set is owned with its keys).
fn remove(doc: &mut Value, p: &[String]) {
    let Some((first, rest)) = p.split_first() else {
        return;
    };
    let Some(m) = doc.as_object_mut() else { return };
    if rest.is_empty() {
        m.remove(first);
        return;
    }
    if let Some(child) = m.get_mut(first) {
        remove(child, rest);
        if child.as_object().is_some_and(|c| c.is_empty()) {
            m.remove(first);
        }
    }
}

/// Whether the write changed field `p` (a forced apply takes over only the fields it
/// changes; the others it shares).
fn value_changed(old: Option<&Value>, new: &Value, p: &[String]) -> bool {
    old.and_then(|o| value_at(o, p)) != value_at(new, p)
}

fn conflict(conflicts: &[(String, String)]) -> ApiError {
    let n = conflicts.len();
    let text: Vec<String> = conflicts
        .iter()
        .map(|(m, f)| format!("conflict with {m:?}: {f}"))
        .collect();
    let mut e = ApiError::new(
        409,
        "Conflict",
        format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            text.join(", ")
        ),
    );
    e.details = Some(json!({"causes": conflicts.iter().map(|(m, f)| json!({
        "reason": "FieldManagerConflict", "message": format!("conflict with {m:?}"), "field": f,
    })).collect::<Vec<_>>()}));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(m: &str, force: bool) -> FieldOwner {
        FieldOwner {
            manager: m.into(),
            force,
        }
    }

    /// Two candidates apply themselves as a free Lease's holder: the second conflicts (unless
    /// forced); a strategic-merge update takes ownership without conflict; a removed field is
    /// nobody's, so applying it again is free.
    #[test]
    fn apply_conflicts_and_updates_take_over() {
        let old = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {}});
        let a = json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
        let mut new = old.clone();
        json_patch::merge(&mut new, &a);
        record(
            Some(&old),
            &mut new,
            Some(&a),
            &owner("a", false),
            Part::Main,
        )
        .unwrap();
        assert_eq!(
            new["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}})
        );
        let b = json!({"spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}});
        let mut newer = new.clone();
        json_patch::merge(&mut newer, &b);
        let e = record(
            Some(&new),
            &mut newer.clone(),
            Some(&b),
            &owner("b", false),
            Part::Main,
        )
        .unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            "Apply failed with 1 conflict: conflict with \"a\": .spec.holderIdentity"
        );
        // Forced: b owns the holder; a keeps the duration (same value: shared).
        record(
            Some(&new),
            &mut newer,
            Some(&b),
            &owner("b", true),
            Part::Main,
        )
        .unwrap();
        let mf = newer["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(mf.len(), 2);
        assert_eq!(
            mf[0]["fieldsV1"],
            json!({"f:spec": {"f:leaseDurationSeconds": {}}}),
            "{mf:?}"
        );
        // An update releasing the holder: the field is gone, and nobody owns it.
        let mut released = newer.clone();
        released["spec"]
            .as_object_mut()
            .unwrap()
            .remove("holderIdentity");
        record(
            Some(&newer),
            &mut released,
            None,
            &owner("a", false),
            Part::Main,
        )
        .unwrap();
        let c = json!({"spec": {"holderIdentity": "c"}});
        let mut taken = released.clone();
        json_patch::merge(&mut taken, &c);
        record(
            Some(&released),
            &mut taken,
            Some(&c),
            &owner("c", false),
            Part::Main,
        )
        .unwrap();
    }

    /// A field an apply no longer sets is deleted, unless another manager owns it too.
    #[test]
    fn a_field_left_out_of_the_next_apply_is_deleted_unless_shared() {
        let old = json!({"apiVersion": "v1", "kind": "T", "metadata": {"name": "t", "managedFields": [
            {"manager": "c", "operation": "Apply", "fieldsV1": {"f:spec": {
                "f:nodeSelector": {"f:zone": {}, "f:disk": {}}, "f:x": {}, "f:y": {}}}},
            {"manager": "u", "operation": "Update", "fieldsV1": {"f:spec": {"f:x": {}}}},
        ]}, "spec": {"nodeSelector": {"zone": "a", "disk": "ssd"}, "x": 1, "y": 2}});
        let next = json!({"spec": {"nodeSelector": {"zone": "b"}}});
        let mut doc = old.clone();
        json_patch::merge(&mut doc, &next);
        drop_released(&old, &mut doc, &next, &owner("c", false), Part::Main);
        assert_eq!(doc["spec"], json!({"nodeSelector": {"zone": "b"}, "x": 1}));
        // A map whose keys are all released goes with them.
        let none = json!({"spec": {"x": 1}});
        let mut doc = old.clone();
        json_patch::merge(&mut doc, &none);
        drop_released(&old, &mut doc, &none, &owner("c", false), Part::Main);
        assert_eq!(doc["spec"], json!({"x": 1}));
        // Another manager's apply releases nothing of c's.
        let mut doc = old.clone();
        drop_released(&old, &mut doc, &next, &owner("d", false), Part::Main);
        assert_eq!(doc, old);
    }
}
