//! What the controller keeps of each MPIJob between reconciles, and the reconcile that starts
//! from it. The watch of every MPIJob of the cluster (the controller's and others') is read
//! into [`MpiJobHead`]: the name, namespace, uid, versions, creation and deletion, and
//! `spec.runPolicy.managedBy`. Every other field (the spec with its pod templates, the status,
//! the annotations such as kubectl's `last-applied-configuration`, the managed fields) is
//! skipped as the JSON is read, never held: a stored MPIJob of 1.5 MiB costs the store a few
//! hundred bytes, whoever manages it. The MPIJobs the controller manages are read in full from
//! the API server by their reconcile ([`reconcile_head`]), one at a time per reconcile, and
//! dropped when it ends.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::context::Context;
use super::desired::managed_by;
use super::reconcile::reconcile;
use super::retry::ReconcileError;
use crate::manifest::mpijob::model::MpiJob;
use crate::manifest::mpijob::stored::StoredMpiJob;

/// An MPIJob as the controller's store keeps it.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "Raw")]
pub(crate) struct MpiJobHead {
    pub metadata: ObjectMeta,
    /// `spec.runPolicy.managedBy`.
    pub managed_by: ManagedBy,
}

/// An MPIJob's `spec.runPolicy.managedBy`, read however the rest of its spec is shaped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum ManagedBy {
    /// No `spec`, `runPolicy` or `managedBy`.
    #[default]
    Absent,
    Named(String),
    /// `spec`, `runPolicy` or `managedBy` of another type than the model's: not the
    /// controller's (as [`StoredMpiJob::managed_by`] reads it).
    Unreadable,
}

impl MpiJobHead {
    /// Whether the controller reconciles this MPIJob ([`managed_by`]'s rule).
    pub(crate) fn ours(&self, manage_all: bool) -> bool {
        match &self.managed_by {
            ManagedBy::Absent => managed_by(None, manage_all),
            ManagedBy::Named(by) => managed_by(Some(by), manage_all),
            ManagedBy::Unreadable => false,
        }
    }
}

impl Resource for MpiJobHead {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        MpiJob::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        MpiJob::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        MpiJob::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        MpiJob::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The fields read; serde skips every other one without keeping it.
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    metadata: RawMeta,
    #[serde(default)]
    spec: Field<RunPolicy>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

/// What one level of the path `spec.runPolicy.managedBy` reads: the key it looks for in its
/// object, and how it reads that key's value.
trait Level: Sized {
    const KEY: &'static str;
    type Next: for<'de> Deserialize<'de> + Into<ManagedBy>;
}

/// `spec` looks for `runPolicy`.
struct RunPolicy;
impl Level for RunPolicy {
    const KEY: &'static str = "runPolicy";
    type Next = Field<ManagedByKey>;
}

/// `runPolicy` looks for `managedBy`.
struct ManagedByKey;
impl Level for ManagedByKey {
    const KEY: &'static str = "managedBy";
    type Next = Name;
}

/// An object of which one key (`L::KEY`) is read, every other skipped unkept; null or absent
/// is [`ManagedBy::Absent`], a value of another type [`ManagedBy::Unreadable`].
struct Field<L>(ManagedBy, std::marker::PhantomData<L>);

impl<L> Default for Field<L> {
    fn default() -> Self {
        Self(ManagedBy::Absent, std::marker::PhantomData)
    }
}

impl<L> From<Field<L>> for ManagedBy {
    fn from(f: Field<L>) -> Self {
        f.0
    }
}

impl<'de, L: Level> Deserialize<'de> for Field<L> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<L>(std::marker::PhantomData<L>);
        impl<'de, L: Level> Visitor<'de> for V<L> {
            type Value = Field<L>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Field<L>, A::Error> {
                let mut found = ManagedBy::Absent;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == L::KEY {
                        found = map.next_value::<L::Next>()?.into();
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Field(found, std::marker::PhantomData))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Field<L>, E> {
                Ok(Field::default())
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Field<L>, E> {
                Ok(Field::default())
            }
            fn visit_some<D2: serde::Deserializer<'de>>(
                self,
                d: D2,
            ) -> Result<Field<L>, D2::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Field<L>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Field(ManagedBy::Unreadable, std::marker::PhantomData))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Field<L>, E> {
                Ok(Field(ManagedBy::Unreadable, std::marker::PhantomData))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Field<L>, E> {
                Ok(Field(ManagedBy::Unreadable, std::marker::PhantomData))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Field<L>, E> {
                Ok(Field(ManagedBy::Unreadable, std::marker::PhantomData))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Field<L>, E> {
                Ok(Field(ManagedBy::Unreadable, std::marker::PhantomData))
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Field<L>, E> {
                Ok(Field(ManagedBy::Unreadable, std::marker::PhantomData))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `managedBy`'s value: a string names the controller, null is absent, any other type is
/// unreadable.
struct Name(ManagedBy);

impl From<Name> for ManagedBy {
    fn from(n: Name) -> Self {
        n.0
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Name, E> {
                Ok(Name(ManagedBy::Named(s.to_string())))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Name, E> {
                Ok(Name(ManagedBy::Absent))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Name, E> {
                Ok(Name(ManagedBy::Absent))
            }
            fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Name, D2::Error> {
                d.deserialize_any(self)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Name, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Name(ManagedBy::Unreadable))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Name, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Name(ManagedBy::Unreadable))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Name, E> {
                Ok(Name(ManagedBy::Unreadable))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Name, E> {
                Ok(Name(ManagedBy::Unreadable))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Name, E> {
                Ok(Name(ManagedBy::Unreadable))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Name, E> {
                Ok(Name(ManagedBy::Unreadable))
            }
        }
        d.deserialize_any(V)
    }
}

impl From<Raw> for MpiJobHead {
    fn from(raw: Raw) -> Self {
        let m = raw.metadata;
        Self {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                generation: m.generation,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
                ..Default::default()
            },
            managed_by: raw.spec.into(),
        }
    }
}

/// Reconciles the MPIJob of `head`: one that is not the controller's, or is being deleted, at
/// once and without a request; one that is, read in full from the API server (so the cache
/// never holds it, and the reconcile sees its latest version) and reconciled ([`reconcile`]).
pub(crate) async fn reconcile_head(
    head: Arc<MpiJobHead>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let name = head.name_any();
    let ns = head
        .namespace()
        .ok_or_else(|| ReconcileError::NoNamespace(name.clone()))?;
    let key = format!("{ns}/{name}");
    if !head.ours(ctx.settings.manage_all) || head.metadata.deletion_timestamp.is_some() {
        ctx.metrics.reconciled();
        ctx.metrics.set_phase(&key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    let api: Api<StoredMpiJob> = Api::namespaced(ctx.client.clone(), &ns);
    match api.get_opt(&name).await {
        Ok(Some(full)) => reconcile(Arc::new(full), ctx).await,
        Ok(None) => {
            // Deleted since the watch told of it: its objects go with it.
            ctx.metrics.reconciled();
            ctx.metrics.set_phase(&key, None);
            ctx.forget(&key);
            Ok(Action::await_change())
        }
        Err(source) => Err(ReconcileError::Api {
            what: format!("reading the MPIJob {key}"),
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
