//! The kinds a store serves: the built-in ones and those its CustomResourceDefinitions
//! register; and resources that are views of another's objects (converted on the way in and
//! out).

use super::object::Obj;
use super::state::{Inner, Store};
use crate::api::resources::{self, ResourceType};
use crate::api::status::ApiError;
use serde_json::Value;
use std::sync::Arc;

impl Inner {
    /// Every served resource: the built-in ones (admission policies among them), then the
    /// custom ones.
    pub(super) fn kinds(&self) -> impl Iterator<Item = &'static ResourceType> + '_ {
        resources::ALL
            .iter()
            .chain(crate::api::admission::KINDS)
            .copied()
            .chain(self.custom.iter().copied())
    }

    /// The stored resource whose objects the store keeps under `key`.
    pub(super) fn kind_by_key(&self, key: &str) -> Option<&'static ResourceType> {
        self.kinds()
            .find(|r| r.stored && r.view.is_none() && r.key() == key)
    }

    /// The stored resource of `apiVersion` and `kind` (an owner reference's).
    pub(super) fn kind_of(&self, api_version: &str, kind: &str) -> Option<&'static ResourceType> {
        self.kinds().find(|r| {
            r.stored && r.view.is_none() && r.kind == kind && r.api_version() == api_version
        })
    }
}

impl Store {
    /// Every resource served now (the built-in ones and those of established CRDs).
    pub fn kinds(&self) -> Vec<&'static ResourceType> {
        self.lock().kinds().collect()
    }

    /// The resource served at `/apis/GROUP/VERSION/PLURAL` (or `/api/v1/PLURAL`).
    pub fn lookup(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&'static ResourceType> {
        self.lock()
            .kinds()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// The stored resource of `apiVersion` and `kind`, as written in a manifest.
    pub fn kind_of(&self, api_version: &str, kind: &str) -> Option<&'static ResourceType> {
        self.lock().kind_of(api_version, kind)
    }

    /// The API groups served besides the core group, each with its versions.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
        for rt in self.kinds().into_iter().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == rt.group) {
                Some((_, vs)) if !vs.contains(&rt.version) => vs.push(rt.version),
                Some(_) => {}
                None => out.push((rt.group, vec![rt.version])),
            }
        }
        out
    }
}

/// A stored object as `rt` shows it (converted, if `rt` is a view).
pub(super) fn shown(rt: &ResourceType, o: Obj) -> Obj {
    match rt.view {
        Some(v) => Arc::new((v.from_storage)((*o).clone())),
        None => o,
    }
}

/// An object written through view `rt` as its storage keeps it (invalid: 422 naming the
/// fields).
pub(super) fn to_storage(rt: &ResourceType, body: Value) -> Result<Value, ApiError> {
    match rt.view {
        Some(v) => {
            let name = super::object::meta_str(&body, "name")
                .unwrap_or("")
                .to_string();
            (v.to_storage)(body).map_err(|causes| ApiError::invalid(rt, &name, &causes))
        }
        None => Ok(body),
    }
}
