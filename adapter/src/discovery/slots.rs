//! How many PRRTE slots each pod offers.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::record::{PodRecord, RecordContainer};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

pub(crate) use super::keys::{DEPRECATED_SLOTS_ANNOTATION, SLOTS_ANNOTATION};
use super::quantity::Quantity;
use crate::settings::mca::MAX_SLOTS;

/// Extended resources counted as GPUs.
pub(crate) const GPU_RESOURCES: &[&str] = &["nvidia.com/gpu", "amd.com/gpu"];

/// Where the slot count of a pod comes from (MCA param `ras_k8s_slots`).
///
/// Every policy gives at least one slot per pod. A malformed `prrte-k8s.io/slots` annotation is
/// an error under `Auto` and `Annotation`; the other policies ignore the annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum SlotsPolicy {
    /// The annotation if present, else GPUs requested if any, else whole CPUs requested, else 1.
    #[default]
    Auto,
    /// The annotation; pods without it get 1.
    Annotation,
    /// GPUs requested (`nvidia.com/gpu` + `amd.com/gpu`); pods without GPUs get 1.
    Gpu,
    /// Whole CPUs requested (requests, else limits, per container), at least 1.
    Cpu,
    /// One slot per pod.
    One,
    /// This many slots per pod (from 1 to 1048576), whatever its annotation and
    /// resources: a launcher that knows its processes per pod (a TrainJob's `numProcPerNode`).
    Fixed(u32),
}

impl SlotsPolicy {
    /// The accepted words, for messages and help texts (besides a count of slots).
    #[cfg(test)]
    pub(crate) const VALID: &'static [&'static str] = crate::settings::mca::SLOTS_CHOICES;
}

impl fmt::Display for SlotsPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotsPolicy::Auto => f.write_str("auto"),
            SlotsPolicy::Annotation => f.write_str("annotation"),
            SlotsPolicy::Gpu => f.write_str("gpu"),
            SlotsPolicy::Cpu => f.write_str("cpu"),
            SlotsPolicy::One => f.write_str("one"),
            SlotsPolicy::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl From<SlotsPolicy> for String {
    fn from(p: SlotsPolicy) -> String {
        p.to_string()
    }
}

impl TryFrom<String> for SlotsPolicy {
    type Error = ParseSlotsPolicyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// An unknown slots policy name, or a count of slots out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.setting_error())]
pub struct ParseSlotsPolicyError {
    pub value: String,
}

impl ParseSlotsPolicyError {
    /// The error as for any bad value of `ras_k8s_slots`.
    pub(crate) fn setting_error(&self) -> crate::settings::SettingError {
        crate::settings::mca::SLOTS.invalid(format!("{:?}", self.value))
    }
}

impl FromStr for SlotsPolicy {
    type Err = ParseSlotsPolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseSlotsPolicyError {
            value: s.to_string(),
        };
        let word = s.trim().to_ascii_lowercase();
        Ok(match word.as_str() {
            "auto" | "" => SlotsPolicy::Auto,
            "annotation" => SlotsPolicy::Annotation,
            "gpu" | "gpus" => SlotsPolicy::Gpu,
            "cpu" | "cpus" => SlotsPolicy::Cpu,
            "one" => SlotsPolicy::One,
            _ => match slot_count(&word) {
                Some(1) => SlotsPolicy::One,
                Some(n) => SlotsPolicy::Fixed(n),
                None => return Err(bad()),
            },
        })
    }
}

/// `text` as a count of slots: digits only, from 1 to [`MAX_SLOTS`].
pub(crate) fn slot_count(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_SLOTS).contains(n))
}

/// A slot annotation that is not a positive integer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadSlotsAnnotation {
    /// The annotation's name ([`SLOTS_ANNOTATION`] or [`DEPRECATED_SLOTS_ANNOTATION`]).
    pub annotation: &'static str,
    pub value: String,
    pub reason: &'static str,
}

fn parse_annotation((annotation, value): (&'static str, &str)) -> Result<u32, BadSlotsAnnotation> {
    let bad = |reason| BadSlotsAnnotation {
        annotation,
        value: value.to_string(),
        reason,
    };
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("it must be a positive integer such as \"4\""));
    }
    match v.parse::<u64>() {
        Ok(0) => Err(bad("it must be at least 1")),
        Ok(n) if n <= u64::from(MAX_SLOTS) => Ok(n as u32),
        _ => Err(bad("it is larger than 1048576")),
    }
}

fn quantity_millis(q: &K8sQuantity) -> u128 {
    match Quantity::parse(&q.0) {
        Ok(parsed) => parsed.millis_ceil().unwrap_or(0),
        Err(e) => {
            tracing::warn!("ignoring unparsable resource quantity: {e}");
            0
        }
    }
}

