//! What the API server publishes of its CRDs at `/openapi/v3` and `/openapi/v2`, so that
//! `kubectl explain` describes custom resources and `kubectl apply` learns that the server
//! validates their fields (`fieldValidation`) itself.
//!
//! As kube-apiserver builds it: each served version of each CRD is a definition named by the
//! group reversed, the version and the kind (`org.kubeflow.v2beta1.MPIJob`), its
//! `openAPIV3Schema` with `apiVersion`, `kind` and `metadata` (a reference to `ObjectMeta`)
//! described, and `x-kubernetes-group-version-kind`; a `...List` beside it; and the paths of
//! the resource, each operation with its `x-kubernetes-group-version-kind` and `x-kubernetes-action`
//! (kubectl finds a resource's kind through them). Version 2 drops what OpenAPI v2 cannot say
//! (`nullable`, `anyOf`, `oneOf`, `not`, and the type of `x-kubernetes-int-or-string`).

use super::super::resources::CUSTOMRESOURCEDEFINITIONS;
use super::super::store::{ListQuery, Store};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use serde_json::{json, Map, Value};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DOC: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// One served version of one CRD.
#[derive(Clone, Debug)]
pub struct Published {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Whether the version has the `status` subresource.
    pub status: bool,
    /// The version's `openAPIV3Schema`.
    pub schema: Value,
}

impl Published {
    fn gvk(&self, kind: &str) -> Value {
        json!({"group": self.group, "version": self.version, "kind": kind})
    }
}

/// Every served version of every CRD in `store`, by group, version and kind.
pub fn published(store: &Store) -> Vec<Published> {
    let crds = store
        .list(&CUSTOMRESOURCEDEFINITIONS, None, &ListQuery::default())
        .map(|l| l.items)
        .unwrap_or_default();
    let mut out = Vec::new();
    for crd in &crds {
        let spec = &crd["spec"];
        let names = &spec["names"];
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let kind = s(&names["kind"]);
        let list_kind = names["listKind"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| format!("{kind}List"));
        for v in spec["versions"].as_array().into_iter().flatten() {
            let schema = &v["schema"]["openAPIV3Schema"];
            if v["served"] != true || !schema.is_object() {
                continue;
            }
            out.push(Published {
                group: s(&spec["group"]),
                version: s(&v["name"]),
                kind: kind.clone(),
                list_kind: list_kind.clone(),
                plural: s(&names["plural"]),
                namespaced: spec["scope"] != "Cluster",
                status: v["subresources"]["status"].is_object(),
                schema: schema.clone(),
            });
        }
    }
    out.sort_by(|a, b| (&a.group, &a.version, &a.kind).cmp(&(&b.group, &b.version, &b.kind)));
    out
}

/// The group/versions `published` has, as `/openapi/v3` lists them: `apis/GROUP/VERSION`.
pub fn group_versions(published: &[Published]) -> Vec<(String, String)> {
    let mut gvs: Vec<(String, String)> = published
        .iter()
        .map(|p| (p.group.clone(), p.version.clone()))
        .collect();
    gvs.dedup();
    gvs
}

