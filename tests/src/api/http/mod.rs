//! HTTP request handling: discovery, the REST verbs of every served resource, watches,
//! tables, logs and access reviews.

use super::auth::{Attributes, Identity, RightsSource};
use super::resources::{self, ResourceType};
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{DeleteOptions, EventType, ListQuery, Obj, Part, Patch, Store, StoreEvent};
use super::table::{self, IncludeObject};
use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Maps a pod (namespace, name) to its log file, when the pod runs somewhere.
pub type LogSource = Arc<dyn Fn(&str, &str) -> Option<PathBuf> + Send + Sync>;

/// Shared state of a running API server.
pub struct State {
    pub store: Store,
    pub tokens: RwLock<HashMap<String, Identity>>,
    pub addr: SocketAddr,
    pub shutdown: watch::Receiver<bool>,
    /// How often watches that allow bookmarks get one, in milliseconds.
    pub bookmark_ms: std::sync::atomic::AtomicU64,
    pub logs: RwLock<Option<LogSource>>,
    /// Bumped to end every open watch (see [`super::ApiServer::drop_watches`]).
    pub watch_drops: watch::Sender<u64>,
    /// Injected faults (see [`super::faults`]).
    pub faults: super::faults::Faults,
    /// Every request served, in order (see [`super::ApiServer::requests`]).
    pub requests: std::sync::Mutex<Vec<RequestRecord>>,
    /// The JSON encoding of stored objects served in full lists (see [`EncodedObjects`]).
    pub encoded: EncodedObjects,
}

/// The JSON encoding of each stored object a full list served, kept for the next list.
///
/// Stored objects are immutable (`Arc`s; a change stores a new one), so an encoding is keyed by
/// the object's allocation and stays valid while that allocation lives; the `Weak` kept with it
/// proves that (and keeps the address from being reused). A list of thousands of objects then
/// costs the server a copy of their bytes, not their serialization, much as kube-apiserver's
/// watch cache keeps objects' encodings; benchmarks of clients measure the client.
#[derive(Default)]
pub struct EncodedObjects {
    map: std::sync::Mutex<HashMap<usize, (std::sync::Weak<Value>, Bytes)>>,
}

impl EncodedObjects {
    /// Entries kept before dead ones are swept.
    const SWEEP_AT: usize = 4096;

    /// `items` as a JSON array, from kept encodings where they exist.
    fn array(&self, items: &[Obj]) -> Vec<u8> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= Self::SWEEP_AT.max(2 * items.len()) {
            map.retain(|_, (w, _)| w.strong_count() > 0);
        }
        let mut out = Vec::with_capacity(items.len() * 2048 + 2);
        out.push(b'[');
        for (i, o) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let key = Arc::as_ptr(o) as usize;
            match map.get(&key) {
                Some((w, bytes)) if w.upgrade().is_some_and(|a| Arc::ptr_eq(&a, o)) => {
                    out.extend_from_slice(bytes)
                }
                _ => {
                    let bytes =
                        Bytes::from(serde_json::to_vec(o.as_ref()).expect("JSON values serialize"));
                    out.extend_from_slice(&bytes);
                    map.insert(key, (Arc::downgrade(o), bytes));
                }
            }
        }
        out.push(b']');
        out
    }
}

/// One request the server answered: what a client asked for and how big the answer was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    pub status: u16,
    /// Bytes of the response body when it was sent whole (0 for streams such as watches).
    pub body_bytes: u64,
    /// Microseconds the server spent on the request until its response was ready to send
    /// (authentication, store access, filtering and, for whole bodies, serialization); the
    /// rest of what a client waits is transfer, TLS and its own work.
    pub server_us: u64,
}

impl RequestRecord {
    /// Whether this was a watch (`watch=true`/`watch=1` or a legacy `/watch/` path).
    pub fn is_watch(&self) -> bool {
        super::faults::is_watch(Some(&self.query)) || self.path.contains("/watch/")
    }

