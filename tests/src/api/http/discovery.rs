//! Discovery: the version, API groups and resource lists, and the OpenAPI v2 document.

use super::response::{full, json_response, Body};
use crate::api::store::Store;
use http::{header, HeaderMap, Response};
use serde_json::{json, Value};

pub(super) fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub(super) fn resource_list(store: &Store, group: &str, version: &str) -> Value {
    let mut out = Vec::new();
    for rt in store
        .kinds()
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut r = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.verbs,
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            r["categories"] = json!(rt.categories);
        }
        out.push(r);
        for sub in rt.subresources {
            let mut s = json!({
                "name": format!("{}/{}", rt.plural, sub),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            });
            match *sub {
                "log" => s["verbs"] = json!(["get"]),
                "eviction" => {
                    s["kind"] = json!("Eviction");
                    s["group"] = json!("policy");
                    s["version"] = json!("v1");
                    s["verbs"] = json!(["create"]);
                }
                "token" => {
                    s["kind"] = json!("TokenRequest");
                    s["group"] = json!("authentication.k8s.io");
                    s["version"] = json!("v1");
                    s["verbs"] = json!(["create"]);
                }
                "scale" => {
                    s["kind"] = json!("Scale");
                    s["group"] = json!("autoscaling");
                    s["version"] = json!("v1");
                }
                _ => {}
            }
            out.push(s);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out})
}

pub(super) fn group_list(store: &Store) -> Value {
    let groups: Vec<Value> = store
        .groups()
        .iter()
        .map(|(g, vs)| {
            let gvs: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": gvs, "preferredVersion": gvs[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The OpenAPI v2 document: as JSON, with the definitions of the CRDs' kinds
/// ([`super::openapi`]); as protobuf (what kubectl asks for), without schemas, so that kubectl
/// skips client-side validation of kinds it does not describe (it learns from `/openapi/v3`
/// that the server validates custom resources' fields itself).
pub(super) fn openapi_v2(store: &Store, headers: &HeaderMap) -> Response<Body> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("protobuf") {
        // gnostic openapi_v2.Document: swagger (1) = "2.0", info (2) = {title (1), version (2)}.
        fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
            let mut v = vec![tag << 3 | 2, bytes.len() as u8];
            v.extend_from_slice(bytes);
            v
        }
        let info = [field(1, b"Kubernetes"), field(2, b"v1.33.0")].concat();
        let doc = [field(1, b"2.0"), field(2, &info)].concat();
        return Response::builder()
            .status(200)
            .header(
                header::CONTENT_TYPE,
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )
            .body(full(doc))
            .expect("valid response");
    }
    json_response(
        200,
        &json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": {}, "definitions": super::openapi::v2_definitions(store)}),
    )
}
