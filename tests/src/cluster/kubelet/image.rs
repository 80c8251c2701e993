//! Images: a container's root filesystem from the machine's local image store, which stands in
//! for the registry, with the kubelet's pull policies, events and waiting reasons.

use super::containers::{PodContainer, PullPolicy};
use super::pod::PodCtx;
use std::time::Instant;

/// Why a container's image is not there (yet): the waiting reason and message.
pub(super) type NotPulled = (&'static str, String);

impl PodCtx {
    /// One attempt to have container `c`'s image (`attempts`: the failed ones before, for the
    /// reason and the events). Sets `c.rootfs`: with `Always` the name is resolved again at
    /// every start (an image re-tagged in the store meanwhile is the one that runs), with
    /// `IfNotPresent` and `Never` the image of the first start is kept. Nothing to do for a
    /// container that runs the host's programs. The sandbox has no registry: an image the
    /// store does not have waits with `ErrImageNeverPull` (`Never`), else `ErrImagePull` then
    /// `ImagePullBackOff`, until it is built or tagged there.
    pub(super) fn pull(&self, c: &mut PodContainer, attempts: u32) -> Result<(), NotPulled> {
        if c.on_host() {
            return Ok(());
        }
        let image = c.reference.clone();
        if c.pull != PullPolicy::Always && c.rootfs.is_some() {
            self.present(&image);
            return Ok(());
        }
        if c.pull == PullPolicy::Always && attempts == 0 {
            self.event("Normal", "Pulling", &format!("Pulling image \"{image}\""));
        }
        let began = Instant::now();
        let (reason, message) = match self.images.get(&image) {
            Ok(Some(m)) => {
                if c.pull == PullPolicy::Always {
                    let took = began.elapsed().as_millis();
                    let message = format!("Successfully pulled image \"{image}\" in {took}ms");
                    self.event("Normal", "Pulled", &message);
                } else {
                    self.present(&image);
                }
                c.rootfs = Some(m);
                return Ok(());
            }
            Ok(None) => not_present(&image, c.pull == PullPolicy::Never, attempts),
            Err(e) => (
                pull_failed(attempts),
                format!("failed to pull image \"{image}\": {e:#}"),
            ),
        };
        self.pull_events(&image, c.pull, attempts, reason, &message);
        Err((reason, message))
    }

    fn present(&self, image: &str) {
        let message = format!("Container image \"{image}\" already present on machine");
        self.event("Normal", "Pulled", &message);
    }

    /// The kubelet's events of a failed pull: at the first attempt, and when back-off begins.
    fn pull_events(&self, image: &str, p: PullPolicy, attempts: u32, reason: &str, m: &str) {
        if attempts == 0 {
            if reason == "ErrImageNeverPull" {
                self.event("Warning", "ErrImageNeverPull", m);
                self.event("Warning", "Failed", "Error: ErrImageNeverPull");
            } else {
                if p != PullPolicy::Always {
                    self.event("Normal", "Pulling", &format!("Pulling image \"{image}\""));
                }
                self.event("Warning", "Failed", m);
                self.event("Warning", "Failed", "Error: ErrImagePull");
            }
        } else if attempts == 1 && reason == "ImagePullBackOff" {
            self.event("Normal", "BackOff", m);
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
fn not_present(image: &str, never: bool, attempts: u32) -> NotPulled {
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
