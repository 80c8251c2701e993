//! Watches: the events a watcher sees (filtered, translated, rendered), bookmarks, ends.

use super::request::{flag, Shape};
use super::response::{streamed, Body};
use super::state::State;
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use crate::api::store::{EventType, ListQuery, Obj, StoreEvent, WatchStart};
use crate::api::table::{self, IncludeObject};
use bytes::Bytes;
use http::{header, Response};
use serde_json::{json, Value};
use std::collections::HashMap;
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
        if let Some(v) = self.rt.view {
            let shown = (v.from_storage)((*obj).clone());
            return Some(event_line(
                kind.as_str(),
                &render(shape, self.rt, include, &shown),
            ));
        }
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
        if ev.resource.key() != self.rt.key() {
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

/// What a watch request asks for.
struct WatchParams {
    /// Replay changes after this resourceVersion (None: start with the current objects).
    since: Option<u64>,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
    include: IncludeObject,
    shape: Shape,
}

impl WatchParams {
    fn of(query: &HashMap<String, String>, shape: Shape) -> Result<WatchParams, ApiError> {
        let since = match query.get("resourceVersion").map(String::as_str) {
            None | Some("") | Some("0") => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid resourceVersion {s:?}: must be a resourceVersion this server returned"
                ))
            })?),
        };
        let timeout = match query.get("timeoutSeconds").filter(|s| !s.is_empty()) {
            Some(s) => Duration::from_secs(
                s.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}")))?,
            ),
            None => Duration::from_secs(1800),
        };
        Ok(WatchParams {
            since,
            send_initial: flag(query, "sendInitialEvents"),
            bookmarks: flag(query, "allowWatchBookmarks"),
            timeout,
            include: IncludeObject::parse(query.get("includeObject").map(String::as_str)),
            shape,
        })
    }
}

/// Starts a watch of `rt` in `ns` (or everywhere) for the objects `q` selects; the response
/// streams its events.
pub(super) fn start_watch(
    st: &Arc<State>,
    rt: &'static ResourceType,
    ns: Option<String>,
    q: ListQuery,
    query: &HashMap<String, String>,
    shape: Shape,
) -> Result<Response<Body>, ApiError> {
    let p = WatchParams::of(query, shape)?;
    let pinned = q.fields.pinned_name().map(String::from);
    let filter = WatchFilter {
        rt,
        ns: ns.clone(),
        q,
        pinned,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    // A watch from a resourceVersion that is too old answers 200 with one ERROR event.
    let from = if p.send_initial { None } else { p.since };
    match st.store.watch(rt, ns.as_deref(), from) {
        Ok(start) => {
            let w = Watcher {
                filter,
                p,
                tx,
                shutdown: st.shutdown.clone(),
                drops: st.watch_drops.subscribe(),
                interval: Duration::from_millis(
                    st.bookmark_ms.load(std::sync::atomic::Ordering::Relaxed),
                ),
            };
            tokio::spawn(w.run(start));
        }
        Err(e) if e.code == 410 => {
            let _ = tx.try_send(event_line("ERROR", &e.to_status()));
        }
        Err(e) => return Err(e),
    }
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .header("Cache-Control", "no-cache, private")
        .body(streamed(rx))
        .expect("valid response"))
}

/// A running watch: what it sends to the client (`tx`) and what ends it.
struct Watcher {
    filter: WatchFilter,
    p: WatchParams,
    tx: mpsc::Sender<Bytes>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    drops: tokio::sync::watch::Receiver<u64>,
    /// Between bookmarks.
    interval: Duration,
}

impl Watcher {
    /// Sends the initial events, then every matching change and the bookmarks, until the
    /// client goes, the watch times out or falls behind, or the server stops or drops watches.
    async fn run(mut self, start: WatchStart) {
        let (shape, include) = (self.p.shape, self.p.include);
        let mut last_rv = start.resource_version;
        let initial_end = self.p.send_initial || self.p.since.is_none();
        for ev in &start.initial {
            if let Some(line) = self.filter.line(ev, shape, include) {
                if self.tx.send(line).await.is_err() {
                    return;
                }
            }
        }
        if self.p.send_initial
            && self.p.bookmarks
            && initial_end
            && self.tx.send(self.bookmark(last_rv, true)).await.is_err()
        {
            return;
        }
        let mut rx = start.rx;
        let deadline = tokio::time::sleep(self.p.timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(self.interval);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = self.shutdown.changed() => return,
                _ = self.drops.changed() => return,
                _ = self.tx.closed() => return,
                _ = &mut deadline => return,
                _ = tick.tick(), if self.p.bookmarks => {
                    if self.tx.send(self.bookmark(last_rv, false)).await.is_err() { return; }
                }
                r = rx.recv() => match r {
                    Ok(ev) => {
                        last_rv = last_rv.max(ev.rv);
                        if let Some(line) = self.filter.line(&ev, shape, include) {
                            if self.tx.send(line).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let e = ApiError::gone(format!("the watch fell {n} changes behind and was ended; watch again from a fresh list"));
                        let _ = self.tx.send(event_line("ERROR", &e.to_status())).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }

    /// A BOOKMARK at `rv` (`initial_end`: the end of the initial events).
    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let rt = self.filter.rt;
        event_line(
            "BOOKMARK",
            &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta}),
        )
    }
}
