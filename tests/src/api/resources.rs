//! The resource types the sandbox API server serves, with their discovery data and the
//! k8s-openapi type each stored object is checked against.

use k8s_openapi::api::{
    apps, authentication, authorization, batch, coordination, core, discovery, networking, rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

/// One served resource (or a create-only review resource).
pub struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// Subresources served for this resource ("status", "log", "token", "eviction").
    pub subresources: &'static [&'static str],
    /// Whether objects are kept in the store (false for access reviews).
    pub stored: bool,
    /// Round-trips an object through its k8s-openapi type: rejects malformed objects and
    /// drops unknown fields, as a real server's decoding does.
    pub normalize: fn(Value) -> Result<Value, String>,
    /// For a custom resource: what its CustomResourceDefinition says (see [`crate::api::crd`]).
    pub crd: Option<&'static crate::api::custom::CrdInfo>,
    /// For a resource served as another's stored objects, converted: how.
    pub view: Option<&'static View>,
}

/// Why an object is invalid: (field, message) pairs.
pub type Causes = Vec<(String, String)>;

/// A resource whose objects are another resource's, converted on the way in and out, as
/// `events.k8s.io/v1` Events are `core/v1` Events in one store.
pub struct View {
    pub storage: &'static ResourceType,
    /// Invalid: the causes (field, message).
    pub to_storage: fn(Value) -> Result<Value, Causes>,
    pub from_storage: fn(Value) -> Value,
    /// A field selector of the view as one of the storage.
    pub fields: fn(&str) -> String,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
    /// The key under which the store keeps this resource's objects.
    pub fn key(&self) -> &'static str {
        self.crd.map_or(self.plural, |c| c.key)
    }
    pub fn has_status(&self) -> bool {
        self.subresources.contains(&"status")
    }
    pub fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
    /// "pods" or "jobs.batch", as used in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

impl std::fmt::Debug for ResourceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.qualified())
    }
}

