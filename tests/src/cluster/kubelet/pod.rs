//! One pod on this node: the worker thread that runs it, its access to the pod's object
//! (status, events), and the pod as the kubelet runs it ([`Pod`]: its containers).

use super::control::Ctl;
use super::fields::s;
use super::probe::{parse_probe, Probe};
use super::sync::lock;
use crate::api::defaults::now_rfc3339;
use crate::api::resources::{EVENTS, PODS};
use crate::api::{ApiServer, Part, Store};
use crate::images::{ImageStore, MountedImage};
use crate::podnet::{Network, PodExit, RunningPod};
use anyhow::Result;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Held while allocating an address or (re)starting a pod on it.
pub(super) struct IpLock(pub(super) Arc<Mutex<()>>);

/// Everything a pod's thread needs.
pub(super) struct PodCtx {
    pub(super) images: Arc<ImageStore>,
    pub(super) node: String,
    pub(super) store: Store,
    pub(super) api: Arc<ApiServer>,
    pub(super) net: Arc<Network>,
    pub(super) dir: PathBuf,
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) running: Arc<Mutex<Option<RunningPod>>>,
}

pub(super) enum Outcome {
    /// The pod object is gone or the cluster stops: just clean up.
    Stop,
    /// Evicted: report and clean up (the object stays).
    Evicted(String, Sender<Result<()>>),
    /// The container ended.
    Exited(PodExit),
}

/// A pod as this kubelet runs it: the object it was admitted from and its containers.
pub(super) struct Pod {
    /// The pod object when its containers were read.
    pub(super) object: Arc<Value>,
    /// `spec.containers`, in order. Sandbox pods have exactly one (checked on admission): its
    /// process is the pod's PID 1, see [`Pod::main`].
    pub(super) containers: Vec<PodContainer>,
}

impl Pod {
    /// The container whose process is the pod's (its exit ends the pod, its readiness probe is
    /// the pod's).
    pub(super) fn main(&self) -> &PodContainer {
        &self.containers[0]
    }
}

/// One container of a pod.
pub(super) struct PodContainer {
    /// Its entry in `spec.containers`.
    pub(super) spec: Value,
    pub(super) name: String,
    pub(super) image: String,
    /// The image's root filesystem once pulled; None before, and for a container that runs
    /// the host's programs.
    pub(super) rootfs: Option<Arc<MountedImage>>,
    pub(super) probe: Option<Probe>,
}

impl PodContainer {
    pub(super) fn new(spec: &Value) -> Self {
        PodContainer {
            name: spec["name"].as_str().unwrap_or("main").to_string(),
            image: spec["image"].as_str().unwrap_or("").to_string(),
            rootfs: None,
            probe: spec
                .get("readinessProbe")
                .and_then(|p| parse_probe(p, spec)),
            spec: spec.clone(),
        }
    }

    /// `sha256:<id>` of the image it runs ("" for the host's programs or before the pull).
    pub(super) fn image_id(&self) -> String {
        self.rootfs
            .as_ref()
            .map(|m| format!("sha256:{}", m.config.id))
            .unwrap_or_default()
    }
}

impl PodCtx {
    pub(super) fn run(self, rx: Receiver<Ctl>, ip_lock: IpLock) {
        let r = self.lifecycle(&rx, &ip_lock);
        if let Err(e) = &r {
            tracing::warn!(pod = %self.name, "pod failed: {e:#}");
        }
        // Kill and clean up whatever is left.
        let pod = lock(&self.running).take();
        drop(pod);
        let _ = std::fs::remove_file(self.dir.join("exec.json"));
        // Keep the log of finished pods while their object exists.
        if self
            .store
            .get(&PODS, &self.ns, &self.name)
            .map(|p| s(&p, "/metadata/uid") != self.uid)
            .unwrap_or(true)
        {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    pub(super) fn pod(&self) -> Option<Arc<Value>> {
        self.store
            .get(&PODS, &self.ns, &self.name)
            .ok()
            .filter(|p| s(p, "/metadata/uid") == self.uid)
    }

    /// Changes the status of this pod (if it is still this pod).
    pub(super) fn status(&self, f: impl FnOnce(&mut Value)) {
        let uid = self.uid.clone();
        let _ = self
            .store
            .modify(&PODS, &self.ns, &self.name, Part::Status, |v| {
                if s(v, "/metadata/uid") == uid {
                    if !v["status"].is_object() {
                        v["status"] = json!({});
                    }
                    f(&mut v["status"]);
                }
            });
    }

    pub(super) fn event(&self, ty: &str, reason: &str, message: &str) {
        let now = now_rfc3339();
        let component = if reason == "Scheduled" {
            "default-scheduler"
        } else {
            "kubelet"
        };
        let ev = json!({
            "metadata": {"generateName": format!("{}.", self.name), "namespace": self.ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "namespace": self.ns, "uid": self.uid},
            "reason": reason,
            "message": message,
            "type": ty,
            "source": {"component": component, "host": self.node},
            "reportingComponent": component,
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let _ = self.store.create(&EVENTS, &self.ns, ev, false);
    }

    /// Marks the pod Failed before any container ran.
    pub(super) fn fail(&self, reason: &str, message: &str) {
        tracing::warn!(pod = %self.name, "{reason}: {message}");
        self.event("Warning", reason, message);
        let (reason, message) = (reason.to_string(), message.to_string());
        self.status(|st| {
            st["phase"] = json!("Failed");
            st["reason"] = json!(reason);
            st["message"] = json!(message);
        });
    }
}
