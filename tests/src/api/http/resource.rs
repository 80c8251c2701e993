//! A request for a resource: what it names (resource, namespace, name, subresource), its verb,
//! the verb's authorization, then its answer ([`super::verbs`]).

use super::request::{flag, negotiate};
use super::response::Body;
use super::state::State;
use super::verbs::Call;
use crate::api::auth::{Attributes, Identity};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use crate::api::store::Store;
use http::{Method, Response};
use hyper::body::Incoming;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// What a resource path names.
struct Target {
    rt: &'static ResourceType,
    ns: Option<String>,
    name: Option<String>,
    sub: String,
    /// A legacy `/watch/` path.
    legacy_watch: bool,
}

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
    let t = target(&st.store, group, version, rest)?;
    let watching = t.legacy_watch || flag(&query, "watch");
    let verb = verb(&parts, &t, watching)?;
    authorize(st, id, &t, verb)?;
    let shape = negotiate(&parts.headers);
    let call = Call {
        st,
        id,
        rt: t.rt,
        ns: t.ns,
        name: t.name,
        sub: t.sub,
        query,
        shape,
        parts,
    };
    match verb {
        "list" => call.list(),
        "watch" => call.watch(),
        "get" => call.get().await,
        "create" => call.create(body).await,
        "update" => call.update(body).await,
        "patch" => call.patch(body).await,
        "delete" | "deletecollection" => call.delete(body, verb == "delete").await,
        _ => Err(ApiError::method_not_allowed(verb)),
    }
}

/// The resource, namespace, name and subresource of a path below `/api/v1` or
/// `/apis/GROUP/VERSION` (`rest`).
fn target(store: &Store, group: &str, version: &str, rest: &[String]) -> Result<Target, ApiError> {
    let (legacy_watch, rest) = match rest.first().map(String::as_str) {
        Some("watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let (ns, rest): (Option<String>, &[String]) = if rest.len() >= 3
        && rest[0] == "namespaces"
        && store
            .lookup(group, version, &rest[2])
            .is_some_and(|r| r.namespaced)
    {
        (Some(rest[1].clone()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.is_empty() || rest.len() > 3 {
        return Err(ApiError::no_route());
    }
    let rt = store
        .lookup(group, version, &rest[0])
        .ok_or_else(ApiError::no_route)?;
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
    Ok(Target {
        rt,
        ns,
        name,
        sub,
        legacy_watch,
    })
}

/// The request's verb (list, watch, get, create, update, patch, delete, deletecollection),
/// if the resource and subresource allow it at this path.
fn verb(
    parts: &http::request::Parts,
    t: &Target,
    watching: bool,
) -> Result<&'static str, ApiError> {
    let not_allowed =
        || ApiError::method_not_allowed(&format!("{} {}", parts.method, parts.uri.path()));
    let verb = match (&parts.method, t.name.is_some()) {
        (&Method::GET, false) if watching => "watch",
        (&Method::GET, false) => "list",
        (&Method::GET, true) if watching => "watch",
        (&Method::GET, true) => "get",
        (&Method::POST, false) => "create",
        (&Method::POST, true) if t.sub == "token" || t.sub == "eviction" => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return Err(not_allowed()),
    };
    let verb_ok = match t.sub.as_str() {
        "" => t.rt.verbs.contains(&verb),
        "log" => verb == "get",
        "token" | "eviction" => verb == "create",
        _ => ["get", "update", "patch"].contains(&verb),
    };
    let rt = t.rt;
    if !verb_ok
        || (rt.namespaced
            && t.ns.is_none()
            && !["list", "watch", "deletecollection"].contains(&verb)
            && verb != "create")
    {
        return Err(not_allowed());
    }
    if rt.namespaced && t.ns.is_none() && verb == "create" {
        return Err(ApiError::method_not_allowed(&format!(
            "POST {} (create namespaced objects under /namespaces/NAMESPACE/)",
            parts.uri.path()
        )));
    }
    Ok(verb)
}

/// RBAC: whether `id` may do `verb` on the target (stored resources; reviews answer for
/// themselves).
fn authorize(st: &State, id: &Identity, t: &Target, verb: &str) -> Result<(), ApiError> {
    let rt = t.rt;
    let attrs = Attributes {
        verb: verb.to_string(),
        group: rt.group.to_string(),
        resource: rt.plural.to_string(),
        subresource: t.sub.clone(),
        namespace: t.ns.clone(),
        name: t.name.clone(),
    };
    if !rt.stored || id.allowed(&st.store, &attrs) {
        return Ok(());
    }
    let mut e = ApiError::new(403, "Forbidden", attrs.forbidden_message(&id.user));
    let mut d = json!({"kind": rt.plural});
    if let Some(n) = &t.name {
        d["name"] = json!(n);
    }
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    e.details = Some(d);
    Err(e)
}