impl PartialEq for ResourceType {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

fn norm<K: DeserializeOwned + Serialize>(v: Value) -> Result<Value, String> {
    let k: K = serde_json::from_value(v).map_err(|e| e.to_string())?;
    serde_json::to_value(&k).map_err(|e| e.to_string())
}

const RW: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS: &[&str] = &["status"];
const STATUS_SCALE: &[&str] = &["status", "scale"];

macro_rules! rt {
    ($g:expr, $v:expr, $plural:expr, $singular:expr, $kind:expr, $ns:expr, $short:expr, $cat:expr, $verbs:expr, $sub:expr, $stored:expr, $ty:ty) => {
        ResourceType {
            group: $g,
            version: $v,
            plural: $plural,
            singular: $singular,
            kind: $kind,
            namespaced: $ns,
            short_names: $short,
            categories: $cat,
            verbs: $verbs,
            subresources: $sub,
            stored: $stored,
            normalize: norm::<$ty>,
            crd: None,
            view: None,
        }
    };
}

pub static PODS: ResourceType = rt!(
    "",
    "v1",
    "pods",
    "pod",
    "Pod",
    true,
    &["po"],
    &["all"],
    RW,
    &["status", "log", "eviction"],
    true,
    core::v1::Pod
);
pub static SECRETS: ResourceType = rt!(
    "",
    "v1",
    "secrets",
    "secret",
    "Secret",
    true,
    &[],
    &[],
    RW,
    &[],
    true,
    core::v1::Secret
);
pub static EVENTS: ResourceType = rt!(
    "",
    "v1",
    "events",
    "event",
    "Event",
    true,
    &["ev"],
    &[],
    RW,
    &[],
    true,
    core::v1::Event
);
pub static NAMESPACES: ResourceType = rt!(
    "",
    "v1",
    "namespaces",
    "namespace",
    "Namespace",
    false,
    &["ns"],
    &[],
    &["create", "delete", "get", "list", "patch", "update", "watch"],
    STATUS,
    true,
    core::v1::Namespace
);
pub static SERVICEACCOUNTS: ResourceType = rt!(
    "",
    "v1",
    "serviceaccounts",
    "serviceaccount",
    "ServiceAccount",
    true,
    &["sa"],
    &[],
    RW,
    &["token"],
    true,
    core::v1::ServiceAccount
);
pub static CONFIGMAPS: ResourceType = rt!(
    "",
    "v1",
    "configmaps",
    "configmap",
    "ConfigMap",
    true,
    &["cm"],
    &[],
    RW,
    &[],
    true,
    core::v1::ConfigMap
);
pub static SERVICES: ResourceType = rt!(
    "",
    "v1",
    "services",
    "service",
    "Service",
    true,
    &["svc"],
    &["all"],
    &["create", "delete", "get", "list", "patch", "update", "watch"],
    STATUS,
    true,
    core::v1::Service
);
pub static NODES: ResourceType = rt!(
    "",
    "v1",
    "nodes",
    "node",
    "Node",
    false,
    &["no"],
    &[],
    RW,
    STATUS,
    true,
    core::v1::Node
);
pub static JOBS: ResourceType = rt!(
    "batch",
    "v1",
    "jobs",
    "job",
    "Job",
    true,
    &[],
    &["all"],
    RW,
    STATUS,
    true,
    batch::v1::Job
);
pub static STATEFULSETS: ResourceType = rt!(
    "apps",
    "v1",
    "statefulsets",
    "statefulset",
    "StatefulSet",
    true,
    &["sts"],
    &["all"],
    RW,
    STATUS_SCALE,
    true,
    apps::v1::StatefulSet
);
/// JobSet (jobset.x-k8s.io/v1alpha2), which the sandbox serves as if its CRD were installed.
pub static JOBSETS: ResourceType = ResourceType {
    group: "jobset.x-k8s.io",
    version: "v1alpha2",
    plural: "jobsets",
    singular: "jobset",
    kind: "JobSet",
    namespaced: true,
    short_names: &[],
    categories: &[],
    verbs: RW,
    subresources: STATUS,
    stored: true,
    normalize: normalize_jobset,
    crd: None,
    view: None,
};

/// A JobSet as its schema has it: `spec.replicatedJobs`, each named and with a Job template
/// (checked and pruned as a Job's); the rest of the spec and the status as given.
fn normalize_jobset(mut v: Value) -> Result<Value, String> {
    let rjs = v
        .pointer_mut("/spec/replicatedJobs")
        .and_then(Value::as_array_mut)
        .ok_or("spec.replicatedJobs: Required value (a list of replicated Jobs)")?;
    for (i, rj) in rjs.iter_mut().enumerate() {
        if !rj["name"].is_string() {
            return Err(format!("spec.replicatedJobs[{i}].name: Required value"));
        }
        let t = rj
            .get_mut("template")
            .ok_or_else(|| format!("spec.replicatedJobs[{i}].template: Required value"))?;
        *t = norm::<batch::v1::JobTemplateSpec>(t.take())
            .map_err(|e| format!("spec.replicatedJobs[{i}].template: {e}"))?;
    }
    let meta = v.get_mut("metadata").map(Value::take).unwrap_or_default();
    v["metadata"] = norm::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(meta)?;
    Ok(v)
}

pub static NETWORKPOLICIES: ResourceType = rt!(
    "networking.k8s.io",
    "v1",
    "networkpolicies",
    "networkpolicy",
    "NetworkPolicy",
    true,
    &["netpol"],
    &[],
    RW,
    &[],
    true,
    networking::v1::NetworkPolicy
);
pub static ENDPOINTSLICES: ResourceType = rt!(
    "discovery.k8s.io",
    "v1",
    "endpointslices",
    "endpointslice",
    "EndpointSlice",
    true,
    &[],
    &[],
    RW,
    &[],
    true,
    discovery::v1::EndpointSlice
);
pub static ROLES: ResourceType = rt!(
    "rbac.authorization.k8s.io",
    "v1",
    "roles",
    "role",
    "Role",
    true,
    &[],
    &[],
    RW,
    &[],
    true,
    rbac::v1::Role
);
pub static ROLEBINDINGS: ResourceType = rt!(
    "rbac.authorization.k8s.io",
    "v1",
    "rolebindings",
    "rolebinding",
    "RoleBinding",
    true,
    &[],
    &[],
    RW,
    &[],
    true,
    rbac::v1::RoleBinding
);
pub static CLUSTERROLES: ResourceType = rt!(
    "rbac.authorization.k8s.io",
    "v1",
    "clusterroles",
    "clusterrole",
    "ClusterRole",
    false,
    &[],
    &[],
    RW,
    &[],
    true,
    rbac::v1::ClusterRole
);
pub static CLUSTERROLEBINDINGS: ResourceType = rt!(
    "rbac.authorization.k8s.io",
    "v1",
    "clusterrolebindings",
    "clusterrolebinding",
    "ClusterRoleBinding",
    false,
    &[],
    &[],
    RW,
    &[],
    true,
    rbac::v1::ClusterRoleBinding
);
pub static SELFSUBJECTACCESSREVIEWS: ResourceType = rt!(
    "authorization.k8s.io",
    "v1",
    "selfsubjectaccessreviews",
    "selfsubjectaccessreview",
    "SelfSubjectAccessReview",
    false,
    &[],
    &[],
    &["create"],
    &[],
    false,
    authorization::v1::SelfSubjectAccessReview
);
pub static SELFSUBJECTRULESREVIEWS: ResourceType = rt!(
    "authorization.k8s.io",
    "v1",
    "selfsubjectrulesreviews",
    "selfsubjectrulesreview",
    "SelfSubjectRulesReview",
    false,
    &[],
    &[],
    &["create"],
    &[],
    false,
    authorization::v1::SelfSubjectRulesReview
);
pub static SELFSUBJECTREVIEWS: ResourceType = rt!(
    "authentication.k8s.io",
    "v1",
    "selfsubjectreviews",
    "selfsubjectreview",
    "SelfSubjectReview",
    false,
    &[],
    &[],
    &["create"],
    &[],
    false,
    authentication::v1::SelfSubjectReview
);

pub static LEASES: ResourceType = rt!(
    "coordination.k8s.io",
    "v1",
    "leases",
    "lease",
    "Lease",
    true,
    &[],
    &[],
    RW,
    &[],
    true,
    coordination::v1::Lease
);
pub static DEPLOYMENTS: ResourceType = rt!(
    "apps",
    "v1",
    "deployments",
    "deployment",
    "Deployment",
    true,
    &["deploy"],
    &["all"],
    RW,
    STATUS_SCALE,
    true,
    apps::v1::Deployment
);
pub static REPLICASETS: ResourceType = rt!(
    "apps",
    "v1",
    "replicasets",
    "replicaset",
    "ReplicaSet",
    true,
    &["rs"],
    &["all"],
    RW,
    STATUS_SCALE,
    true,
    apps::v1::ReplicaSet
);
pub static CUSTOMRESOURCEDEFINITIONS: ResourceType = rt!(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "customresourcedefinition",
    "CustomResourceDefinition",
    false,
    &["crd", "crds"],
    &["api-extensions"],
    RW,
    STATUS,
    true,
    apiextensions::CustomResourceDefinition
);
/// events.k8s.io/v1 Events: the core/v1 Events, converted (see [`crate::api::events`]).
pub static EVENTS_V1: ResourceType = ResourceType {
    group: "events.k8s.io",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    namespaced: true,
    short_names: &["ev"],
    categories: &[],
    verbs: RW,
    subresources: &[],
    stored: true,
    normalize: norm::<k8s_openapi::api::events::v1::Event>,
    crd: None,
    view: Some(&EVENTS_VIEW),
};

/// How [`EVENTS_V1`] shows the core/v1 Events.
static EVENTS_VIEW: View = View {
    storage: &EVENTS,
    to_storage: crate::api::events::to_storage,
    from_storage: crate::api::events::from_storage,
    fields: crate::api::events::fields,
};

/// Every served resource, in discovery order.
pub static ALL: &[&ResourceType] = &[
    &PODS,
    &SECRETS,
    &EVENTS,
    &NAMESPACES,
    &SERVICEACCOUNTS,
    &CONFIGMAPS,
    &SERVICES,
    &NODES,
    &JOBS,
    &STATEFULSETS,
    &DEPLOYMENTS,
    &REPLICASETS,
    &JOBSETS,
    &NETWORKPOLICIES,
    &ENDPOINTSLICES,
    &ROLES,
    &ROLEBINDINGS,
    &CLUSTERROLES,
    &CLUSTERROLEBINDINGS,
    &SELFSUBJECTACCESSREVIEWS,
    &SELFSUBJECTRULESREVIEWS,
    &SELFSUBJECTREVIEWS,
    &LEASES,
    &CUSTOMRESOURCEDEFINITIONS,
    &EVENTS_V1,
];

/// The API groups served besides the core group, with their one version each.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for rt in ALL {
        if !rt.group.is_empty() && !out.iter().any(|(g, _)| *g == rt.group) {
            out.push((rt.group, rt.version));
        }
    }
    out
}

pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    ALL.iter()
        .copied()
        .find(|rt| rt.group == group && rt.version == version && rt.plural == plural)
}

/// Finds a stored resource type by apiVersion and kind (as written in a manifest).
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    ALL.iter()
        .copied()
        .find(|rt| rt.kind == kind && rt.api_version() == api_version)
}

/// Finds the resource type of a k8s-openapi type.
pub fn of<K: k8s_openapi::Resource>() -> &'static ResourceType {
    ALL.iter()
        .copied()
        .find(|rt| rt.group == K::GROUP && rt.version == K::VERSION && rt.kind == K::KIND)
        .unwrap_or_else(|| {
            panic!(
                "{} {} is not a resource the sandbox API server serves",
                K::API_VERSION,
                K::KIND
            )
        })
}
