//! What one workload kind brings: the interface each kind's file implements.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde_json::Value;

use super::parts::Parts;

/// One workload kind: how its pods are found and counted, how it is read and grown, what its
/// job's Role grants on it, and how it is rendered. The object arguments are the object's
/// JSON as the API server returns it (`spec`, `metadata`, ...).
pub trait Kind: Sync {
    /// Its API kind, as in `kind:` and ownerReferences ("Job").
    fn name(&self) -> &'static str;
    /// Its `apiVersion` ("batch/v1").
    fn api_version(&self) -> &'static str;
    /// Its resource ("jobs").
    fn plural(&self) -> &'static str;
    /// Its API group ("batch"; "" for the core group).
    fn group(&self) -> &'static str {
        self.api_version().rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// The labels its controller puts on its pods with its name, the one it sets today first.
    fn name_labels(&self) -> &'static [&'static str] {
        &[]
    }
    /// The labels its controller puts on each pod with something of that pod alone (its name,
    /// its index): never part of a selector of all its pods.
    fn per_pod_labels(&self) -> &'static [&'static str] {
        &[]
    }
    /// Whether its pods are controlled by it (an ownerReference to it), not by a child object.
    fn owns_pods(&self) -> bool;
    /// The pod label holding a pod's index, where its controller does not also put the index
    /// into the pod's environment (the pod template then passes it on as `POD_INDEX`).
    fn index_label_for_env(&self) -> Option<&'static str> {
        None
    }
    /// The selector of its `object`, where it has one that selects exactly its pods.
    fn selector(&self, _object: &Value) -> Option<LabelSelector> {
        None
    }
    /// Whether its pods run to completion (`restartPolicy: Never`, a batch command may run),
    /// rather than being restarted whenever they exit.
    fn runs_to_completion(&self) -> bool {
        true
    }
    /// Whether it is restarted as a whole when it fails (`Parts::max_restarts` times).
    fn restarts_as_a_whole(&self) -> bool {
        false
    }

    /// How many pods run at once, from the object's spec (`only`: the parts of it whose pods
    /// are counted, a JobSet's replicated jobs; None: all). None: the spec does not say.
    fn expected_pods(&self, object: &Value, only: Option<&BTreeSet<String>>) -> Option<u32>;
    /// Where [`Kind::expected_pods`] reads the count ("spec.parallelism").
    fn count_source(&self) -> &'static str;

    /// Why its pod count cannot change while it runs; None: it grows.
    fn fixed(&self) -> Option<&'static str> {
        None
    }
    /// The pods it runs now, the number `grow` raises.
    fn scaled_pods(&self, object: &Value) -> u32;
    /// Why this object of a kind that grows may not (a Job that is not Indexed); None: it may.
    fn scale_refusal(&self, _object: &Value) -> Option<&'static str> {
        None
    }
    /// The merge patch raising it to `pods`; None for a kind that does not grow.
    fn scale_patch(&self, pods: u32) -> Option<Value>;

    /// Whether `grow` raises it through its `scale` subresource (then its Role grants `patch`
    /// there alone) rather than by patching the object.
    fn scales_through_subresource(&self) -> bool {
        false
    }

    /// The Role rules its job's identity needs on the workload `name`: `get` (discovery reads
    /// it), and for an `elastic` job what `grow` changes.
    fn role_rules(&self, name: &str, elastic: bool) -> Vec<PolicyRule>;
    /// Annotations of an elastic workload besides the most pods it may grow to.
    fn elastic_annotations(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The workload object.
    fn render(&self, parts: &Parts) -> Result<Value, serde_json::Error>;
}

/// A rule on `resources` of `group`, for the object `name` alone.
pub(crate) fn rule(group: &str, resources: &[&str], name: &str, verbs: &[&str]) -> PolicyRule {
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(owned(&[group])),
        resources: Some(owned(resources)),
        resource_names: Some(vec![name.to_string()]),
        verbs: owned(verbs),
        non_resource_urls: None,
    }
}

/// The JSON of a typed `object` with `fields` set (the metadata and pod template made by the
/// manifest, which stay untyped: they carry what the plan gives verbatim).
pub(crate) fn with(
    object: &impl Serialize,
    fields: Vec<(&str, Value)>,
) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(object)?;
    if let Value::Object(map) = &mut v {
        for (key, value) in fields {
            map.insert(key.to_string(), value);
        }
    }
    Ok(v)
}

/// The typed spec `T` of `object` (its defaults where the spec leaves fields out); None without
/// a spec or with one of the wrong shape.
pub(crate) fn spec_of<T: serde::de::DeserializeOwned>(object: &Value) -> Option<T> {
    serde_json::from_value(object.get("spec")?.clone()).ok()
}
