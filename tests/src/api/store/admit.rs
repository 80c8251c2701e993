//! Validating admission of the objects a request writes ([`crate::api::admission`]): under
//! the store's lock, with the stored policies, bindings and the request's Namespace.

use super::state::{Inner, Store};
use crate::api::admission::{self, Attributes, Policies};
use crate::api::resources::{self, ResourceType};
use crate::api::status::ApiError;
use serde_json::Value;

impl Inner {
    /// The policies, bindings and Namespace `ns` (none for "") admission reads.
    fn policies(&self, ns: &str) -> Policies {
        let all = |rt: &ResourceType| {
            self.tables
                .get(rt.key())
                .map(|t| t.values().cloned().collect())
                .unwrap_or_default()
        };
        Policies {
            policies: all(&admission::VALIDATINGADMISSIONPOLICIES),
            bindings: all(&admission::VALIDATINGADMISSIONPOLICYBINDINGS),
            namespace: self
                .tables
                .get(resources::NAMESPACES.key())
                .and_then(|t| t.get(&(String::new(), ns.to_string())))
                .cloned()
                .filter(|_| !ns.is_empty()),
        }
    }

    /// Admits the create (`old` None) or update of `new` if a request is being served on
    /// this thread ([`admission::during`]) for the object itself or its status; its warnings
    /// go to the request.
    pub(super) fn admit(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        old: Option<&Value>,
        new: &Value,
    ) -> Result<(), ApiError> {
        let Some((user, sub, dry_run)) = admission::current() else {
            return Ok(());
        };
        if !(sub.is_empty() || sub == "status") {
            return Ok(());
        }
        let p = self.policies(if rt.namespaced { ns } else { "" });
        if p.bindings.is_empty() {
            return Ok(());
        }
        let a = Attributes {
            resource: rt,
            subresource: &sub,
            kind: (rt.group, rt.version, rt.kind),
            operation: if old.is_some() { "UPDATE" } else { "CREATE" },
            namespace: if rt.namespaced { ns } else { "" },
            name: new["metadata"]["name"].as_str().unwrap_or(""),
            user: &user,
            dry_run,
            object: Some(new),
            old_object: old,
        };
        admission::warn(admission::admit(&p, &a)?);
        Ok(())
    }
}

impl Store {
    /// The policies and bindings stored now, and the Namespace `ns` (for a write admitted
    /// outside the store: a Scale's).
    pub fn admission_policies(&self, ns: &str) -> Policies {
        self.lock().policies(ns)
    }
}
