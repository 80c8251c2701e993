//! The store itself: its tables, history and owner index under one lock, the live feed, and
//! the commit of every change.

use super::event::{EventType, StoreEvent};
use super::object::{meta_str, owner_uids, Obj};
use crate::api::defaults::ensure_object;
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

pub(super) type Key = (String, String);

pub(super) struct Inner {
    pub(super) rv: u64,
    pub(super) tables: HashMap<&'static str, BTreeMap<Key, Obj>>,
    pub(super) history: VecDeque<Arc<StoreEvent>>,
    history_limit: usize,
    /// Events with rv <= compacted are no longer retained.
    pub(super) compacted: u64,
    /// owner uid -> dependents (resource key, namespace, name)
    pub(super) dependents: HashMap<String, BTreeSet<(&'static str, String, String)>>,
    /// Nodes whose kubelet terminates pods gracefully.
    pub(super) graceful_nodes: BTreeSet<String>,
    /// The resources the stored CustomResourceDefinitions register.
    pub(super) custom: Vec<&'static ResourceType>,
}

impl Inner {
    /// The stored object `ns`/`name` of `rt`, or 404.
    pub(super) fn stored(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Obj, ApiError> {
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
    pub(super) tx: broadcast::Sender<Arc<StoreEvent>>,
}

/// How many changes a live watcher may fall behind before it is ended with 410 Gone.
const BROADCAST_CAPACITY: usize = 1 << 16;
/// How many changes are retained for watch replay by default.
const DEFAULT_HISTORY: usize = 200_000;

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
                graceful_nodes: BTreeSet::new(),
                custom: Vec::new(),
            })),
            tx,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
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

    pub(super) fn commit(
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
        if std::ptr::eq(rt, &crate::api::resources::CUSTOMRESOURCEDEFINITIONS) {
            // The CRD's resources are served from now on, or no more.
            let removed = kind == EventType::Deleted;
            crate::api::crd::register(&mut g.custom, &obj, removed);
        }
        obj
    }
}