/// The quantity of `resource` a container asks for: limits first when `prefer_limits`, else
/// requests first; the other map is the fallback.
fn container_amount(
    res: Option<&ResourceRequirements>,
    resource: &str,
    prefer_limits: bool,
) -> Option<u128> {
    let res = res?;
    let get = |m: &Option<BTreeMap<String, K8sQuantity>>| {
        m.as_ref()
            .and_then(|m| m.get(resource))
            .map(quantity_millis)
    };
    if prefer_limits {
        get(&res.limits).or_else(|| get(&res.requests))
    } else {
        get(&res.requests).or_else(|| get(&res.limits))
    }
}

/// Sum over the pod's (regular) containers; falls back to pod-level resources when no
/// container names the resource. Init containers are not counted: they do not run alongside
/// the application.
fn pod_amount_millis(pod: &PodRecord, resource: &str, prefer_limits: bool) -> Option<u128> {
    let spec = pod.spec.as_ref()?;
    let containers: &[RecordContainer] = &spec.containers;
    let mut total: Option<u128> = None;
    for c in containers {
        if let Some(m) = container_amount(c.resources.as_ref(), resource, prefer_limits) {
            total = Some(total.unwrap_or(0).saturating_add(m));
        }
    }
    total.or_else(|| container_amount(spec.resources.as_ref(), resource, prefer_limits))
}

/// Whole GPUs requested by the pod (limits, else requests; both vendors summed).
pub fn gpus(pod: &PodRecord) -> u64 {
    let millis: u128 = GPU_RESOURCES
        .iter()
        .filter_map(|r| pod_amount_millis(pod, r, true))
        .fold(0u128, |a, b| a.saturating_add(b));
    u64::try_from(millis / 1000).unwrap_or(u64::MAX)
}

/// Whole CPUs requested by the pod (requests, else limits, per container), rounded down;
/// `None` when no container names a CPU amount.
pub fn cpus(pod: &PodRecord) -> Option<u64> {
    pod_amount_millis(pod, "cpu", false).map(|m| u64::try_from(m / 1000).unwrap_or(u64::MAX))
}

fn clamp_slots(n: u64) -> u32 {
    n.clamp(1, u64::from(MAX_SLOTS)) as u32
}

/// The pod's slot annotation (name and value): [`SLOTS_ANNOTATION`], else the deprecated
/// [`DEPRECATED_SLOTS_ANNOTATION`] (with a warning).
fn slots_annotation(pod: &PodRecord) -> Option<(&'static str, &str)> {
    let annotations = pod.metadata.annotations.as_ref()?;
    if let Some(v) = annotations.get(SLOTS_ANNOTATION) {
        return Some((SLOTS_ANNOTATION, v));
    }
    let v = annotations.get(DEPRECATED_SLOTS_ANNOTATION)?;
    tracing::warn!(
        pod = pod.metadata.name.as_deref().unwrap_or(""),
        "annotation {DEPRECATED_SLOTS_ANNOTATION} is deprecated; name it {SLOTS_ANNOTATION}"
    );
    Some((DEPRECATED_SLOTS_ANNOTATION, v))
}