/// The name of a definition: the group reversed, the version, the kind
/// (`org.kubeflow.v2beta1.MPIJob`).
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The OpenAPI v3 document of `/openapi/v3/apis/GROUP/VERSION`: the paths and schemas of the
/// CRDs' resources of that group and version.
pub fn v3_document(published: &[Published], group: &str, version: &str) -> Option<Value> {
    let mine: Vec<&Published> = published
        .iter()
        .filter(|p| p.group == group && p.version == version)
        .collect();
    if mine.is_empty() {
        return None;
    }
    let mut schemas = Map::new();
    let mut paths = Map::new();
    let reference = |name: &str| format!("#/components/schemas/{name}");
    for p in &mine {
        let name = definition_name(group, version, &p.kind);
        let list_name = definition_name(group, version, &p.list_kind);
        schemas.insert(
            name.clone(),
            object_schema(p, &reference(OBJECT_META), false),
        );
        schemas.insert(
            list_name.clone(),
            list_schema(p, &reference(&name), &reference(LIST_META), false),
        );
        resource_paths(p, &reference(&name), &reference(&list_name), &mut paths);
    }
    schemas.insert(OBJECT_META.into(), meta_schema::<ObjectMeta>());
    schemas.insert(LIST_META.into(), meta_schema::<ListMeta>());
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The definitions of `/openapi/v2` (JSON) for the CRDs: each kind and its list, in OpenAPI
/// v2's terms, and the metadata they refer to.
pub fn v2_definitions(published: &[Published]) -> Map<String, Value> {
    let reference = |name: &str| format!("#/definitions/{name}");
    let mut defs = Map::new();
    for p in published {
        let name = definition_name(&p.group, &p.version, &p.kind);
        let list_name = definition_name(&p.group, &p.version, &p.list_kind);
        defs.insert(
            name.clone(),
            object_schema(p, &reference(OBJECT_META), true),
        );
        defs.insert(
            list_name,
            list_schema(p, &reference(&name), &reference(LIST_META), true),
        );
    }
    if !defs.is_empty() {
        defs.insert(OBJECT_META.into(), meta_schema::<ObjectMeta>());
        defs.insert(LIST_META.into(), meta_schema::<ListMeta>());
    }
    defs
}

/// The schema of one kind: its `openAPIV3Schema`, the type's fields described, the metadata
/// a reference, its group, version and kind named.
fn object_schema(p: &Published, meta_ref: &str, v2: bool) -> Value {
    let mut s = p.schema.clone();
    if v2 {
        to_v2(&mut s);
    }
    if !s["properties"].is_object() {
        s["properties"] = json!({});
    }
    if let Some(props) = s["properties"].as_object_mut() {
        props.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": API_VERSION_DOC}),
        );
        props.insert(
            "kind".into(),
            json!({"type": "string", "description": KIND_DOC}),
        );
        props.insert("metadata".into(), metadata(meta_ref, METADATA_DOC, v2));
    }
    s["x-kubernetes-group-version-kind"] = json!([p.gvk(&p.kind)]);
    s
}

fn list_schema(p: &Published, item_ref: &str, meta_ref: &str, v2: bool) -> Value {
    json!({
        "description": format!("{} is a list of {}", p.list_kind, p.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DOC},
            "kind": {"type": "string", "description": KIND_DOC},
            "items": {
                "type": "array",
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", p.plural),
                "items": {"$ref": item_ref},
            },
            "metadata": metadata(meta_ref, LIST_METADATA_DOC, v2),
        },
        "x-kubernetes-group-version-kind": [p.gvk(&p.list_kind)],
    })
}

/// A reference to metadata: bare in v2, under `allOf` in v3 (where a reference has no
/// siblings).
fn metadata(meta_ref: &str, doc: &str, v2: bool) -> Value {
    if v2 {
        json!({"$ref": meta_ref, "description": doc})
    } else {
        json!({"allOf": [{"$ref": meta_ref}], "default": {}, "description": doc})
    }
}

/// The schema of a metadata type, from its Rust type (descriptions included), every part
/// inline.
fn meta_schema<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    if let Some(m) = v.as_object_mut() {
        m.remove("$schema");
        m.remove("title");
    }
    v
}

/// What OpenAPI v2 cannot say, dropped (as the API server's v2 publishing does).
fn to_v2(s: &mut Value) {
    let Some(m) = s.as_object_mut() else {
        return;
    };
    for k in ["nullable", "anyOf", "oneOf", "not", "allOf"] {
        m.remove(k);
    }
    if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        m.remove("type");
        m.remove("format");
    }
    if let Some(props) = m.get_mut("properties").and_then(Value::as_object_mut) {
        props.values_mut().for_each(to_v2);
    }
    for k in ["items", "additionalProperties"] {
        if let Some(x) = m.get_mut(k) {
            to_v2(x);
        }
    }
}

/// `kubeflow.org` and `v2beta1` as operation ids spell them: `KubeflowOrgV2beta1`.
fn id_part(group: &str, version: &str) -> String {
    let cap = |w: &str| {
        let mut c = w.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect::<String>())
            .unwrap_or_default()
    };
    let g: String = group
        .split(['.', '-'])
        .map(cap)
        .collect::<Vec<_>>()
        .concat();
    format!("{g}{}", cap(version))
}

