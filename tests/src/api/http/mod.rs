//! HTTP request handling: discovery, the REST verbs of every served resource, watches,
//! tables, logs and access reviews.
//!
//! This file is the entry ([`handle`]: injected faults, the request record); `state` is the
//! server's state, `record` a request's record, `response` the responses; `route` dispatches
//! by path to `discovery` (and `openapi`) or to `resource`, which names the target and verb and authorizes it,
//! and `verbs` answers it (with `watch`, `logs`, `tokens`, `reviews`, `scale`, `eviction`); `request` reads queries
//! and bodies, `authn` tells who is asking.

use super::status::ApiError;
use http::{header, Method, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use std::sync::Arc;

mod authn;
mod discovery;
mod eviction;
mod fields;
mod logs;
mod openapi;
mod record;
mod request;
mod resource;
mod response;
mod reviews;
mod route;
mod scale;
mod state;
#[cfg(test)]
mod tests;
mod tokens;
mod verbs;
mod watch;

pub use record::RequestRecord;
pub use response::Body;
use response::{error_response, full};
use route::route;
pub use state::{EncodedObjects, LogSource, State};
pub use tokens::mint_sa_token;
use watch::event_line;

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
    // Who asked, for the record (the route authenticates again, and refuses whom it must).
    let user = authn::authenticate(&st, req.headers())
        .map(|id| id.user)
        .unwrap_or_default();
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
    record(&st, &method, &uri, user, &resp, started);
    resp
}

fn record(
    st: &State,
    method: &Method,
    uri: &http::Uri,
    user: String,
    resp: &Response<Body>,
    started: std::time::Instant,
) {
    use hyper::body::Body as _;
    let rec = RequestRecord {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
        user,
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
