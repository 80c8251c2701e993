//! What the store's operations take and give: the part an update writes, a patch, delete and
//! list options, a list's result.

use super::object::Obj;
use crate::api::selector::{FieldSelector, LabelSelector};
use serde_json::Value;

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
    /// `gracePeriodSeconds`: how long a pod's containers get to end after SIGTERM (None: the
    /// pod's `terminationGracePeriodSeconds`; 0: deleted at once).
    pub grace_period: Option<i64>,
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
