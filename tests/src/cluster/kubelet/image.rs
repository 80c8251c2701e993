//! Images: a container's root filesystem from the machine's local image store, with the
//! kubelet's pull reasons while the store does not have it.

use super::backoff::MAX_BACKOFF;
use super::control::Ctl;
use super::pod::{PodContainer, PodCtx};
use crate::images::{self, MountedImage};
use anyhow::anyhow;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

impl PodCtx {
    /// Sets `c.rootfs` from the store (nothing to do for a container that runs the host's
    /// programs). False when the pod went away meanwhile.
    pub(super) fn pull_rootfs(&self, rx: &Receiver<Ctl>, c: &mut PodContainer) -> bool {
        if images::runs_on_host(&c.image) {
            return true;
        }
        match self.pull(rx, c) {
            Some(m) => {
                c.rootfs = Some(m);
                true
            }
            None => false,
        }
    }

    /// The image's root filesystem from the local store. While the store does not have the image
    /// the pod stays Pending with the kubelet's waiting reason (`ErrImageNeverPull` for
    /// `imagePullPolicy: Never`, else `ErrImagePull` then `ImagePullBackOff`), and the store is
    /// checked again now and then (the sandbox has no registry: build or tag the image locally).
    /// `None` when the pod went away meanwhile.
    fn pull(&self, rx: &Receiver<Ctl>, c: &PodContainer) -> Option<Arc<MountedImage>> {
        let image = c.image.as_str();
        let never = c.spec["imagePullPolicy"].as_str().unwrap_or("IfNotPresent") == "Never";
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
                Ok(None) => not_present(image, never, attempts),
                Err(e) => (
                    pull_failed(attempts),
                    format!("failed to pull image \"{image}\": {e:#}"),
                ),
            };
            self.pull_events(image, attempts, reason, &message);
            attempts += 1;
            self.report_pulling(c, reason, &message);
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

    /// The kubelet's events of a failed pull: at the first attempt, and when back-off begins.
    fn pull_events(&self, image: &str, attempts: u32, reason: &str, message: &str) {
        if attempts == 0 {
            if reason == "ErrImageNeverPull" {
                self.event("Warning", "ErrImageNeverPull", message);
                self.event("Warning", "Failed", "Error: ErrImageNeverPull");
            } else {
                self.event("Normal", "Pulling", &format!("Pulling image \"{image}\""));
                self.event("Warning", "Failed", message);
                self.event("Warning", "Failed", "Error: ErrImagePull");
            }
        } else if attempts == 1 && reason == "ImagePullBackOff" {
            self.event("Normal", "BackOff", message);
            self.event("Warning", "Failed", "Error: ImagePullBackOff");
        }
    }
}

/// `ErrImagePull` at the first attempt, `ImagePullBackOff` after.
fn pull_failed(attempts: u32) -> &'static str {
    if attempts == 0 {
        "ErrImagePull"
    } else {
        "ImagePullBackOff"
    }
}

/// The waiting reason and message for an image the store does not have.
fn not_present(image: &str, never: bool, attempts: u32) -> (&'static str, String) {
    if never {
        return (
            "ErrImageNeverPull",
            format!("Container image \"{image}\" is not present with pull policy of Never"),
        );
    }
    let message = if attempts == 0 {
        format!("failed to pull image \"{image}\": the sandbox has no registry and its local image store (containers-storage) does not have this image; build or tag it there (buildah bud -t {image} ...)")
    } else {
        format!("Back-off pulling image \"{image}\"")
    };
    (pull_failed(attempts), message)
}
