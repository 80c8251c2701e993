//! Reads: get, dependents, paged lists, and the start of watches.

use super::event::{EventType, StoreEvent, WatchStart};
use super::object::{meta_str, Obj};
use super::params::{ListQuery, ListResult};
use super::state::{Key, Store};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    v: u64,
    ns: String,
    name: String,
}

impl Store {
    pub fn get(&self, rt: &'static ResourceType, ns: &str, name: &str) -> Result<Obj, ApiError> {
        let o = self.lock().stored(rt, ns, name)?;
        Ok(super::kinds::shown(rt, o))
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
                    items.push(super::kinds::shown(rt, v.clone()));
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
                    .filter(|e| e.resource.key() == rt.key() && in_ns(&e.namespace))
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
}
