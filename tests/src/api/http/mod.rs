//! HTTP request handling: discovery, the REST verbs of every served resource, watches,
//! tables, logs and access reviews.
//!
//! This file is the server's state, the responses and the entry ([`handle`]: injected faults,
//! the request record); `route` dispatches by path to `discovery` or to `resource`, which
//! names the target and verb and authorizes it, and `verbs` answers it (with `watch`, `logs`,
//! `tokens`, `reviews`); `request` reads queries and bodies, `authn` tells who is asking.

use super::auth::Identity;
use super::status::ApiError;
use super::store::{Obj, Store};
use bytes::Bytes;
use http::{header, Method, Request, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use serde_json::Value;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

mod authn;
mod discovery;
mod logs;
mod request;
mod resource;
mod reviews;
mod route;
#[cfg(test)]
mod tests;
mod tokens;
mod verbs;
mod watch;

use route::route;
pub use tokens::mint_sa_token;
use watch::event_line;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Maps a pod's container (namespace, pod name, container name) to its log file, when the
/// pod runs somewhere.
pub type LogSource = Arc<dyn Fn(&str, &str, &str) -> Option<PathBuf> + Send + Sync>;

/// Shared state of a running API server.
pub struct State {
    pub store: Store,
    pub tokens: RwLock<HashMap<String, Identity>>,
    pub addr: SocketAddr,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// How often watches that allow bookmarks get one, in milliseconds.
    pub bookmark_ms: std::sync::atomic::AtomicU64,
    pub logs: RwLock<Option<LogSource>>,
    /// Bumped to end every open watch (see [`super::ApiServer::drop_watches`]).
    pub watch_drops: tokio::sync::watch::Sender<u64>,
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

pub(super) const MAX_BODY: usize = 16 << 20;

pub(super) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

pub(super) fn json_response(code: u16, v: &Value) -> Response<Body> {
    bytes_response(code, serde_json::to_vec(v).expect("JSON values serialize"))
}

/// A response with a JSON body already serialized.
pub(super) fn bytes_response(code: u16, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header("Cache-Control", "no-cache, private")
        .body(full(body))
        .expect("valid response")
}

pub(super) fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status())
}

pub(super) fn text_response(code: u16, s: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(s.into()))
        .expect("valid response")
}

/// A body that streams what `rx` receives.
pub(super) fn streamed(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(hyper::body::Frame::data(b)), rx))
    });
    StreamBody::new(stream).boxed_unsync()
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
