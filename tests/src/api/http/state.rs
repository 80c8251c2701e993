//! The server's shared state: the store, tokens, log sources, faults, the request record and
//! the kept encodings of listed objects.

use super::record::RequestRecord;
use crate::api::auth::Identity;
use crate::api::faults::Faults;
use crate::api::store::{Obj, Store};
use bytes::Bytes;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

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
    /// Bumped to end every open watch (see [`crate::api::ApiServer::drop_watches`]).
    pub watch_drops: tokio::sync::watch::Sender<u64>,
    /// Injected faults (see [`crate::api::faults`]).
    pub faults: Faults,
    /// Every request served, in order (see [`crate::api::ApiServer::requests`]).
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
    pub(super) fn array(&self, items: &[Obj]) -> Vec<u8> {
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
