//! Changes in the store as watchers see them, and the start of a watch.

use super::object::Obj;
use crate::api::resources::ResourceType;
use std::sync::Arc;
use tokio::sync::broadcast;

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
    pub(super) json: std::sync::OnceLock<bytes::Bytes>,
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

/// The start of a watch: events to send first, then the live receiver.
pub struct WatchStart {
    pub initial: Vec<Arc<StoreEvent>>,
    pub rx: broadcast::Receiver<Arc<StoreEvent>>,
    /// The store's resourceVersion when the watch started.
    pub resource_version: u64,
}
