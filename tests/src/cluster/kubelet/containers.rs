//! A pod as the kubelet runs it: its init containers (one-shot ones and native sidecars) and
//! its regular containers, each with its image, pull policy and probes.

use super::probe::{parse_probe, Probe};
use crate::images::{self, MountedImage};
use serde_json::Value;
use std::sync::Arc;

/// The annotation naming the container `kubectl exec`/`logs` use when none is given.
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";

/// What a container is to its pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `initContainers[]`: runs to completion, in order, before the next one starts.
    Init,
    /// `initContainers[]` with `restartPolicy: Always` (a native sidecar): started in order,
    /// the next init container starts once it has started; it runs alongside the regular
    /// containers and is stopped after them.
    Sidecar,
    /// `containers[]`.
    Regular,
}

impl Kind {
    /// Whether it is listed in `initContainers` (and reported in `initContainerStatuses`).
    pub(super) fn is_init(self) -> bool {
        self != Kind::Regular
    }
}

/// `imagePullPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PullPolicy {
    /// "Pulls" at every start: the name is resolved against the local store again.
    Always,
    /// Resolves the name at the container's first start and keeps that image.
    IfNotPresent,
    /// As IfNotPresent, with `ErrImageNeverPull` while the store does not have it.
    Never,
}

/// A pod as this kubelet runs it: the object it was admitted from and its containers.
pub(super) struct Pod {
    /// The pod object when its containers were read.
    pub(super) object: Arc<Value>,
    /// `spec.initContainers` in order, then `spec.containers` in order.
    pub(super) containers: Vec<PodContainer>,
}

impl Pod {
    /// The pod `object`'s containers.
    pub(super) fn new(object: Arc<Value>) -> Pod {
        let list = |k: &str| {
            object
                .pointer(&format!("/spec/{k}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let mut containers: Vec<PodContainer> = list("initContainers")
            .iter()
            .map(|c| {
                let sidecar = c["restartPolicy"] == "Always";
                PodContainer::new(c, if sidecar { Kind::Sidecar } else { Kind::Init })
            })
            .collect();
        containers.extend(
            list("containers")
                .iter()
                .map(|c| PodContainer::new(c, Kind::Regular)),
        );
        Pod { object, containers }
    }

    /// The container `kubectl exec` and `kubectl logs` use without `-c`.
    pub(super) fn default_container(&self) -> &str {
        let name = default_container(&self.object);
        self.containers
            .iter()
            .find(|c| c.name == name)
            .map_or("", |c| c.name.as_str())
    }

    /// `spec.restartPolicy` (Always when unset).
    pub(super) fn restart_policy(&self) -> &str {
        self.object
            .pointer("/spec/restartPolicy")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("Always")
    }

    /// Whether any container runs an image (not the host's programs).
    pub(super) fn runs_images(&self) -> bool {
        self.containers.iter().any(|c| !c.on_host())
    }
}

/// The default container of pod `object`: the one its
/// [`DEFAULT_CONTAINER_ANNOTATION`] names, else its first regular container.
pub fn default_container(object: &Value) -> String {
    let annotated = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(DEFAULT_CONTAINER_ANNOTATION))
        .and_then(Value::as_str)
        .filter(|n| container_names(object).iter().any(|c| c == n));
    match annotated {
        Some(n) => n.to_string(),
        None => object
            .pointer("/spec/containers/0/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    }
}

/// The names of pod `object`'s init containers, then of its containers.
pub fn container_names(object: &Value) -> Vec<String> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| {
            object
                .pointer(&format!("/spec/{k}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .filter_map(|c| c["name"].as_str().map(String::from))
        .collect()
}

/// One container of a pod.
pub(super) struct PodContainer {
    /// Its entry in `spec.initContainers` or `spec.containers`.
    pub(super) spec: Value,
    pub(super) name: String,
    pub(super) kind: Kind,
    /// `image` as the spec writes it.
    pub(super) image: String,
    /// The reference it resolves to (see [`images::normalize`]); the spec's text for a
    /// container that runs the host's programs.
    pub(super) reference: String,
    pub(super) pull: PullPolicy,
    /// The image's root filesystem once pulled; None before, and for a container that runs
    /// the host's programs.
    pub(super) rootfs: Option<Arc<MountedImage>>,
    pub(super) readiness: Option<Probe>,
    pub(super) startup: Option<Probe>,
}

impl PodContainer {
    fn new(spec: &Value, kind: Kind) -> Self {
        let image = spec["image"].as_str().unwrap_or("").to_string();
        let on_host = images::runs_on_host(&image);
        let policy = spec["imagePullPolicy"]
            .as_str()
            .unwrap_or_else(|| images::default_pull_policy(&image));
        PodContainer {
            name: spec["name"].as_str().unwrap_or("main").to_string(),
            kind,
            reference: if on_host {
                image.clone()
            } else {
                images::normalize(&image)
            },
            image,
            pull: match policy {
                "Always" => PullPolicy::Always,
                "Never" => PullPolicy::Never,
                _ => PullPolicy::IfNotPresent,
            },
            rootfs: None,
            readiness: spec
                .get("readinessProbe")
                .and_then(|p| parse_probe(p, spec)),
            startup: spec.get("startupProbe").and_then(|p| parse_probe(p, spec)),
            spec: spec.clone(),
        }
    }

    /// Whether it runs the host's programs in the host's filesystem (no image).
    pub(super) fn on_host(&self) -> bool {
        images::runs_on_host(&self.image)
    }

    /// `sha256:<id>` of the image it runs ("" for the host's programs or before the pull).
    pub(super) fn image_id(&self) -> String {
        self.rootfs
            .as_ref()
            .map(|m| format!("sha256:{}", m.config.id))
            .unwrap_or_default()
    }
}
