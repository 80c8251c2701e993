//! The object store: every object as JSON, a global resourceVersion counter, a bounded
//! history of changes for watch replay, and a broadcast channel for live watches.
//!
//! `state` is the store itself and the commit of a change, `object` a stored object's helpers,
//! `event` the changes watchers see, `params` what the operations take and give; one file per
//! kind of operation (`create`, `read`, `update`, `delete` with `graceful`, and `typed` for
//! k8s-openapi types); `admit` the validating admission of what a request writes; `gc` the garbage collector (dependents of a deleted object, Foreground
//! deletion, objects whose owners are gone).

mod admit;
mod create;
mod delete;
mod event;
mod gc;
mod graceful;
mod kinds;
mod managed;
mod object;
mod params;
mod read;
mod state;
#[cfg(test)]
mod tests;
mod typed;
mod update;

pub use event::{EventType, StoreEvent, WatchStart};
pub use gc::FOREGROUND_FINALIZER;
pub use managed::FieldOwner;
pub use object::{from_obj, Obj};
pub use params::{DeleteOptions, ListQuery, ListResult, Part, Patch};
pub use state::Store;