    /// Whether this was a list (a GET of a collection that is not a watch). A collection path
    /// ends with a resource name: `/api/v1/pods`, `/api/v1/namespaces/NS/pods`,
    /// `/apis/G/V/namespaces/NS/R`.
    pub fn is_list(&self) -> bool {
        if self.method != "GET" || self.is_watch() {
            return false;
        }
        let parts: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        let rest = match parts.first() {
            Some(&"api") if parts.len() >= 2 => &parts[2..],
            Some(&"apis") if parts.len() >= 3 => &parts[3..],
            _ => return false,
        };
        matches!(rest, [_] | ["namespaces", _, _])
    }

    /// The value of query parameter `key`, if present.
    pub fn param(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }
}

const MAX_BODY: usize = 16 << 20;

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    bytes_response(code, serde_json::to_vec(v).expect("JSON values serialize"))
}

/// A response with a JSON body already serialized.
fn bytes_response(code: u16, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header("Cache-Control", "no-cache, private")
        .body(full(body))
        .expect("valid response")
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status())
}

fn text_response(code: u16, s: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(s.into()))
        .expect("valid response")
}

/// Entry point for every request.
pub async fn handle(st: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    let path = uri.to_string();
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let watch = super::faults::is_watch(req.uri().query());
    let fault = st.faults.pick(method.as_str(), req.uri().path(), watch);
    let resp = match fault {
        Some(super::faults::Fault::Status(code)) => {
            tracing::debug!(%method, %path, code, "injected fault: status");
            return error_response(&injected_status(code));
        }
        Some(super::faults::Fault::WatchGone) if watch => {
            let e = ApiError::gone("too old resource version (injected fault)");
            return Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "application/json")
                .body(full(event_line("ERROR", &e.to_status())))
                .expect("valid response");
        }
        Some(super::faults::Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            route(&st, req).await
        }
        _ => route(&st, req).await,
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    let resp = match fault {
        Some(super::faults::Fault::CloseWatchAfter(n)) if watch => {
            let (parts, body) = resp.into_parts();
            let frames = futures::StreamExt::take(http_body_util::BodyStream::new(body), n);
            Response::from_parts(parts, StreamBody::new(frames).boxed_unsync())
        }
        Some(super::faults::Fault::CloseWatchAfterTime(d)) if watch => {
            let (parts, body) = resp.into_parts();
            let frames = futures::StreamExt::take_until(
                http_body_util::BodyStream::new(body),
                tokio::time::sleep(d),
            );
            Response::from_parts(parts, StreamBody::new(frames).boxed_unsync())
        }
        _ => resp,
    };
    tracing::debug!(%method, %path, %ct, %accept, status = resp.status().as_u16(), "request");
    record(&st, &method, &uri, &resp, started);
    resp
}

fn record(
    st: &State,
    method: &Method,
    uri: &http::Uri,
    resp: &Response<Body>,
    started: std::time::Instant,
) {
    use hyper::body::Body as _;
    let rec = RequestRecord {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
        status: resp.status().as_u16(),
        body_bytes: resp.body().size_hint().exact().unwrap_or(0),
        server_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
    };
    let mut log = st.requests.lock().unwrap_or_else(|p| p.into_inner());
    // A long-running sandbox keeps only the most recent requests.
    if log.len() >= MAX_RECORDED {
        log.drain(..MAX_RECORDED / 2);
    }
    log.push(rec);
}

/// Requests kept by [`State::requests`].
const MAX_RECORDED: usize = 100_000;

/// The Kubernetes `Status` a real API server sends with `code`.
fn injected_status(code: u16) -> ApiError {
    let reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    ApiError::new(code, reason, format!("injected fault: {code} {reason}"))
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn authenticate(st: &State, headers: &HeaderMap) -> Result<Identity, ApiError> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .map(str::trim);
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Err(ApiError::unauthorized());
    };
    let id = st
        .tokens
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(token)
        .cloned()
        .ok_or_else(ApiError::unauthorized)?;
    impersonate(st, id, headers)
}

