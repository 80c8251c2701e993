//! One pod on this node: the worker thread that runs it and its access to the pod's object
//! (status, events).

use super::control::Ctl;
use super::fields::s;
use super::paths::EXEC_INFO;
use super::sync::lock;
use crate::api::defaults::now_rfc3339;
use crate::api::resources::{EVENTS, PODS};
use crate::api::{ApiServer, Part, Store};
use crate::images::ImageStore;
use crate::runtime::podnet::{Network, RunningPod};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

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
    /// The pod's sandbox while it exists (`exec` and the node's other requests reach the
    /// containers through it).
    pub(super) running: Arc<Mutex<Option<Arc<RunningPod>>>>,
}

impl PodCtx {
    pub(super) fn run(self, rx: Receiver<Ctl>) {
        let r = self.lifecycle(&rx);
        if let Err(e) = &r {
            tracing::warn!(pod = %self.name, "pod failed: {e:#}");
        }
        // From now on the node removes a pod being deleted itself (nobody hears `Terminate`).
        drop(rx);
        // Kill and clean up whatever is left.
        let pod = lock(&self.running).take();
        drop(pod);
        let _ = std::fs::remove_file(self.dir.join(EXEC_INFO));
        // A pod being deleted goes once nothing of it runs.
        if let Some(p) = self.pod() {
            if !p["metadata"]["deletionTimestamp"].is_null() {
                super::remove::remove_terminated(&self.store, &p);
            }
        }
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
