//! Watches: the events a watcher sees (filtered, translated, rendered), bookmarks, ends.

use super::request::{flag, Shape};
use super::{Body, State};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use crate::api::store::{EventType, ListQuery, Obj, StoreEvent};
use crate::api::table::{self, IncludeObject};
use bytes::Bytes;
use http::{header, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

pub(super) fn event_line(kind: &str, obj: &Value) -> Bytes {
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

pub(super) fn render(
    shape: Shape,
    rt: &ResourceType,
    include: IncludeObject,
    obj: &Value,
) -> Value {
    match shape {
        Shape::Full => obj.clone(),
        Shape::Partial(pv) => table::partial_metadata(obj, pv),
        Shape::Table(tv) => {
            let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
            table::table(rt, &[obj], include, tv, meta)
        }
    }
}

pub(super) fn start_watch(
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
