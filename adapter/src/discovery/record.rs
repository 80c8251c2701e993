//! What discovery knows of a pod: a small record decoded straight from the API's JSON.
//!
//! A `k8s_openapi` `Pod` is a few kilobytes of mostly empty fields (the spec alone has dozens),
//! and building one per listed pod, then moving it into the tracker and through the ordering,
//! cost more at thousands of pods than reading the JSON. A [`PodRecord`] holds only what
//! readiness, slots, ordering and workload inference read, under the field names of the
//! Kubernetes types, so the code reading it reads like code reading a `Pod`:
//!
//! * metadata: name, namespace, uid, resource version, owners, deletion timestamp, and of the
//!   labels and annotations only those discovery reads (`KEPT_KEYS`: the workload index keys,
//!   the slot annotations, the JobSet names); the others are skipped while parsing;
//! * spec: the hostname, the containers' names and resources, the pod-level resources;
//! * status: phase, reason, message, conditions (type, status, reason, message), pod IPs, the
//!   containers' waiting and terminated reasons.
//!
//! The list decodes pages into records ([`super::list::decode_page`]); pods that arrive as
//! `Pod`s (watch events, the GET of our own pod) become records through `From`, which keeps
//! exactly what the decoding keeps.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

pub(crate) use super::keys::KEPT_KEYS;

fn kept(key: &str) -> bool {
    KEPT_KEYS.contains(&key)
}

/// A map key read without copying it: the kept key it is, if it is one.
struct KeptKey(Option<&'static str>);

impl<'de> Deserialize<'de> for KeptKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeptKey, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = KeptKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeptKey, E> {
                Ok(KeptKey(KEPT_KEYS.iter().copied().find(|k| *k == v)))
            }
        }
        d.deserialize_str(Key)
    }
}