/// Honours `Impersonate-User` / `Impersonate-Group` (kubectl --as / --as-group) for callers
/// allowed to impersonate; the impersonated identity's rights come from RBAC objects.
fn impersonate(st: &State, id: Identity, headers: &HeaderMap) -> Result<Identity, ApiError> {
    let Some(user) = headers
        .get("Impersonate-User")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return Ok(id);
    };
    let groups: Vec<String> = headers
        .get_all("Impersonate-Group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(String::from))
        .collect();
    let (kind, ns, name) = match user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, n)) => ("serviceaccounts", Some(ns.to_string()), n.to_string()),
        None => ("users", None, user.clone()),
    };
    let a = Attributes {
        verb: "impersonate".into(),
        group: String::new(),
        resource: kind.into(),
        subresource: String::new(),
        namespace: ns.clone(),
        name: Some(name),
    };
    if !id.allowed(&st.store, &a) {
        let mut e = ApiError::new(403, "Forbidden", a.forbidden_message(&id.user));
        e.details = Some(json!({"name": user, "kind": kind}));
        return Err(e);
    }
    let mut all_groups = groups;
    if let Some(ns) = &ns {
        all_groups.extend([
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ]);
    }
    all_groups.push("system:authenticated".into());
    Ok(Identity {
        user,
        uid: String::new(),
        groups: all_groups,
        source: RightsSource::Rbac,
    })
}

fn version_info() -> Value {
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

async fn route(st: &Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parse_query(parts.uri.query());
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => return Ok(json_response(200, &version_info())),
        ["healthz"] | ["livez"] | ["readyz"] => return Ok(text_response(200, "ok")),
        _ => {}
    }
    if let ["openapi", "v2"] = segs.as_slice() {
        authenticate(st, &parts.headers)?;
        return Ok(openapi_v2(&parts.headers));
    }
    let id = authenticate(st, &parts.headers)?;
    if parts.method != Method::GET
        && matches!(segs.first(), Some(&"api") | Some(&"apis"))
        && segs.len() <= 3
        && !(segs.len() == 3 && segs[0] == "api")
    {
        return Err(ApiError::method_not_allowed(&path));
    }
    match segs.as_slice() {
        ["api"] => Ok(json_response(
            200,
            &json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": st.addr.to_string()}],
            }),
        )),
        ["api", "v1"] => Ok(json_response(200, &resource_list("", "v1"))),
        ["apis"] => Ok(json_response(200, &group_list())),
        ["apis", g] => group_list()["groups"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == *g).cloned())
            .map(|mut grp| {
                grp["kind"] = json!("APIGroup");
                grp["apiVersion"] = json!("v1");
                json_response(200, &grp)
            })
            .ok_or_else(ApiError::no_route),
        ["apis", g, v]
            if resources::groups()
                .iter()
                .any(|(gg, vv)| gg == g && vv == v) =>
        {
            Ok(json_response(200, &resource_list(g, v)))
        }
        ["api", "v1", rest @ ..] => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource_request(st, &id, parts, body, query, "", "v1", &rest).await
        }
        ["apis", g, v, rest @ ..] => {
            let (g, v) = (g.to_string(), v.to_string());
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource_request(st, &id, parts, body, query, &g, &v, &rest).await
        }
        _ => Err(ApiError::no_route()),
    }
}