/// The slot count of a pod under a policy. Errors only for a malformed annotation under the
/// `Auto` and `Annotation` policies.
pub(crate) fn pod_slots(pod: &PodRecord, policy: SlotsPolicy) -> Result<u32, BadSlotsAnnotation> {
    let annotation = slots_annotation(pod);
    match policy {
        SlotsPolicy::One => Ok(1),
        SlotsPolicy::Fixed(n) => Ok(clamp_slots(u64::from(n))),
        SlotsPolicy::Annotation => annotation.map(parse_annotation).unwrap_or(Ok(1)),
        SlotsPolicy::Gpu => Ok(clamp_slots(gpus(pod))),
        SlotsPolicy::Cpu => Ok(clamp_slots(cpus(pod).unwrap_or(1))),
        SlotsPolicy::Auto => {
            if let Some(v) = annotation {
                return parse_annotation(v);
            }
            let g = gpus(pod);
            if g > 0 {
                return Ok(clamp_slots(g));
            }
            Ok(clamp_slots(cpus(pod).unwrap_or(1)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::RecordSpec;
    use super::*;

    fn res(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> ResourceRequirements {
        let m = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                    .collect()
            })
        };
        ResourceRequirements {
            requests: m(requests),
            limits: m(limits),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<ResourceRequirements>, annotation: Option<&str>) -> PodRecord {
        let mut p = PodRecord::default();
        p.metadata.name = Some("w-0".into());
        if let Some(a) = annotation {
            p.metadata.annotations = Some([(SLOTS_ANNOTATION.to_string(), a.to_string())].into());
        }
        p.spec = Some(RecordSpec {
            containers: containers
                .into_iter()
                .enumerate()
                .map(|(i, r)| RecordContainer {
                    name: format!("c{i}"),
                    resources: Some(r),
                })
                .collect(),
            ..Default::default()
        });
        p
    }

    #[test]
    fn policy_parsing() {
        assert_eq!("auto".parse::<SlotsPolicy>().unwrap(), SlotsPolicy::Auto);
        assert_eq!(" GPU ".parse::<SlotsPolicy>().unwrap(), SlotsPolicy::Gpu);
        assert_eq!("Cpu".parse::<SlotsPolicy>().unwrap(), SlotsPolicy::Cpu);
        assert_eq!("one".parse::<SlotsPolicy>().unwrap(), SlotsPolicy::One);
        assert_eq!(
            "annotation".parse::<SlotsPolicy>().unwrap(),
            SlotsPolicy::Annotation
        );
        let e = "cores".parse::<SlotsPolicy>().unwrap_err().to_string();
        for v in SlotsPolicy::VALID {
            assert!(e.contains(v), "{e}");
        }
        assert!(
            e.contains("\"cores\"") && e.contains("ras_k8s_slots"),
            "{e}"
        );
        for v in SlotsPolicy::VALID {
            assert_eq!(v.parse::<SlotsPolicy>().unwrap().to_string(), *v);
        }
        for v in crate::settings::mca::SLOTS_ALIASES {
            assert!(v.parse::<SlotsPolicy>().is_ok(), "{v}");
        }
    }

    #[test]
    fn a_count_of_slots_is_a_policy() {
        assert_eq!("3".parse::<SlotsPolicy>().unwrap(), SlotsPolicy::Fixed(3));
        assert_eq!(
            " 64 ".parse::<SlotsPolicy>().unwrap(),
            SlotsPolicy::Fixed(64)
        );
        assert_eq!("1".parse::<SlotsPolicy>().unwrap(), SlotsPolicy::One);
        assert_eq!(
            "1048576".parse::<SlotsPolicy>().unwrap(),
            SlotsPolicy::Fixed(MAX_SLOTS)
        );
        assert_eq!(SlotsPolicy::Fixed(3).to_string(), "3");
        for bad in [
            "0",
            "-3",
            "+3",
            "1048577",
            "99999999999",
            "2.5",
            "3 slots",
            "0x10",
        ] {
            let e = bad.parse::<SlotsPolicy>().expect_err(bad).to_string();
            assert!(
                e.contains("ras_k8s_slots")
                    && e.contains(&format!("{bad:?}"))
                    && e.contains("auto, annotation, gpu, cpu, one")
                    && e.contains("1 to 1048576"),
                "{e}"
            );
        }
        let json = serde_json::to_string(&SlotsPolicy::Fixed(7)).unwrap();
        assert_eq!(json, "\"7\"");
        assert_eq!(
            serde_json::from_str::<SlotsPolicy>(&json).unwrap(),
            SlotsPolicy::Fixed(7)
        );
        assert_eq!(
            serde_json::from_str::<SlotsPolicy>("\"gpu\"").unwrap(),
            SlotsPolicy::Gpu
        );
        assert!(serde_json::from_str::<SlotsPolicy>("\"0\"").is_err());
    }

    #[test]
    fn a_count_of_slots_ignores_annotation_and_resources() {
        let p = pod(
            vec![res(&[("cpu", "8"), ("nvidia.com/gpu", "2")], &[])],
            Some("5"),
        );
        assert_eq!(pod_slots(&p, SlotsPolicy::Fixed(3)), Ok(3));
        // Not even a malformed annotation matters.
        let p = pod(vec![res(&[("cpu", "500m")], &[])], Some("x"));
        assert_eq!(pod_slots(&p, SlotsPolicy::Fixed(3)), Ok(3));
        assert_eq!(
            pod_slots(&PodRecord::default(), SlotsPolicy::Fixed(12)),
            Ok(12)
        );
    }

    #[test]
    fn annotation_wins_under_auto() {
        let p = pod(
            vec![res(&[("cpu", "8"), ("nvidia.com/gpu", "2")], &[])],
            Some("3"),
        );
        assert_eq!(pod_slots(&p, SlotsPolicy::Auto), Ok(3));
        assert_eq!(pod_slots(&p, SlotsPolicy::Annotation), Ok(3));
        assert_eq!(pod_slots(&p, SlotsPolicy::Gpu), Ok(2));
        assert_eq!(pod_slots(&p, SlotsPolicy::Cpu), Ok(8));
        assert_eq!(pod_slots(&p, SlotsPolicy::One), Ok(1));
    }

    #[test]
    fn the_deprecated_annotation_is_read_when_the_new_one_is_absent() {
        let mut p = pod(vec![res(&[("cpu", "8")], &[])], None);
        p.metadata.annotations =
            Some([(DEPRECATED_SLOTS_ANNOTATION.to_string(), "5".to_string())].into());
        assert_eq!(pod_slots(&p, SlotsPolicy::Auto), Ok(5));
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(SLOTS_ANNOTATION.to_string(), "2".to_string());
        assert_eq!(
            pod_slots(&p, SlotsPolicy::Annotation),
            Ok(2),
            "the new name wins"
        );
        p.metadata.annotations =
            Some([(DEPRECATED_SLOTS_ANNOTATION.to_string(), "x".to_string())].into());
        assert_eq!(
            pod_slots(&p, SlotsPolicy::Auto).unwrap_err().annotation,
            DEPRECATED_SLOTS_ANNOTATION
        );
    }

    #[test]
    fn bad_annotations_are_errors() {
        for bad in ["0", "-2", "two", "1.5", "", "99999999999"] {
            let p = pod(vec![], Some(bad));
            let e = pod_slots(&p, SlotsPolicy::Auto).expect_err(bad);
            assert_eq!(e.value, bad);
            assert!(pod_slots(&p, SlotsPolicy::Annotation).is_err());
            // Policies that do not read the annotation are unaffected.
            assert_eq!(pod_slots(&p, SlotsPolicy::One), Ok(1));
        }
        assert_eq!(
            pod_slots(&pod(vec![], Some(" 12 ")), SlotsPolicy::Auto),
            Ok(12)
        );
    }

    #[test]
    fn gpus_beat_cpus_and_sum_over_containers_and_vendors() {
        let p = pod(
            vec![
                res(&[("cpu", "16")], &[("nvidia.com/gpu", "2")]),
                res(&[("amd.com/gpu", "1")], &[]),
                res(&[("cpu", "4")], &[]),
            ],
            None,
        );
        assert_eq!(gpus(&p), 3);
        assert_eq!(pod_slots(&p, SlotsPolicy::Auto), Ok(3));
        assert_eq!(pod_slots(&p, SlotsPolicy::Cpu), Ok(20));
    }

    #[test]
    fn gpu_limits_preferred_over_requests() {
        let p = pod(
            vec![res(&[("nvidia.com/gpu", "1")], &[("nvidia.com/gpu", "4")])],
            None,
        );
        assert_eq!(gpus(&p), 4);
    }

    #[test]
    fn cpus_floor_and_minimum() {
        assert_eq!(
            pod_slots(
                &pod(vec![res(&[("cpu", "500m")], &[])], None),
                SlotsPolicy::Auto
            ),
            Ok(1)
        );
        assert_eq!(
            pod_slots(
                &pod(vec![res(&[("cpu", "1.5")], &[])], None),
                SlotsPolicy::Auto
            ),
            Ok(1)
        );
        assert_eq!(
            pod_slots(
                &pod(vec![res(&[("cpu", "2500m")], &[])], None),
                SlotsPolicy::Auto
            ),
            Ok(2)
        );
        // 1.5 + 500m = 2 whole CPUs: the sum is floored, not each container.
        assert_eq!(
            pod_slots(
                &pod(
                    vec![res(&[("cpu", "1.5")], &[]), res(&[("cpu", "500m")], &[])],
                    None
                ),
                SlotsPolicy::Cpu
            ),
            Ok(2)
        );
        // Requests win over limits; limits are used when a container has no request.
        assert_eq!(
            pod_slots(
                &pod(vec![res(&[("cpu", "2")], &[("cpu", "8")])], None),
                SlotsPolicy::Auto
            ),
            Ok(2)
        );
        assert_eq!(
            pod_slots(
                &pod(vec![res(&[], &[("cpu", "6")])], None),
                SlotsPolicy::Auto
            ),
            Ok(6)
        );
        assert_eq!(
            pod_slots(
                &pod(vec![res(&[("memory", "1Gi")], &[])], None),
                SlotsPolicy::Auto
            ),
            Ok(1)
        );
        assert_eq!(pod_slots(&pod(vec![], None), SlotsPolicy::Auto), Ok(1));
        assert_eq!(pod_slots(&PodRecord::default(), SlotsPolicy::Auto), Ok(1));
        assert_eq!(pod_slots(&pod(vec![], None), SlotsPolicy::Gpu), Ok(1));
    }

    #[test]
    fn pod_level_resources_are_a_fallback() {
        let mut p = pod(vec![res(&[("memory", "1Gi")], &[])], None);
        p.spec.as_mut().unwrap().resources = Some(res(&[("cpu", "4")], &[]));
        assert_eq!(pod_slots(&p, SlotsPolicy::Auto), Ok(4));
    }
}