fn query_param(name: &str, doc: &str) -> Value {
    json!({"name": name, "in": "query", "description": doc, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut v = vec![
        query_param("dryRun", "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed"),
        query_param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
        query_param("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: - Ignore: drops unknown fields silently. - Warn: sends a warning (299 Warning header) for each unknown field and keeps the request. - Strict: fails the request with a BadRequest error naming every unknown field."),
    ];
    if patch {
        v.push(json!({"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people.", "schema": {"type": "boolean", "uniqueItems": true}}));
    }
    v
}

fn operation(
    p: &Published,
    action: &str,
    id: String,
    doc: String,
    schema_ref: &str,
    params: Vec<Value>,
    body: bool,
) -> Value {
    let mut op = json!({
        "description": doc,
        "operationId": id,
        "tags": [id_part(&p.group, &p.version)],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": p.gvk(&p.kind),
    });
    if !params.is_empty() {
        op["parameters"] = json!(params);
    }
    if body {
        let media = if action == "patch" {
            json!({
                "application/apply-patch+yaml": {"schema": {"type": "object"}},
                "application/json-patch+json": {"schema": {"type": "object"}},
                "application/merge-patch+json": {"schema": {"type": "object"}},
            })
        } else {
            json!({"application/json": {"schema": {"$ref": schema_ref}}})
        };
        op["requestBody"] = json!({"content": media, "required": true});
    }
    op
}

fn path_param(name: &str, doc: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": doc, "schema": {"type": "string", "uniqueItems": true}})
}

/// The paths of `p`'s resource: the collection, one object, its status, and the list across
/// namespaces.
fn resource_paths(p: &Published, obj_ref: &str, list_ref: &str, paths: &mut Map<String, Value>) {
    let base = format!("/apis/{}/{}", p.group, p.version);
    let (collection, scope) = if p.namespaced {
        (
            format!("{base}/namespaces/{{namespace}}/{}", p.plural),
            "Namespaced",
        )
    } else {
        (format!("{base}/{}", p.plural), "")
    };
    let gv = id_part(&p.group, &p.version);
    let k = &p.kind;
    let id = |verb: &str, suffix: &str| format!("{verb}{gv}{scope}{k}{suffix}");
    let ns_param = || {
        p.namespaced.then(|| {
            path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            )
        })
    };
    let name_param = || path_param("name", &format!("name of the {k}"));
    let mut coll = json!({
        "get": operation(p, "list", id("list", ""), format!("list objects of kind {k}"), list_ref, vec![], false),
        "post": operation(p, "post", id("create", ""), format!("create a {k}"), obj_ref, write_params(false), true),
        "delete": operation(p, "deletecollection", id("deletecollection", ""), format!("delete collection of {k}"), list_ref, vec![], false),
    });
    if let Some(ns) = ns_param() {
        coll["parameters"] = json!([ns]);
    }
    paths.insert(collection.clone(), coll);
    let one = |sub: &str, what: &str| {
        let mut item = json!({
            "get": operation(p, "get", id("read", sub), format!("read {what} of the specified {k}"), obj_ref, vec![], false),
            "put": operation(p, "put", id("replace", sub), format!("replace {what} of the specified {k}"), obj_ref, write_params(false), true),
            "patch": operation(p, "patch", id("patch", sub), format!("partially update {what} of the specified {k}"), obj_ref, write_params(true), true),
        });
        item["parameters"] = json!(ns_param()
            .into_iter()
            .chain([name_param()])
            .collect::<Vec<_>>());
        item
    };
    let mut item = one("", "the object");
    item["delete"] = operation(
        p,
        "delete",
        id("delete", ""),
        format!("delete a {k}"),
        obj_ref,
        vec![],
        false,
    );
    paths.insert(format!("{collection}/{{name}}"), item);
    if p.status {
        paths.insert(
            format!("{collection}/{{name}}/status"),
            one("Status", "status"),
        );
    }
    if p.namespaced {
        paths.insert(
            format!("{base}/{}", p.plural),
            json!({"get": operation(p, "list", format!("list{gv}{k}ForAllNamespaces"), format!("list objects of kind {k}"), list_ref, vec![], false)}),
        );
    }
}
