//! Images: a container's root filesystem from the machine's local image store, with the
//! kubelet's pull reasons while the store does not have it.

use super::pod::PodCtx;
use super::status::{set_cond, set_cond_reason};
use super::{Ctl, MAX_BACKOFF};
use crate::api::defaults::now_rfc3339;
use crate::images::MountedImage;
use anyhow::anyhow;
use serde_json::{json, Value};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

impl PodCtx {
    /// The image's root filesystem from the local store. While the store does not have the image
    /// the pod stays Pending with the kubelet's waiting reason (`ErrImageNeverPull` for
    /// `imagePullPolicy: Never`, else `ErrImagePull` then `ImagePullBackOff`), and the store is
    /// checked again now and then (the sandbox has no registry: build or tag the image locally).
    /// `None` when the pod went away meanwhile.
    pub(super) fn pull(
        &self,
        rx: &Receiver<Ctl>,
        c: &Value,
        cname: &str,
        image: &str,
    ) -> Option<Arc<MountedImage>> {
        let policy = c["imagePullPolicy"]
            .as_str()
            .unwrap_or("IfNotPresent")
            .to_string();
        let mut attempts = 0u32;
        let mut backoff = Duration::from_secs(1);
        loop {
            let (reason, message) = match self.images.get(image) {
                Ok(Some(m)) => {
                    self.event(
                        "Normal",
                        "Pulled",
                        &format!("Container image \"{image}\" already present on machine"),
                    );
                    return Some(m);
                }
                Ok(None) if policy == "Never" => (
                    "ErrImageNeverPull",
                    format!("Container image \"{image}\" is not present with pull policy of Never"),
                ),
                Ok(None) => (
                    if attempts == 0 {
                        "ErrImagePull"
                    } else {
                        "ImagePullBackOff"
                    },
                    if attempts == 0 {
                        format!("failed to pull image \"{image}\": the sandbox has no registry and its local image store (containers-storage) does not have this image; build or tag it there (buildah bud -t {image} ...)")
                    } else {
                        format!("Back-off pulling image \"{image}\"")
                    },
                ),
                Err(e) => (
                    if attempts == 0 {
                        "ErrImagePull"
                    } else {
                        "ImagePullBackOff"
                    },
                    format!("failed to pull image \"{image}\": {e:#}"),
                ),
            };
            if attempts == 0 {
                if reason == "ErrImageNeverPull" {
                    self.event("Warning", "ErrImageNeverPull", &message);
                    self.event("Warning", "Failed", "Error: ErrImageNeverPull");
                } else {
                    self.event("Normal", "Pulling", &format!("Pulling image \"{image}\""));
                    self.event("Warning", "Failed", &message);
                    self.event("Warning", "Failed", "Error: ErrImagePull");
                }
            } else if attempts == 1 && reason == "ImagePullBackOff" {
                self.event("Normal", "BackOff", &message);
                self.event("Warning", "Failed", "Error: ImagePullBackOff");
            }
            attempts += 1;
            let (cn, img, r, m) = (
                cname.to_string(),
                image.to_string(),
                reason,
                message.clone(),
            );
            self.status(|st| {
                st["phase"] = json!("Pending");
                st["containerStatuses"] = json!([{
                    "name": cn, "ready": false, "restartCount": 0, "started": false, "image": img, "imageID": "",
                    "state": {"waiting": {"reason": r, "message": m}},
                }]);
                let now = now_rfc3339();
                set_cond(st, "PodReadyToStartContainers", true, &now);
                set_cond(st, "Initialized", true, &now);
                set_cond_reason(st, "Ready", false, &now, "ContainersNotReady", &format!("containers with unready status: [{cn}]"));
                set_cond_reason(st, "ContainersReady", false, &now, "ContainersNotReady", &format!("containers with unready status: [{cn}]"));
            });
            match rx.recv_timeout(backoff) {
                Ok(Ctl::Evict(_, done)) => {
                    let _ = done.send(Err(anyhow!(
                        "pod {} has not started yet ({reason}: {message})",
                        self.name
                    )));
                }
                Ok(_) | Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            // The pod went away meanwhile.
            self.pod()?;
        }
    }
}
