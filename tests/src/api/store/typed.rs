//! Typed helpers for in-process users (kubelet, controllers, tests): k8s-openapi types in and out.

use super::object::{from_obj, meta_str};
use super::params::{DeleteOptions, ListQuery, Part};
use super::state::Store;
use crate::api::resources;
use crate::api::status::ApiError;
use serde::{de::DeserializeOwned, Serialize};

impl Store {
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
