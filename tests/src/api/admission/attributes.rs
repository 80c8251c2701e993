//! What admission decides on: the request's attributes, and the policies and bindings stored.

use super::request::UserInfo;
use crate::api::resources::ResourceType;
use serde_json::Value;
use std::sync::Arc;

/// What admission knows of a request.
pub struct Attributes<'a> {
    /// The resource written (its group, version and plural).
    pub resource: &'static ResourceType,
    /// "" for the object itself, "status", "scale".
    pub subresource: &'a str,
    /// The group, version and kind of `object`: the resource's, or autoscaling/v1 Scale.
    pub kind: (&'a str, &'a str, &'a str),
    /// "CREATE" or "UPDATE".
    pub operation: &'static str,
    /// "" for a cluster-scoped resource.
    pub namespace: &'a str,
    pub name: &'a str,
    pub user: &'a UserInfo,
    pub dry_run: bool,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
}

/// The stored policies and bindings, and the request's Namespace object.
#[derive(Default)]
pub struct Policies {
    pub policies: Vec<Arc<Value>>,
    pub bindings: Vec<Arc<Value>>,
    pub namespace: Option<Arc<Value>>,
}