fn resource_list(group: &str, version: &str) -> Value {
    let mut out = Vec::new();
    for rt in resources::ALL
        .iter()
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
                "token" => {
                    s["kind"] = json!("TokenRequest");
                    s["group"] = json!("authentication.k8s.io");
                    s["version"] = json!("v1");
                    s["verbs"] = json!(["create"]);
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

fn group_list() -> Value {
    let groups: Vec<Value> = resources::groups()
        .iter()
        .map(|(g, v)| {
            let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
            json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The response shape the client asked for in `Accept`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    Full,
    Table(&'static str),
    Partial(&'static str),
}

fn negotiate(headers: &HeaderMap) -> Shape {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for cand in accept.split(',') {
        let mut it = cand.split(';').map(str::trim);
        let media = it.next().unwrap_or("");
        let params: HashMap<&str, &str> = it.filter_map(|p| p.split_once('=')).collect();
        if media != "application/json" && media != "*/*" && media != "application/*" {
            continue;
        }
        let gv = match (params.get("g"), params.get("v")) {
            (Some(&"meta.k8s.io"), Some(&"v1")) => Some("meta.k8s.io/v1"),
            (Some(&"meta.k8s.io"), Some(&"v1beta1")) => Some("meta.k8s.io/v1beta1"),
            _ => None,
        };
        match params.get("as") {
            None => return Shape::Full,
            Some(&"Table") => {
                if let Some(gv) = gv {
                    return Shape::Table(gv);
                }
            }
            Some(&"PartialObjectMetadata") | Some(&"PartialObjectMetadataList") => {
                if let Some(gv) = gv {
                    return Shape::Partial(gv);
                }
            }
            _ => {}
        }
    }
    Shape::Full
}

async fn read_body(body: Incoming) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    limited.collect().await.map(|c| c.to_bytes()).map_err(|e| {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("could not read the request body: {e}"),
        )
    })
}

fn parse_body(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.contains("protobuf") {
        return super::protobuf::decode_object(bytes).map_err(|e| {
            let mut err = ApiError::unsupported_media_type(ct);
            err.message = format!("cannot decode the protobuf body ({e}); {}", err.message);
            err
        });
    }
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; send a JSON object",
        ));
    }
    if ct.contains("yaml") {
        serde_yaml::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
    }
}

fn list_query(rt: &ResourceType, q: &HashMap<String, String>) -> Result<ListQuery, ApiError> {
    let labels = match q.get("labelSelector") {
        Some(s) => LabelSelector::parse(s)
            .map_err(|e| ApiError::bad_request(format!("invalid labelSelector {s:?}: {e}")))?,
        None => LabelSelector::default(),
    };
    let fields = match q.get("fieldSelector") {
        Some(s) => FieldSelector::parse(rt, s)
            .map_err(|e| ApiError::bad_request(format!("invalid fieldSelector {s:?}: {e}")))?,
        None => FieldSelector::default(),
    };
    let limit = match q.get("limit").filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid limit {s:?}: must be a non-negative integer"
            ))
        })?),
        None => None,
    };
    Ok(ListQuery {
        labels,
        fields,
        limit,
        continue_token: q.get("continue").cloned().filter(|s| !s.is_empty()),
    })
}

fn flag(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

fn dry_run(q: &HashMap<String, String>) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
}

#[allow(clippy::too_many_arguments)]
async fn resource_request(
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

/// An OpenAPI v2 document without schemas: kubectl downloads one before creating objects from
/// files, and skips client-side validation of kinds it does not describe.
fn openapi_v2(headers: &HeaderMap) -> Response<Body> {
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
        &json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": {}, "definitions": {}}),
    )
}

// ---- watch ----

fn event_line(kind: &str, obj: &Value) -> Bytes {
    let mut b = serde_json::to_vec(&json!({"type": kind, "object": obj})).expect("JSON serializes");
    b.push(b'\n');
    Bytes::from(b)
}

struct WatchFilter {
    rt: &'static ResourceType,
    ns: Option<String>,
    q: ListQuery,
    pinned: Option<String>,
}

impl WatchFilter {
    fn matches(&self, o: &Value) -> bool {
        self.q.labels.matches(o) && self.q.fields.matches(o)
    }

    /// The watch line for a store event, if this watcher should see it.
    fn line(&self, ev: &StoreEvent, shape: Shape, include: IncludeObject) -> Option<Bytes> {
        let (kind, obj) = self.translate(ev)?;
        if shape == Shape::Full {
            let body = ev.object_json();
            let head = format!("{{\"type\":\"{}\",\"object\":", kind.as_str());
            let mut b = Vec::with_capacity(head.len() + body.len() + 2);
            b.extend_from_slice(head.as_bytes());
            b.extend_from_slice(&body);
            b.extend_from_slice(b"}\n");
            return Some(Bytes::from(b));
        }
        Some(event_line(
            kind.as_str(),
            &render(shape, self.rt, include, &obj),
        ))
    }

    /// What a watcher with this filter should see for a store event.
    fn translate(&self, ev: &StoreEvent) -> Option<(EventType, Obj)> {
        if !std::ptr::eq(ev.resource, self.rt) {
            return None;
        }
        if let Some(ns) = &self.ns {
            if *ns != ev.namespace {
                return None;
            }
        }
        if let Some(p) = &self.pinned {
            if *p != ev.name {
                return None;
            }
        }
        let now = self.matches(&ev.object);
        match ev.kind {
            EventType::Added => now.then(|| (EventType::Added, ev.object.clone())),
            EventType::Deleted => now.then(|| (EventType::Deleted, ev.object.clone())),
            EventType::Modified => {
                let before = ev.old.as_ref().map(|o| self.matches(o)).unwrap_or(true);
                match (before, now) {
                    (true, true) => Some((EventType::Modified, ev.object.clone())),
                    (false, true) => Some((EventType::Added, ev.object.clone())),
                    (true, false) => Some((EventType::Deleted, ev.object.clone())),
                    (false, false) => None,
                }
            }
        }
    }
}

