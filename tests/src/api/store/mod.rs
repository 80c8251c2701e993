//! The object store: every object as JSON, a global resourceVersion counter, a bounded
//! history of changes for watch replay, and a broadcast channel for live watches.

use super::defaults::{self, ensure_object, new_uid, now_rfc3339, random_suffix};
use super::resources::{self, ResourceType};
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use base64::Engine;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

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

#[derive(Serialize, serde::Deserialize)]
struct ContinueToken {
    v: u64,
    ns: String,
    name: String,
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

    // ---- reads ----

    pub fn get(&self, rt: &'static ResourceType, ns: &str, name: &str) -> Result<Obj, ApiError> {
        let g = self.lock();
        g.tables
            .get(rt.key())
            .and_then(|t| t.get(&(ns.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// Objects owned (via ownerReferences) by the object with this uid.
    pub fn dependents(&self, uid: &str) -> Vec<Obj> {
        let g = self.lock();
        let Some(set) = g.dependents.get(uid) else {
            return Vec::new();
        };
        set.iter()
            .filter_map(|(k, ns, n)| {
                g.tables
                    .get(k)
                    .and_then(|t| t.get(&(ns.clone(), n.clone())))
                    .cloned()
            })
            .collect()
    }

    pub fn list(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        q: &ListQuery,
    ) -> Result<ListResult, ApiError> {
        let g = self.lock();
        let (snapshot_rv, start) = match &q.continue_token {
            Some(tok) if !tok.is_empty() => {
                let t: ContinueToken = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(tok)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .ok_or_else(|| ApiError::bad_request(format!("continue key is not valid: {tok:?} is not a continue token this server issued")))?;
                if t.v < g.compacted {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (t.v, Some((t.ns, t.name)))
            }
            _ => (g.rv, None),
        };
        let empty = BTreeMap::new();
        let table = g.tables.get(rt.key()).unwrap_or(&empty);
        let lower = match (&start, ns) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let filtered = q.labels.is_empty() && q.fields.is_empty();
        let mut items = Vec::new();
        let mut last: Option<&Key> = None;
        let mut remaining: u64 = 0;
        for (k, v) in table.range((lower, Bound::Unbounded)) {
            if let Some(ns) = ns {
                if k.0 != ns {
                    break;
                }
            }
            if !(q.labels.matches(v) && q.fields.matches(v)) {
                continue;
            }
            match q.limit {
                Some(l) if l > 0 && items.len() >= l => {
                    remaining += 1;
                    if !filtered {
                        // With selectors the real server does not count the rest either.
                        break;
                    }
                }
                _ => {
                    items.push(v.clone());
                    last = Some(k);
                }
            }
        }
        let continue_token = if remaining > 0 {
            let k = last.expect("a page with a remainder has a last item");
            let t = ContinueToken {
                v: snapshot_rv,
                ns: k.0.clone(),
                name: k.1.clone(),
            };
            Some(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(serde_json::to_vec(&t).expect("serializable")),
            )
        } else {
            None
        };
        Ok(ListResult {
            items,
            resource_version: snapshot_rv,
            remaining: (remaining > 0 && filtered).then_some(remaining),
            continue_token,
        })
    }

    /// Starts a watch of one resource. `since: None` begins with an ADDED event for every
    /// current object; `Some(rv)` replays retained changes after `rv` (410 if compacted away).
    pub fn watch(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        since: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let g = self.lock();
        let in_ns = |e_ns: &str| ns.is_none_or(|n| n == e_ns);
        let initial: Vec<Arc<StoreEvent>> = match since {
            None => {
                let empty = BTreeMap::new();
                let table = g.tables.get(rt.key()).unwrap_or(&empty);
                let iter: Box<dyn Iterator<Item = (&Key, &Obj)>> = match ns {
                    Some(n) => Box::new(
                        table
                            .range((
                                Bound::Included((n.to_string(), String::new())),
                                Bound::Unbounded,
                            ))
                            .take_while(move |(k, _)| k.0 == n),
                    ),
                    None => Box::new(table.iter()),
                };
                iter.map(|(k, v)| {
                    Arc::new(StoreEvent {
                        rv: meta_str(v, "resourceVersion")
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0),
                        kind: EventType::Added,
                        resource: rt,
                        namespace: k.0.clone(),
                        name: k.1.clone(),
                        object: v.clone(),
                        old: None,
                        json: Default::default(),
                    })
                })
                .collect()
            }
            Some(rv) => {
                if rv < g.compacted {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {} ({})",
                        rv,
                        g.compacted + 1
                    )));
                }
                let from = g.history.partition_point(|e| e.rv <= rv);
                g.history
                    .range(from..)
                    .filter(|e| std::ptr::eq(e.resource, rt) && in_ns(&e.namespace))
                    .cloned()
                    .collect()
            }
        };
        let rx = self.tx.subscribe();
        Ok(WatchStart {
            initial,
            rx,
            resource_version: g.rv,
        })
    }

    // ---- writes ----

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

    /// Creates an object of `rt` in namespace `ns` ("" for cluster-scoped resources).
    pub fn create(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        obj: Value,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        let mut g = self.lock();
        self.create_locked(&mut g, rt, ns, obj, dry_run)
    }

    fn create_locked(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        ns: &str,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} create must be a JSON object",
                rt.kind
            )));
        }
        check_type(rt, &obj)?;
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        ensure_object(&mut obj, "/metadata");
        let body_ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        if rt.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
                )));
            }
            if ns.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "{} must be created in a namespace",
                    rt.qualified()
                )));
            }
            let ns_key = (String::new(), ns.to_string());
            if !g
                .tables
                .get(resources::NAMESPACES.key())
                .is_some_and(|t| t.contains_key(&ns_key))
            {
                return Err(ApiError::not_found(&resources::NAMESPACES, ns));
            }
            obj["metadata"]["namespace"] = json!(ns);
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let table = g.tables.entry(rt.key()).or_default();
        let mut name = meta_str(&obj, "name").unwrap_or("").to_string();
        if name.is_empty() {
            let Some(prefix) = meta_str(&obj, "generateName")
                .filter(|s| !s.is_empty())
                .map(String::from)
            else {
                return Err(ApiError::invalid(
                    rt,
                    "",
                    &[(
                        "metadata.name".into(),
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            };
            for _ in 0..100 {
                let candidate = format!("{prefix}{}", random_suffix());
                if !table.contains_key(&(ns.to_string(), candidate.clone())) {
                    name = candidate;
                    break;
                }
            }
            if name.is_empty() {
                return Err(ApiError::new(
                    409,
                    "AlreadyExists",
                    format!("could not generate a unique name from generateName {prefix:?}"),
                ));
            }
            obj["metadata"]["name"] = json!(name);
        }
        if let Err(e) = defaults::check_name(rt, &name) {
            return Err(ApiError::invalid(rt, &name, &[("metadata.name".into(), e)]));
        }
        if table.contains_key(&(ns.to_string(), name.clone())) {
            return Err(ApiError::already_exists(rt, &name));
        }
        let m = obj["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        m.insert("uid".into(), json!(new_uid()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if obj.get("spec").is_some() {
            obj["metadata"]["generation"] = json!(1);
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("generation");
        }
        defaults::apply(rt, &mut obj, true);
        defaults::validate(rt, &obj, None)?;
        if rt.is("", "pods") {
            // The ServiceAccount admission check.
            let sa = obj
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string();
            let sa_key = (ns.to_string(), sa.clone());
            if !g
                .tables
                .get(resources::SERVICEACCOUNTS.key())
                .is_some_and(|t| t.contains_key(&sa_key))
            {
                return Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!("pods \"{name}\" is forbidden: error looking up service account {ns}/{sa}: serviceaccount \"{sa}\" not found"),
                ));
            }
        }
        let obj = normalize(rt, obj)?;
        if dry_run {
            return Ok(Arc::new(obj));
        }
        let created = self.commit(g, rt, EventType::Added, obj, None);
        if rt.is("", "namespaces") {
            // As the service-account controller does: every namespace gets a "default" SA.
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}});
            let _ = self.create_locked(g, &resources::SERVICEACCOUNTS, &name, sa, false);
        }
        Ok(created)
    }

    /// Replaces an object (PUT). A non-empty metadata.resourceVersion must match the stored one.
    pub fn update(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        obj: Value,
        part: Part,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        let mut g = self.lock();
        self.update_locked(&mut g, rt, ns, name, obj, part, true, dry_run)
    }

    #[allow(clippy::too_many_arguments)]
    fn update_locked(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        mut obj: Value,
        part: Part,
        check_rv: bool,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} update must be a JSON object",
                rt.kind
            )));
        }
        check_type(rt, &obj)?;
        let key = (ns.to_string(), name.to_string());
        let old = g
            .tables
            .get(rt.key())
            .and_then(|t| t.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        ensure_object(&mut obj, "/metadata");
        let body_name = meta_str(&obj, "name").unwrap_or("");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta_str(&obj, "namespace").unwrap_or("");
        if rt.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
            )));
        }
        if check_rv {
            if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty()) {
                if Some(rv) != meta_str(&old, "resourceVersion") {
                    return Err(ApiError::conflict(
                        rt,
                        name,
                        "the object has been modified; please apply your changes to the latest version and try again",
                    ));
                }
            }
        }
        let mut new = match part {
            Part::Main => {
                let mut new = obj;
                if rt.has_status() {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                new
            }
            Part::Status => {
                let mut new = (*old).clone();
                match obj.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                new
            }
        };
        new["apiVersion"] = json!(rt.api_version());
        new["kind"] = json!(rt.kind);
        {
            let om = old["metadata"]
                .as_object()
                .expect("stored objects have metadata");
            let nm = new["metadata"]
                .as_object_mut()
                .expect("metadata is an object");
            for f in [
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generateName",
            ] {
                match om.get(f) {
                    Some(v) => nm.insert(f.into(), v.clone()),
                    None => nm.remove(f),
                };
            }
            nm.remove("resourceVersion");
            let gen = om.get("generation").and_then(Value::as_i64);
            match gen {
                Some(g) => nm.insert("generation".into(), json!(g)),
                None => nm.remove("generation"),
            };
        }
        defaults::apply(rt, &mut new, false);
        defaults::validate(rt, &new, Some(&old))?;
        let mut new = normalize(rt, new)?;
        if new.get("spec") != old.get("spec") && new.get("spec").is_some() {
            let gen = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            new["metadata"]["generation"] = json!(gen + 1);
        }
        if without_rv(&new) == without_rv(&old) {
            return Ok(old);
        }
        if dry_run {
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            return Ok(Arc::new(new));
        }
        Ok(self.commit(g, rt, EventType::Modified, new, Some(old)))
    }

    /// Applies a patch to an object (to its status only, for `Part::Status`).
    pub fn patch(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        patch: Patch,
        part: Part,
        dry_run: bool,
    ) -> Result<Obj, ApiError> {
        let mut g = self.lock();
        let key = (ns.to_string(), name.to_string());
        let current = g.tables.get(rt.key()).and_then(|t| t.get(&key)).cloned();
        let Some(current) = current else {
            if let (Patch::Apply(body), Part::Main) = (&patch, part) {
                let mut body = body.clone();
                ensure_object(&mut body, "/metadata");
                body["metadata"]["name"] = json!(name);
                return self.create_locked(&mut g, rt, ns, body, dry_run);
            }
            return Err(ApiError::not_found(rt, name));
        };
        let mut doc = (*current).clone();
        match patch {
            Patch::Merge(p) | Patch::Apply(p) => {
                if !p.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                json_patch::merge(&mut doc, &p);
            }
            Patch::Json(p) => {
                let ops: json_patch::Patch = serde_json::from_value(p).map_err(|e| {
                    ApiError::bad_request(format!("the JSON patch is malformed: {e}"))
                })?;
                json_patch::patch(&mut doc, &ops).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!("the JSON patch could not be applied: {e}"),
                    )
                })?;
            }
        }
        // A resourceVersion in the patch is a precondition.
        let rv_in_patch =
            meta_str(&doc, "resourceVersion") != meta_str(&current, "resourceVersion");
        self.update_locked(&mut g, rt, ns, name, doc, part, rv_in_patch, dry_run)
    }

    /// Reads, changes and writes an object atomically (no conflicts), e.g. for status updates.
    pub fn modify(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        part: Part,
        f: impl FnOnce(&mut Value),
    ) -> Result<Obj, ApiError> {
        let mut g = self.lock();
        let key = (ns.to_string(), name.to_string());
        let current = g
            .tables
            .get(rt.key())
            .and_then(|t| t.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let mut doc = (*current).clone();
        f(&mut doc);
        self.update_locked(&mut g, rt, ns, name, doc, part, false, false)
    }

    /// Deletes an object (immediately, whatever the grace period) and, unless the propagation
    /// policy is "Orphan", the objects it owns; deleting a namespace deletes its contents.
    pub fn delete(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Obj, ApiError> {
        let mut g = self.lock();
        self.delete_locked(&mut g, rt, ns, name, opts)
    }

    fn delete_locked(
        &self,
        g: &mut Inner,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Obj, ApiError> {
        let key = (ns.to_string(), name.to_string());
        let old = g
            .tables
            .get(rt.key())
            .and_then(|t| t.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if let Some(uid) = &opts.precondition_uid {
            if meta_str(&old, "uid") != Some(uid.as_str()) {
                return Err(ApiError::conflict(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&old, "uid").unwrap_or("")
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.precondition_rv {
            if meta_str(&old, "resourceVersion") != Some(rv.as_str()) {
                return Err(ApiError::conflict(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta_str(&old, "resourceVersion").unwrap_or("")
                    ),
                ));
            }
        }
        let mut last = (*old).clone();
        last["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
        last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if opts.dry_run {
            return Ok(Arc::new(last));
        }
        let deleted = self.commit(g, rt, EventType::Deleted, last, Some(old.clone()));
        // Contents of a deleted namespace.
        if rt.is("", "namespaces") {
            let doomed: Vec<(&'static ResourceType, String)> = resources::ALL
                .iter()
                .filter(|r| r.namespaced)
                .flat_map(|r| {
                    g.tables
                        .get(r.key())
                        .map(|t| {
                            t.range((
                                Bound::Included((name.to_string(), String::new())),
                                Bound::Unbounded,
                            ))
                            .take_while(|(k, _)| k.0 == name)
                            .map(|(k, _)| (*r, k.1.clone()))
                            .collect::<Vec<_>>()
                        })
                        .unwrap_or_default()
                })
                .collect();
            for (r, n) in doomed {
                let _ = self.delete_locked(g, r, name, &n, &DeleteOptions::default());
            }
        }
        // Garbage collection of dependents.
        if let Some(uid) = meta_str(&old, "uid").map(String::from) {
            let deps: Vec<(&'static str, String, String)> = g
                .dependents
                .get(&uid)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
            let orphan = opts.propagation.as_deref() == Some("Orphan");
            for (k, dns, dname) in deps {
                let Some(drt) = resources::ALL.iter().copied().find(|r| r.key() == k) else {
                    continue;
                };
                if orphan {
                    let dkey = (dns.clone(), dname.clone());
                    if let Some(cur) = g.tables.get(k).and_then(|t| t.get(&dkey)).cloned() {
                        let mut doc = (*cur).clone();
                        if let Some(a) = doc
                            .pointer_mut("/metadata/ownerReferences")
                            .and_then(Value::as_array_mut)
                        {
                            a.retain(|o| {
                                o.get("uid").and_then(Value::as_str) != Some(uid.as_str())
                            });
                        }
                        let _ =
                            self.update_locked(g, drt, &dns, &dname, doc, Part::Main, false, false);
                    }
                } else {
                    let _ = self.delete_locked(g, drt, &dns, &dname, &DeleteOptions::default());
                }
            }
        }
        Ok(deleted)
    }

    /// Deletes every object of `rt` in `ns` (or everywhere) matching the query's selectors.
    pub fn delete_collection(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        q: &ListQuery,
        opts: &DeleteOptions,
    ) -> Result<Vec<Obj>, ApiError> {
        let all = ListQuery {
            labels: q.labels.clone(),
            fields: q.fields.clone(),
            limit: None,
            continue_token: None,
        };
        let items = self.list(rt, ns, &all)?.items;
        let mut g = self.lock();
        let mut out = Vec::new();
        for it in items {
            let ns = meta_str(&it, "namespace").unwrap_or("");
            let name = meta_str(&it, "name").unwrap_or("");
            if let Ok(o) = self.delete_locked(&mut g, rt, ns, name, opts) {
                out.push(o);
            }
        }
        Ok(out)
    }

    // ---- typed helpers for in-process users (kubelet, controllers, tests) ----

    /// Creates a typed object; its namespace comes from metadata.namespace (default "default").
    pub fn create_obj<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        obj: &K,
    ) -> Result<K, ApiError> {
        let rt = resources::of::<K>();
        let v = serde_json::to_value(obj).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let ns = if rt.namespaced {
            meta_str(&v, "namespace")
                .filter(|s| !s.is_empty())
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        from_obj(&*self.create(rt, &ns, v, false)?)
    }

    /// Gets a typed object ("" namespace for cluster-scoped kinds).
    pub fn get_obj<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<K, ApiError> {
        from_obj(&*self.get(resources::of::<K>(), ns, name)?)
    }

    /// Lists typed objects in a namespace (or all namespaces).
    pub fn list_objs<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: Option<&str>,
    ) -> Vec<K> {
        self.list(resources::of::<K>(), ns, &ListQuery::default())
            .map(|l| l.items.iter().filter_map(|o| from_obj(o).ok()).collect())
            .unwrap_or_default()
    }

    /// Replaces a typed object (conflict if its resourceVersion is stale).
    pub fn update_obj<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        obj: &K,
    ) -> Result<K, ApiError> {
        let rt = resources::of::<K>();
        let v = serde_json::to_value(obj).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let ns = meta_str(&v, "namespace").unwrap_or("").to_string();
        let name = meta_str(&v, "name").unwrap_or("").to_string();
        from_obj(&*self.update(rt, &ns, &name, v, Part::Main, false)?)
    }

    /// Atomically changes a typed object (`Part::Status` to change its status).
    pub fn modify_obj<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        ns: &str,
        name: &str,
        part: Part,
        f: impl FnOnce(&mut K),
    ) -> Result<K, ApiError> {
        let rt = resources::of::<K>();
        let mut err = None;
        let out = self.modify(rt, ns, name, part, |v| {
            match serde_json::from_value::<K>(v.clone()) {
                Ok(mut k) => {
                    f(&mut k);
                    match serde_json::to_value(&k) {
                        Ok(n) => *v = n,
                        Err(e) => err = Some(ApiError::internal(e.to_string())),
                    }
                }
                Err(e) => err = Some(ApiError::internal(e.to_string())),
            }
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        from_obj(&out)
    }

    /// Deletes a typed object (and its dependents).
    pub fn delete_obj<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<K, ApiError> {
        from_obj(&*self.delete(resources::of::<K>(), ns, name, &DeleteOptions::default())?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::{NAMESPACES, PODS};

    fn store() -> Store {
        let s = Store::new();
        s.create(
            &NAMESPACES,
            "",
            json!({"metadata": {"name": "default"}}),
            false,
        )
        .unwrap();
        s
    }

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}})
    }

    #[test]
    fn create_get_conflict_delete() {
        let s = store();
        let p = s.create(&PODS, "default", pod("a"), false).unwrap();
        assert_eq!(p["status"]["phase"], "Pending");
        assert!(p["metadata"]["uid"].as_str().unwrap().len() == 36);
        let e = s.create(&PODS, "default", pod("a"), false).unwrap_err();
        assert_eq!(e.code, 409);
        let mut stale = (*p).clone();
        s.modify(&PODS, "default", "a", Part::Main, |v| {
            v["metadata"]["labels"]["b"] = json!("c")
        })
        .unwrap();
        stale["metadata"]["labels"]["z"] = json!("1");
        assert_eq!(
            s.update(&PODS, "default", "a", stale, Part::Main, false)
                .unwrap_err()
                .reason,
            "Conflict"
        );
        s.delete(&PODS, "default", "a", &DeleteOptions::default())
            .unwrap();
        assert_eq!(s.get(&PODS, "default", "a").unwrap_err().code, 404);
        assert_eq!(
            s.create(&PODS, "nope", pod("a"), false).unwrap_err().code,
            404
        );
    }

    #[test]
    fn status_is_separate() {
        let s = store();
        s.create(&PODS, "default", pod("a"), false).unwrap();
        let p = s
            .patch(
                &PODS,
                "default",
                "a",
                Patch::Merge(json!({"status": {"phase": "Running"}})),
                Part::Main,
                false,
            )
            .unwrap();
        assert_eq!(p["status"]["phase"], "Pending");
        let p = s
            .patch(
                &PODS,
                "default",
                "a",
                Patch::Merge(json!({"status": {"phase": "Running"}})),
                Part::Status,
                false,
            )
            .unwrap();
        assert_eq!(p["status"]["phase"], "Running");
    }

    #[test]
    fn pages_and_gone() {
        let s = store();
        for i in 0..25 {
            s.create(&PODS, "default", pod(&format!("p{i:03}")), false)
                .unwrap();
        }
        let mut seen = Vec::new();
        let mut q = ListQuery {
            limit: Some(10),
            ..Default::default()
        };
        loop {
            let r = s.list(&PODS, Some("default"), &q).unwrap();
            seen.extend(
                r.items
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
            );
            match r.continue_token {
                Some(t) => q.continue_token = Some(t),
                None => break,
            }
        }
        assert_eq!(seen.len(), 25);
        let first = s
            .list(
                &PODS,
                None,
                &ListQuery {
                    limit: Some(10),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(first.remaining, Some(15));
        s.compact();
        s.create(&PODS, "default", pod("late"), false).unwrap();
        let e = s
            .list(
                &PODS,
                None,
                &ListQuery {
                    limit: Some(10),
                    continue_token: first.continue_token,
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.code, 410);
        assert_eq!(
            s.watch(&PODS, None, Some(3)).err().map(|e| e.code),
            Some(410)
        );
    }

    #[test]
    fn gc_of_dependents() {
        let s = store();
        let owner = s.create(&PODS, "default", pod("owner"), false).unwrap();
        let mut d = pod("dep");
        d["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner["metadata"]["uid"]}]);
        s.create(&PODS, "default", d, false).unwrap();
        assert_eq!(
            s.dependents(owner["metadata"]["uid"].as_str().unwrap())
                .len(),
            1
        );
        s.delete(&PODS, "default", "owner", &DeleteOptions::default())
            .unwrap();
        assert_eq!(s.get(&PODS, "default", "dep").unwrap_err().code, 404);
    }
}
