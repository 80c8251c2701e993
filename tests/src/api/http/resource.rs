//! A request for a resource: the verb, its authorization, and its answer from the store.

use super::logs::pod_log;
use super::request::{dry_run, flag, list_query, negotiate, parse_body, read_body, Shape};
use super::reviews::review;
use super::tokens::token_request;
use super::watch::start_watch;
use super::{bytes_response, json_response, Body, State};
use crate::api::auth::{Attributes, Identity};
use crate::api::resources;
use crate::api::selector::FieldSelector;
use crate::api::status::ApiError;
use crate::api::store::{DeleteOptions, Part, Patch};
use crate::api::table::{self, IncludeObject};
use http::{header, Method, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

#[allow(clippy::too_many_arguments)]
pub(super) async fn resource_request(
    st: &Arc<State>,
    id: &Identity,
    parts: http::request::Parts,
    body: Incoming,
    query: HashMap<String, String>,
    group: &str,
    version: &str,
    rest: &[String],
) -> Result<Response<Body>, ApiError> {
    let (legacy_watch, rest) = match rest.first().map(String::as_str) {
        Some("watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let (ns, rest): (Option<String>, &[String]) = if rest.len() >= 3
        && rest[0] == "namespaces"
        && resources::lookup(group, version, &rest[2]).is_some_and(|r| r.namespaced)
    {
        (Some(rest[1].clone()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.is_empty() || rest.len() > 3 {
        return Err(ApiError::no_route());
    }
    let rt = resources::lookup(group, version, &rest[0]).ok_or_else(ApiError::no_route)?;
    if !rt.namespaced && ns.is_some() {
        return Err(ApiError::no_route());
    }
    let name = rest.get(1).cloned();
    let sub = rest.get(2).cloned().unwrap_or_default();
    if rt.is("", "pods") && matches!(sub.as_str(), "exec" | "attach" | "portforward") {
        return Err(ApiError::bad_request(format!(
            "pods/{sub} is not supported by the sandbox API server (no streaming upgrades); run `prrte-k8s-sandbox exec POD -- COMMAND` (or Cluster::pod_exec) instead"
        )));
    }
    if !sub.is_empty() && !rt.subresources.contains(&sub.as_str()) {
        return Err(ApiError::no_route());
    }
    if rt.namespaced && ns.is_none() && name.is_some() {
        return Err(ApiError::no_route());
    }
    let watching = legacy_watch || flag(&query, "watch");
    let verb = match (&parts.method, name.is_some()) {
        (&Method::GET, false) => {
            if watching {
                "watch"
            } else {
                "list"
            }
        }
        (&Method::GET, true) => {
            if watching {
                "watch"
            } else {
                "get"
            }
        }
        (&Method::POST, false) => "create",
        (&Method::POST, true) if sub == "token" => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => {
            return Err(ApiError::method_not_allowed(&format!(
                "{} {}",
                parts.method,
                parts.uri.path()
            )))
        }
    };
    let verb_ok = match sub.as_str() {
        "" => rt.verbs.contains(&verb),
        "log" => verb == "get",
        "token" => verb == "create",
        _ => ["get", "update", "patch"].contains(&verb),
    };
    if !verb_ok
        || (rt.namespaced
            && ns.is_none()
            && !["list", "watch", "deletecollection"].contains(&verb)
            && verb != "create")
    {
        return Err(ApiError::method_not_allowed(&format!(
            "{} {}",
            parts.method,
            parts.uri.path()
        )));
    }
    if rt.namespaced && ns.is_none() && verb == "create" {
        return Err(ApiError::method_not_allowed(&format!(
            "POST {} (create namespaced objects under /namespaces/NAMESPACE/)",
            parts.uri.path()
        )));
    }
    let attrs = Attributes {
        verb: verb.to_string(),
        group: rt.group.to_string(),
        resource: rt.plural.to_string(),
        subresource: sub.clone(),
        namespace: ns.clone(),
        name: name.clone(),
    };
    if rt.stored && !id.allowed(&st.store, &attrs) {
        let mut e = ApiError::new(403, "Forbidden", attrs.forbidden_message(&id.user));
        let mut d = json!({"kind": rt.plural});
        if let Some(n) = &name {
            d["name"] = json!(n);
        }
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        e.details = Some(d);
        return Err(e);
    }
    let ns_str = ns.clone().unwrap_or_default();
    let shape = negotiate(&parts.headers);
    match verb {
        "list" => {
            let q = list_query(rt, &query)?;
            let r = st.store.list(rt, ns.as_deref(), &q)?;
            let mut meta = json!({"resourceVersion": r.resource_version.to_string()});
            if let Some(c) = &r.continue_token {
                meta["continue"] = json!(c);
            }
            if let Some(n) = r.remaining {
                meta["remainingItemCount"] = json!(n);
            }
            let out = match shape {
                Shape::Table(tv) => {
                    let objs: Vec<&Value> = r.items.iter().map(|o| o.as_ref()).collect();
                    table::table(
                        rt,
                        &objs,
                        IncludeObject::parse(query.get("includeObject").map(String::as_str)),
                        tv,
                        meta,
                    )
                }
                Shape::Partial(pv) => json!({
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": pv,
                    "metadata": meta,
                    "items": r.items.iter().map(|o| table::partial_metadata(o, pv)).collect::<Vec<_>>(),
                }),
                Shape::Full => {
                    // The objects' kept encodings, joined (what serializing the list gives).
                    let items = st.encoded.array(&r.items);
                    let head = serde_json::to_vec(&json!({
                        "kind": rt.list_kind(),
                        "apiVersion": rt.api_version(),
                        "metadata": meta,
                    }))
                    .expect("JSON values serialize");
                    let mut body = Vec::with_capacity(head.len() + items.len() + 16);
                    body.extend_from_slice(&head[..head.len() - 1]);
                    body.extend_from_slice(b",\"items\":");
                    body.extend_from_slice(&items);
                    body.push(b'}');
                    return Ok(bytes_response(200, body));
                }
            };
            Ok(json_response(200, &out))
        }
        "watch" => {
            let mut q = list_query(rt, &query)?;
            if let Some(n) = &name {
                let fs = match query.get("fieldSelector").filter(|s| !s.is_empty()) {
                    Some(f) => format!("{f},metadata.name={n}"),
                    None => format!("metadata.name={n}"),
                };
                q.fields = FieldSelector::parse(rt, &fs).map_err(ApiError::bad_request)?;
            }
            start_watch(st, rt, ns, q, &query, shape)
        }
        "get" => {
            if sub == "log" {
                return pod_log(st, &ns_str, name.as_deref().unwrap_or(""), &query).await;
            }
            let obj = st.store.get(rt, &ns_str, name.as_deref().unwrap_or(""))?;
            let out = match shape {
                Shape::Table(tv) => {
                    let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                    table::table(
                        rt,
                        &[obj.as_ref()],
                        IncludeObject::parse(query.get("includeObject").map(String::as_str)),
                        tv,
                        meta,
                    )
                }
                Shape::Partial(pv) => table::partial_metadata(&obj, pv),
                Shape::Full => (*obj).clone(),
            };
            Ok(json_response(200, &out))
        }
        "create" => {
            let bytes = read_body(body).await?;
            let v = parse_body(&parts.headers, &bytes)?;
            if sub == "token" {
                return token_request(st, &ns_str, name.as_deref().unwrap_or(""), v);
            }
            if !rt.stored {
                return review(st, id, rt, v);
            }
            let obj = st.store.create(rt, &ns_str, v, dry_run(&query))?;
            Ok(json_response(201, &obj))
        }
        "update" => {
            let bytes = read_body(body).await?;
            let v = parse_body(&parts.headers, &bytes)?;
            let part = if sub == "status" {
                Part::Status
            } else {
                Part::Main
            };
            let obj = st.store.update(
                rt,
                &ns_str,
                name.as_deref().unwrap_or(""),
                v,
                part,
                dry_run(&query),
            )?;
            Ok(json_response(200, &obj))
        }
        "patch" => {
            let bytes = read_body(body).await?;
            let ct = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let media = ct.split(';').next().unwrap_or("").trim();
            let patch = match media {
                "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                    Patch::Merge(serde_json::from_slice(&bytes).map_err(|e| {
                        ApiError::bad_request(format!("the patch is not valid JSON: {e}"))
                    })?)
                }
                "application/json-patch+json" => {
                    Patch::Json(serde_json::from_slice(&bytes).map_err(|e| {
                        ApiError::bad_request(format!("the patch is not valid JSON: {e}"))
                    })?)
                }
                "application/apply-patch+yaml" | "application/apply-patch+json" => {
                    Patch::Apply(serde_yaml::from_slice(&bytes).map_err(|e| {
                        ApiError::bad_request(format!("the apply patch is not valid YAML: {e}"))
                    })?)
                }
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let part = if sub == "status" {
                Part::Status
            } else {
                Part::Main
            };
            let obj = st.store.patch(
                rt,
                &ns_str,
                name.as_deref().unwrap_or(""),
                patch,
                part,
                dry_run(&query),
            )?;
            Ok(json_response(200, &obj))
        }
        "delete" | "deletecollection" => {
            let bytes = read_body(body).await?;
            let mut opts = DeleteOptions {
                dry_run: dry_run(&query),
                propagation: query.get("propagationPolicy").cloned(),
                ..Default::default()
            };
            if !bytes.is_empty() {
                let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
                    ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
                })?;
                if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
                    opts.propagation = Some(p.to_string());
                }
                if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
                    opts.propagation = Some("Orphan".into());
                }
                opts.precondition_uid = v
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(String::from);
                opts.precondition_rv = v
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(String::from);
                if v.get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x == "All"))
                {
                    opts.dry_run = true;
                }
            }
            if let Some(p) = &opts.propagation {
                if !["Orphan", "Background", "Foreground"].contains(&p.as_str()) {
                    return Err(ApiError::bad_request(format!(
                        "invalid propagationPolicy {p:?}: use Orphan, Background or Foreground"
                    )));
                }
            }
            if verb == "delete" {
                let obj = st
                    .store
                    .delete(rt, &ns_str, name.as_deref().unwrap_or(""), &opts)?;
                Ok(json_response(200, &obj))
            } else {
                let q = list_query(rt, &query)?;
                let items = st.store.delete_collection(rt, ns.as_deref(), &q, &opts)?;
                Ok(json_response(
                    200,
                    &json!({
                        "kind": rt.list_kind(),
                        "apiVersion": rt.api_version(),
                        "metadata": {"resourceVersion": st.store.resource_version().to_string()},
                        "items": items.iter().map(|o| o.as_ref()).collect::<Vec<_>>(),
                    }),
                ))
            }
        }
        _ => Err(ApiError::method_not_allowed(verb)),
    }
}