fn render(shape: Shape, rt: &ResourceType, include: IncludeObject, obj: &Value) -> Value {
    match shape {
        Shape::Full => obj.clone(),
        Shape::Partial(pv) => table::partial_metadata(obj, pv),
        Shape::Table(tv) => {
            let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
            table::table(rt, &[obj], include, tv, meta)
        }
    }
}

fn start_watch(
    st: &Arc<State>,
    rt: &'static ResourceType,
    ns: Option<String>,
    q: ListQuery,
    query: &HashMap<String, String>,
    shape: Shape,
) -> Result<Response<Body>, ApiError> {
    let since = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid resourceVersion {s:?}: must be a resourceVersion this server returned"
            ))
        })?),
    };
    let send_initial = flag(query, "sendInitialEvents");
    let bookmarks = flag(query, "allowWatchBookmarks");
    let timeout = match query.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        Some(s) => Duration::from_secs(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}")))?,
        ),
        None => Duration::from_secs(1800),
    };
    let include = IncludeObject::parse(query.get("includeObject").map(String::as_str));
    let pinned = q.fields.pinned_name().map(String::from);
    let filter = WatchFilter {
        rt,
        ns: ns.clone(),
        q,
        pinned,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    // A watch from a resourceVersion that is too old answers 200 with one ERROR event.
    let start = match st
        .store
        .watch(rt, ns.as_deref(), if send_initial { None } else { since })
    {
        Ok(s) => Some(s),
        Err(e) if e.code == 410 => {
            let _ = tx.try_send(event_line("ERROR", &e.to_status()));
            None
        }
        Err(e) => return Err(e),
    };
    if let Some(start) = start {
        let mut shutdown = st.shutdown.clone();
        let mut drops = st.watch_drops.subscribe();
        let interval =
            Duration::from_millis(st.bookmark_ms.load(std::sync::atomic::Ordering::Relaxed));
        tokio::spawn(async move {
            let mut last_rv = start.resource_version;
            let initial_end = send_initial || since.is_none();
            for ev in &start.initial {
                if let Some(line) = filter.line(ev, shape, include) {
                    if tx.send(line).await.is_err() {
                        return;
                    }
                }
            }
            let bookmark = |rv: u64, initial_end: bool| {
                let mut meta = json!({"resourceVersion": rv.to_string()});
                if initial_end {
                    meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                event_line(
                    "BOOKMARK",
                    &json!({"kind": filter.rt.kind, "apiVersion": filter.rt.api_version(), "metadata": meta}),
                )
            };
            if send_initial
                && bookmarks
                && initial_end
                && tx.send(bookmark(last_rv, true)).await.is_err()
            {
                return;
            }
            let mut rx = start.rx;
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = drops.changed() => return,
                    _ = tx.closed() => return,
                    _ = &mut deadline => return,
                    _ = tick.tick(), if bookmarks => {
                        if tx.send(bookmark(last_rv, false)).await.is_err() { return; }
                    }
                    r = rx.recv() => match r {
                        Ok(ev) => {
                            last_rv = last_rv.max(ev.rv);
                            if let Some(line) = filter.line(&ev, shape, include) {
                                if tx.send(line).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            let e = ApiError::gone(format!("the watch fell {n} changes behind and was ended; watch again from a fresh list"));
                            let _ = tx.send(event_line("ERROR", &e.to_status())).await;
                            return;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
        });
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .header("Cache-Control", "no-cache, private")
        .body(StreamBody::new(stream).boxed_unsync())
        .expect("valid response"))
}

// ---- logs ----

async fn pod_log(
    st: &Arc<State>,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let pod = st.store.get(&resources::PODS, ns, name)?;
    let src = st.logs.read().unwrap_or_else(|p| p.into_inner()).clone();
    let path = src.and_then(|f| f(ns, name)).ok_or_else(|| {
        ApiError::bad_request(format!(
            "no log is available for pod \"{name}\": only pods the sandbox kubelet runs have logs"
        ))
    })?;
    let data = tokio::fs::read(&path).await.unwrap_or_default();
    let tail = q.get("tailLines").and_then(|s| s.parse::<usize>().ok());
    let mut text = data;
    if let Some(n) = tail {
        let lines: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
        let start = lines.len().saturating_sub(n);
        text = lines[start..].concat();
    }
    if !flag(q, "follow") {
        return Ok(text_response(200, text));
    }
    // follow: stream what is there, then what gets appended while the pod runs.
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let store = st.store.clone();
    let mut shutdown = st.shutdown.clone();
    let (ns, name, uid) = (
        ns.to_string(),
        name.to_string(),
        pod["metadata"]["uid"].clone(),
    );
    let mut offset = tokio::fs::metadata(&path)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    let _ = tx.send(Bytes::from(text)).await;
    tokio::spawn(async move {
        let mut feed = store.subscribe();
        loop {
            let done = match store.get(&resources::PODS, &ns, &name) {
                Ok(p) => {
                    p["metadata"]["uid"] != uid
                        || matches!(
                            p.pointer("/status/phase").and_then(Value::as_str),
                            Some("Succeeded") | Some("Failed")
                        )
                }
                Err(_) => true,
            };
            if let Ok(data) = tokio::fs::read(&path).await {
                if (data.len() as u64) > offset {
                    if tx
                        .send(Bytes::copy_from_slice(&data[offset as usize..]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    offset = data.len() as u64;
                }
            }
            if done {
                return;
            }
            // Re-check on any pod change, or every 200ms for appended output.
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
                _ = feed.recv() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(StreamBody::new(stream).boxed_unsync())
        .expect("valid response"))
}

// ---- tokens and reviews ----

/// Mints a service-account token and registers it.
pub fn mint_sa_token(st: &State, ns: &str, name: &str) -> String {
    use base64::Engine;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let now = super::defaults::now_secs();
    let sa_uid = st
        .store
        .get(&resources::SERVICEACCOUNTS, ns, name)
        .ok()
        .and_then(|o| {
            o.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .unwrap_or_default();
    let user = format!("system:serviceaccount:{ns}:{name}");
    let header = json!({"alg": "RS256", "kid": "prrte-k8s-sandbox"});
    let claims = json!({
        "aud": ["https://kubernetes.default.svc.cluster.local"],
        "exp": now + 365 * 86400,
        "iat": now,
        "nbf": now,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": super::defaults::new_uid(),
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": sa_uid}},
        "sub": user,
    });
    let sig: [u8; 32] = rand::random();
    let token = format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(&sig)
    );
    let id = Identity {
        user,
        uid: sa_uid,
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
        source: RightsSource::Rbac,
    };
    st.tokens
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(token.clone(), id);
    token
}

fn token_request(st: &State, ns: &str, sa: &str, body: Value) -> Result<Response<Body>, ApiError> {
    st.store.get(&resources::SERVICEACCOUNTS, ns, sa)?;
    let token = mint_sa_token(st, ns, sa);
    let exp = super::defaults::rfc3339(super::defaults::now_secs() + 365 * 86400);
    let mut out = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": sa, "namespace": ns, "creationTimestamp": null},
        "spec": body.get("spec").cloned().unwrap_or(json!({})),
        "status": {"token": token, "expirationTimestamp": exp},
    });
    if out["spec"].get("audiences").is_none() {
        out["spec"]["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    Ok(json_response(201, &out))
}

fn non_resource_allowed(id: &Identity, path: &str, verb: &str) -> bool {
    let discovery = [
        "/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi",
    ];
    if verb == "get"
        && discovery
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")))
    {
        return true;
    }
    matches!(&id.source, RightsSource::Static { namespace: None, rules } if rules.iter().any(|r| r.verbs.iter().any(|v| v == "*") && r.resources.iter().any(|x| x == "*")))
}

fn review(
    st: &State,
    id: &Identity,
    rt: &ResourceType,
    body: Value,
) -> Result<Response<Body>, ApiError> {
    let body = (rt.normalize)(body)
        .map_err(|e| ApiError::bad_request(format!("{} cannot be decoded: {e}", rt.kind)))?;
    let mut out = body.clone();
    out["apiVersion"] = json!(rt.api_version());
    out["kind"] = json!(rt.kind);
    if out.get("metadata").is_none() {
        out["metadata"] = json!({});
    }
    out["metadata"]["creationTimestamp"] = Value::Null;
    match rt.plural {
        "selfsubjectaccessreviews" => {
            let allowed = if let Some(ra) = body.pointer("/spec/resourceAttributes") {
                let s = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let a = Attributes {
                    verb: s("verb"),
                    group: s("group"),
                    resource: s("resource"),
                    subresource: s("subresource"),
                    namespace: Some(s("namespace")).filter(|x| !x.is_empty()),
                    name: Some(s("name")).filter(|x| !x.is_empty()),
                };
                id.allowed(&st.store, &a)
            } else if let Some(na) = body.pointer("/spec/nonResourceAttributes") {
                let path = na.get("path").and_then(Value::as_str).unwrap_or("");
                let verb = na.get("verb").and_then(Value::as_str).unwrap_or("");
                non_resource_allowed(id, path, verb)
            } else {
                return Err(ApiError::invalid(rt, "", &[("spec.resourceAttributes".into(), "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into())]));
            };
            let reason = if allowed {
                format!("allowed for user \"{}\"", id.user)
            } else {
                String::new()
            };
            out["status"] = json!({"allowed": allowed});
            if allowed {
                out["status"]["reason"] = json!(reason);
            }
        }
        "selfsubjectrulesreviews" => {
            let ns = body
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let rules: Vec<Value> = id
                .rules(&st.store)
                .into_iter()
                .filter(|r| r.namespace.is_none() || r.namespace.as_deref() == Some(ns))
                .map(|r| {
                    let mut v = r.rule.to_json();
                    if !r.resource_names.is_empty() {
                        v["resourceNames"] = json!(r.resource_names);
                    }
                    v
                })
                .collect();
            out["status"] = json!({
                "resourceRules": rules,
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/readyz", "/version", "/version/"]}],
                "incomplete": false,
            });
        }
        "selfsubjectreviews" => {
            out["status"] =
                json!({"userInfo": {"username": id.user, "uid": id.uid, "groups": id.groups}});
        }
        _ => return Err(ApiError::method_not_allowed(rt.plural)),
    }
    Ok(json_response(201, &out))
}

#[cfg(test)]
mod tests {
    use super::RequestRecord;

    fn rec(method: &str, path: &str, query: &str) -> RequestRecord {
        RequestRecord {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            status: 200,
            body_bytes: 0,
            server_us: 0,
        }
    }

    #[test]
    fn records_tell_lists_gets_and_watches_apart() {
        let list = rec(
            "GET",
            "/api/v1/namespaces/ns/pods",
            "limit=500&labelSelector=app%3Dx",
        );
        assert!(list.is_list() && !list.is_watch());
        assert_eq!(list.param("limit").as_deref(), Some("500"));
        assert_eq!(list.param("labelSelector").as_deref(), Some("app=x"));
        assert!(rec("GET", "/api/v1/pods", "").is_list());
        assert!(rec("GET", "/apis/batch/v1/namespaces/ns/jobs", "").is_list());
        let get = rec("GET", "/api/v1/namespaces/ns/pods/p-0", "");
        assert!(!get.is_list() && !get.is_watch());
        assert!(!rec("GET", "/apis/batch/v1/namespaces/ns/jobs/j", "").is_list());
        let watch = rec(
            "GET",
            "/api/v1/namespaces/ns/pods",
            "watch=true&resourceVersion=3",
        );
        assert!(watch.is_watch() && !watch.is_list());
        assert!(rec("GET", "/api/v1/watch/namespaces/ns/pods", "").is_watch());
        assert!(!rec("POST", "/api/v1/namespaces/ns/pods", "").is_list());
        assert!(!rec("GET", "/version", "").is_list());
    }
}
