//! The OpenAPI v3 documents of the built-in kinds the sandbox serves (`/openapi/v3/api/v1`,
//! `/openapi/v3/apis/apps/v1`, ...), from k8s-openapi's types: their definitions carry the names
//! (`io.k8s.api.core.v1.Pod`) and descriptions of the Kubernetes API's own, so that `kubectl
//! explain pod.spec.containers` works as on a cluster.
//!
//! Only the reads are published (each resource's `GET` of a list and of an object, with its
//! `x-kubernetes-group-version-kind`): no `PATCH`, so kubectl keeps computing strategic merge
//! patches from the types it was built with, and keeps validating built-in objects' fields
//! itself (the sandbox does not judge their unknown fields). JobSets are no k8s-openapi type
//! and are not published.

use super::admission;
use super::resources::{self, ResourceType};
use k8s_openapi::api::{
    admissionregistration, apps, batch, coordination, core, discovery, events, networking, rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use schemars::{Schema, SchemaGenerator};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;

type Add = fn(&mut SchemaGenerator) -> Schema;

/// Each published resource and how to add its kind's schema.
fn table() -> Vec<(&'static ResourceType, Add)> {
    use resources::*;
    vec![
        (&PODS, |g| g.subschema_for::<core::v1::Pod>()),
        (&SECRETS, |g| g.subschema_for::<core::v1::Secret>()),
        (&EVENTS, |g| g.subschema_for::<core::v1::Event>()),
        (&NAMESPACES, |g| g.subschema_for::<core::v1::Namespace>()),
        (&SERVICEACCOUNTS, |g| {
            g.subschema_for::<core::v1::ServiceAccount>()
        }),
        (&CONFIGMAPS, |g| g.subschema_for::<core::v1::ConfigMap>()),
        (&SERVICES, |g| g.subschema_for::<core::v1::Service>()),
        (&NODES, |g| g.subschema_for::<core::v1::Node>()),
        (&JOBS, |g| g.subschema_for::<batch::v1::Job>()),
        (&STATEFULSETS, |g| {
            g.subschema_for::<apps::v1::StatefulSet>()
        }),
        (&DEPLOYMENTS, |g| g.subschema_for::<apps::v1::Deployment>()),
        (&REPLICASETS, |g| g.subschema_for::<apps::v1::ReplicaSet>()),
        (&NETWORKPOLICIES, |g| {
            g.subschema_for::<networking::v1::NetworkPolicy>()
        }),
        (&ENDPOINTSLICES, |g| {
            g.subschema_for::<discovery::v1::EndpointSlice>()
        }),
        (&ROLES, |g| g.subschema_for::<rbac::v1::Role>()),
        (&ROLEBINDINGS, |g| {
            g.subschema_for::<rbac::v1::RoleBinding>()
        }),
        (&CLUSTERROLES, |g| {
            g.subschema_for::<rbac::v1::ClusterRole>()
        }),
        (&CLUSTERROLEBINDINGS, |g| {
            g.subschema_for::<rbac::v1::ClusterRoleBinding>()
        }),
        (&LEASES, |g| g.subschema_for::<coordination::v1::Lease>()),
        (&CUSTOMRESOURCEDEFINITIONS, |g| {
            g.subschema_for::<apiextensions::CustomResourceDefinition>()
        }),
        (&EVENTS_V1, |g| g.subschema_for::<events::v1::Event>()),
        (&admission::VALIDATINGADMISSIONPOLICIES, |g| {
            g.subschema_for::<admissionregistration::v1::ValidatingAdmissionPolicy>()
        }),
        (&admission::VALIDATINGADMISSIONPOLICYBINDINGS, |g| {
            g.subschema_for::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>()
        }),
    ]
}

/// One group/version's document and its hash (what the index's URL carries).
pub struct Document {
    pub doc: Value,
    pub hash: String,
}

/// The documents by index path (`api/v1`, `apis/apps/v1`), made once.
pub fn documents() -> &'static BTreeMap<String, Document> {
    static DOCS: OnceLock<BTreeMap<String, Document>> = OnceLock::new();
    DOCS.get_or_init(|| {
        build()
            .into_iter()
            .map(|(k, doc)| {
                let hash = hash(&doc);
                (k, Document { doc, hash })
            })
            .collect()
    })
}

/// The hash a document's URL carries: SHA-512 of its JSON, in upper-case hex (as the API
/// server gives it).
pub fn hash(doc: &Value) -> String {
    use sha2::{Digest, Sha512};
    let bytes = serde_json::to_vec(doc).expect("JSON values serialize");
    hex::encode_upper(Sha512::digest(&bytes))
}

fn build() -> BTreeMap<String, Value> {
    let mut generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| s.definitions_path = "#/components/schemas/".into())
        .into_generator();
    let mut kinds: Vec<(&'static ResourceType, String)> = Vec::new();
    for (rt, add) in table() {
        let reference = add(&mut generator).to_value();
        let name = reference["$ref"]
            .as_str()
            .and_then(|r| r.rsplit('/').next())
            .unwrap_or_default()
            .to_string();
        kinds.push((rt, name));
    }
    let mut schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    for (rt, name) in &kinds {
        if let Some(s) = schemas.get_mut(name) {
            s["x-kubernetes-group-version-kind"] = json!([gvk(rt)]);
        }
    }
    let mut docs: BTreeMap<String, Value> = BTreeMap::new();
    for (rt, name) in &kinds {
        let key = if rt.group.is_empty() {
            format!("api/{}", rt.version)
        } else {
            format!("apis/{}/{}", rt.group, rt.version)
        };
        let doc = docs.entry(key).or_insert_with(|| {
            json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": "v1.33.0"},
                "paths": {},
                "components": {"schemas": schemas},
            })
        });
        if let Some(paths) = doc["paths"].as_object_mut() {
            read_paths(rt, &format!("#/components/schemas/{name}"), paths);
        }
    }
    docs
}

fn gvk(rt: &ResourceType) -> Value {
    json!({"group": rt.group, "version": rt.version, "kind": rt.kind})
}

/// The `GET` of `rt`'s collection and of one object.
fn read_paths(rt: &ResourceType, reference: &str, paths: &mut Map<String, Value>) {
    let base = if rt.group.is_empty() {
        format!("/api/{}", rt.version)
    } else {
        format!("/apis/{}/{}", rt.group, rt.version)
    };
    let collection = if rt.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", rt.plural)
    } else {
        format!("{base}/{}", rt.plural)
    };
    let get = |action: &str, what: String| {
        json!({"get": {
            "description": what,
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": reference}}}}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(rt),
        }})
    };
    paths.insert(
        collection.clone(),
        get("list", format!("list objects of kind {}", rt.kind)),
    );
    paths.insert(
        format!("{collection}/{{name}}"),
        get("get", format!("read the specified {}", rt.kind)),
    );
}