/// A pod as discovery reads it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PodRecord {
    #[serde(default)]
    pub metadata: RecordMeta,
    pub spec: Option<RecordSpec>,
    pub status: Option<RecordStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// Only the `KEPT_KEYS`.
    #[serde(default, deserialize_with = "kept_map")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Only the `KEPT_KEYS`.
    #[serde(default, deserialize_with = "kept_map")]
    pub annotations: Option<BTreeMap<String, String>>,
    pub(crate) owner_references: Option<Vec<OwnerReference>>,
    pub deletion_timestamp: Option<Time>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RecordContainer {
    #[serde(default)]
    pub name: String,
    pub resources: Option<ResourceRequirements>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RecordSpec {
    pub hostname: Option<String>,
    #[serde(default)]
    pub containers: Vec<RecordContainer>,
    pub resources: Option<ResourceRequirements>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RecordCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct RecordIp {
    #[serde(default)]
    pub ip: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct RecordWaiting {
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecordTerminated {
    #[serde(default)]
    pub exit_code: i32,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct RecordState {
    pub waiting: Option<RecordWaiting>,
    pub terminated: Option<RecordTerminated>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct RecordContainerStatus {
    #[serde(default)]
    pub name: String,
    pub state: Option<RecordState>,
}

/// The status fields readiness and its messages read (no timestamps, images or probes).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordStatus {
    pub phase: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub conditions: Option<Vec<RecordCondition>>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(rename = "podIPs")]
    pub(crate) pod_ips: Option<Vec<RecordIp>>,
    pub(crate) container_statuses: Option<Vec<RecordContainerStatus>>,
}

/// A string map of which only the [`KEPT_KEYS`] are kept; the other keys are compared in
/// place (not copied) and their values skipped unparsed.
fn kept_map<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Kept;
    impl<'de> Visitor<'de> for Kept {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings or null")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(KeptKey(key)) = map.next_key()? {
                match key {
                    Some(k) => {
                        out.insert(k.to_string(), map.next_value::<String>()?);
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Some(out))
        }
    }
    d.deserialize_option(Kept)
}

fn kept_of(m: Option<&BTreeMap<String, String>>) -> Option<BTreeMap<String, String>> {
    m.map(|m| {
        m.iter()
            .filter(|(k, _)| kept(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    })
}

impl From<&Pod> for PodRecord {
    fn from(p: &Pod) -> PodRecord {
        let m = &p.metadata;
        PodRecord {
            metadata: RecordMeta {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                labels: kept_of(m.labels.as_ref()),
                annotations: kept_of(m.annotations.as_ref()),
                owner_references: m.owner_references.clone(),
                deletion_timestamp: m.deletion_timestamp.clone(),
            },
            spec: p.spec.as_ref().map(|s| RecordSpec {
                hostname: s.hostname.clone(),
                containers: s
                    .containers
                    .iter()
                    .map(|c| RecordContainer {
                        name: c.name.clone(),
                        resources: c.resources.clone(),
                    })
                    .collect(),
                resources: s.resources.clone(),
            }),
            status: p.status.as_ref().map(status_of),
        }
    }
}

fn status_of(s: &k8s_openapi::api::core::v1::PodStatus) -> RecordStatus {
    RecordStatus {
        phase: s.phase.clone(),
        reason: s.reason.clone(),
        message: s.message.clone(),
        conditions: s.conditions.as_ref().map(|cs| {
            cs.iter()
                .map(|c| RecordCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect()
        }),
        pod_ip: s.pod_ip.clone(),
        pod_ips: s
            .pod_ips
            .as_ref()
            .map(|ips| ips.iter().map(|i| RecordIp { ip: i.ip.clone() }).collect()),
        container_statuses: s.container_statuses.as_ref().map(|cs| {
            cs.iter()
                .map(|c| RecordContainerStatus {
                    name: c.name.clone(),
                    state: c.state.as_ref().map(|st| RecordState {
                        waiting: st.waiting.as_ref().map(|w| RecordWaiting {
                            reason: w.reason.clone(),
                        }),
                        terminated: st.terminated.as_ref().map(|t| RecordTerminated {
                            exit_code: t.exit_code,
                            reason: t.reason.clone(),
                        }),
                    }),
                })
                .collect()
        }),
    }
}

impl From<Pod> for PodRecord {
    fn from(p: Pod) -> PodRecord {
        PodRecord::from(&p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_kept_keys_stay_and_a_pod_converts_as_it_decodes() {
        let v = json!({
            "metadata": {
                "name": "w-1", "namespace": "ns", "uid": "u",
                "labels": {"app": "x", "batch.kubernetes.io/job-completion-index": "1",
                           "esc\"aped": "y", "jobset.sigs.k8s.io/jobset-name": "js"},
                "annotations": {"prrte-k8s.io/slots": "3", "other": {"not": "a string"}},
            },
            "spec": {"hostname": "h", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                       "lastProbeTime": null}]},
        });
        let r: PodRecord = serde_json::from_value(v.clone()).unwrap();
        let labels = r.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            [
                "batch.kubernetes.io/job-completion-index",
                "jobset.sigs.k8s.io/jobset-name"
            ]
        );
        assert_eq!(r.metadata.annotations.as_ref().unwrap().len(), 1);
        // A Pod read whole becomes the same record, but for what a Pod cannot hold (the
        // annotation that is not a string).
        let mut v2 = v;
        v2["metadata"]["annotations"]["other"] = json!("s");
        let pod: Pod = serde_json::from_value(v2.clone()).unwrap();
        let from_pod = PodRecord::from(&pod);
        let decoded: PodRecord = serde_json::from_value(v2).unwrap();
        assert_eq!(from_pod, decoded);
        assert_eq!(from_pod, r);
        // Absent and null maps are None; a kept key with a non-string value is an error.
        let r: PodRecord = serde_json::from_value(json!({"metadata": {"labels": null}})).unwrap();
        assert!(r.metadata.labels.is_none() && r.metadata.annotations.is_none());
        let bad = json!({"metadata": {"labels": {"apps.kubernetes.io/pod-index": 3}}});
        assert!(serde_json::from_value::<PodRecord>(bad).is_err());
    }
}
