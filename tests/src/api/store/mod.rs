//! The object store: every object as JSON, a global resourceVersion counter, a bounded
//! history of changes for watch replay, and a broadcast channel for live watches.

use super::defaults::ensure_object;
use super::resources::ResourceType;
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

mod create;
mod delete;
mod read;
#[cfg(test)]
mod tests;
mod typed;
mod update;

/// A stored object (always JSON with apiVersion, kind and metadata).
pub type Obj = Arc<Value>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in the store.
#[derive(Debug)]
pub struct StoreEvent {
    pub rv: u64,
    pub kind: EventType,
    pub resource: &'static ResourceType,
    pub namespace: String,
    pub name: String,
    /// The object after the change (for DELETED: its last state, at the deletion's resourceVersion).
    pub object: Obj,
    /// The object before a MODIFIED change.
    pub old: Option<Obj>,
    /// The object serialized once for all watchers.
    json: std::sync::OnceLock<bytes::Bytes>,
}

impl StoreEvent {
    /// The object as JSON bytes (computed once, shared by every watcher).
    pub fn object_json(&self) -> bytes::Bytes {
        self.json
            .get_or_init(|| {
                bytes::Bytes::from(
                    serde_json::to_vec(&*self.object).expect("JSON values serialize"),
                )
            })
            .clone()
    }
}

/// Which part of an object an update writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main resource: status changes are ignored for resources with a status subresource.
    Main,
    /// The status subresource: only status changes are taken.
    Status,
}

/// The body of a PATCH.
#[derive(Clone, Debug)]
pub enum Patch {
    /// JSON merge patch (RFC 7386); strategic merge patches are applied this way too.
    Merge(Value),
    /// JSON patch (RFC 6902).
    Json(Value),
    /// Server-side apply: merged into the object, which is created if missing.
    Apply(Value),
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// "Orphan" keeps dependents (removing their owner references); otherwise they are deleted.
    pub propagation: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

#[derive(Debug)]
pub struct ListResult {
    pub items: Vec<Obj>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

/// The start of a watch: events to send first, then the live receiver.
pub struct WatchStart {
    pub initial: Vec<Arc<StoreEvent>>,
    pub rx: broadcast::Receiver<Arc<StoreEvent>>,
    /// The store's resourceVersion when the watch started.
    pub resource_version: u64,
}

type Key = (String, String);

struct Inner {
    rv: u64,
    tables: HashMap<&'static str, BTreeMap<Key, Obj>>,
    history: VecDeque<Arc<StoreEvent>>,
    history_limit: usize,
    /// Events with rv <= compacted are no longer retained.
    compacted: u64,
    /// owner uid -> dependents (resource key, namespace, name)
    dependents: HashMap<String, BTreeSet<(&'static str, String, String)>>,
}

impl Inner {
    /// The stored object `ns`/`name` of `rt`, or 404.
    fn stored(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Obj, ApiError> {
        self.tables
            .get(rt.key())
            .and_then(|t| t.get(&(ns.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))
    }
}

/// A clonable handle to the object store.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    tx: broadcast::Sender<Arc<StoreEvent>>,
}

/// How many changes a live watcher may fall behind before it is ended with 410 Gone.
const BROADCAST_CAPACITY: usize = 1 << 16;
/// How many changes are retained for watch replay by default.
const DEFAULT_HISTORY: usize = 200_000;

fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

fn owner_uids(v: &Value) -> Vec<String> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| o.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// An empty store (no namespaces); the API server seeds the usual ones.
    pub fn new() -> Store {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Store {
            inner: Arc::new(Mutex::new(Inner {
                rv: 0,
                tables: HashMap::new(),
                history: VecDeque::new(),
                history_limit: DEFAULT_HISTORY,
                compacted: 0,
                dependents: HashMap::new(),
            })),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Drops all retained history: watches and continue tokens from before now get 410 Gone.
    pub fn compact(&self) {
        let mut g = self.lock();
        g.history.clear();
        // Every resourceVersion handed out so far becomes too old.
        g.rv += 1;
        g.compacted = g.rv;
    }

    /// Sets how many changes are retained for watch replay (older ones are compacted away).
    pub fn set_history_limit(&self, n: usize) {
        let mut g = self.lock();
        g.history_limit = n.max(1);
        while g.history.len() > g.history_limit {
            if let Some(e) = g.history.pop_front() {
                g.compacted = e.rv;
            }
        }
    }

    /// A live feed of every change (all resources); combine with a list for a consistent view
    /// via [`Store::watch`].
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoreEvent>> {
        self.tx.subscribe()
    }

    fn commit(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        kind: EventType,
        mut obj: Value,
        old: Option<Obj>,
    ) -> Obj {
        g.rv += 1;
        let rv = g.rv;
        ensure_object(&mut obj, "/metadata");
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let obj = Arc::new(obj);
        let key = (ns.clone(), name.clone());
        // Keep the owner index in step.
        if let Some(o) = &old {
            for uid in owner_uids(o) {
                if let Some(s) = g.dependents.get_mut(&uid) {
                    s.remove(&(rt.key(), ns.clone(), name.clone()));
                    if s.is_empty() {
                        g.dependents.remove(&uid);
                    }
                }
            }
        }
        let table = g.tables.entry(rt.key()).or_default();
        if kind == EventType::Deleted {
            table.remove(&key);
        } else {
            table.insert(key, obj.clone());
            for uid in owner_uids(&obj) {
                g.dependents
                    .entry(uid)
                    .or_default()
                    .insert((rt.key(), ns.clone(), name.clone()));
            }
        }
        let ev = Arc::new(StoreEvent {
            rv,
            kind,
            resource: rt,
            namespace: ns,
            name,
            object: obj.clone(),
            old: if kind == EventType::Modified {
                old
            } else {
                None
            },
            json: Default::default(),
        });
        g.history.push_back(ev.clone());
        while g.history.len() > g.history_limit {
            if let Some(e) = g.history.pop_front() {
                g.compacted = e.rv;
            }
        }
        let _ = self.tx.send(ev);
        obj
    }
}

/// Converts a stored object to a typed one.
pub fn from_obj<K: DeserializeOwned>(o: &Value) -> Result<K, ApiError> {
    K::deserialize(o).map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))
}

fn check_type(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if (!av.is_empty() && av != rt.api_version()) || (!kind.is_empty() && kind != rt.kind) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) and kind ({kind}) do not match the expected {} {} for {}",
            rt.api_version(),
            rt.kind,
            rt.qualified()
        )));
    }
    Ok(())
}

fn normalize(rt: &ResourceType, obj: Value) -> Result<Value, ApiError> {
    (rt.normalize)(obj).map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            rt.kind, rt.version, rt.kind
        ))
    })
}
