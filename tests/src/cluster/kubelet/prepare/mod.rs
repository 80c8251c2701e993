//! What a pod's containers need before they start: the service-account files, the volumes,
//! and for each container its mounts, environment, command and (in an image) root filesystem
//! and security settings. Something missing that may still appear (a Secret, a ConfigMap, the
//! ServiceAccount) keeps the pod waiting, as on a node.

mod command;
mod env;
mod error;
mod prepared;
pub(super) mod sources;
mod volumes;

pub use env::expand;
use error::fatal;
pub(super) use error::PrepareError;
pub(super) use prepared::PreparedPod;
pub use volumes::SA_MOUNT;

use super::pod::{Pod, PodContainer, PodCtx};
use crate::cluster::security::{self, Security};

impl PodCtx {
    /// Prepares the pod: the checks and files that the pod's containers share first (their
    /// users, the service account, the volumes), then each container's mounts, environment
    /// and command.
    pub(super) fn prepare(&self, pod: &Pod) -> Result<PreparedPod, PrepareError> {
        // What each container runs as (image containers only); refusals keep the pod waiting.
        let security = pod
            .containers
            .iter()
            .map(|c| container_security(&pod.object, c))
            .collect::<Result<Vec<_>, _>>()?;
        let fs_group = security.iter().flatten().find_map(|s| s.fs_group);
        let image_pod = pod.containers.iter().any(|c| c.rootfs.is_some());
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| fatal(format!("creating {}: {e}", self.dir.display())))?;
        let sa = self.service_account(&pod.object)?;
        let volumes = self.volumes(&pod.object, fs_group, image_pod)?;
        let hostname = pod.object["spec"]["hostname"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.name)
            .to_string();
        let mut containers = Vec::with_capacity(pod.containers.len());
        for (c, security) in pod.containers.iter().zip(security) {
            let mounts = volumes.mounts(c, sa.as_deref(), fs_group)?;
            let env = self.env(&pod.object, c, &hostname)?;
            containers.push(command::prepared(c, security, env, mounts)?);
        }
        Ok(PreparedPod {
            hostname,
            containers,
        })
    }
}

/// What container `c` runs as, when it runs an image.
fn container_security(
    pod: &serde_json::Value,
    c: &PodContainer,
) -> Result<Option<Security>, PrepareError> {
    let Some(mi) = &c.rootfs else {
        return Ok(None);
    };
    security::resolve(pod, &c.spec, &mi.config, &mi.rootfs)
        .map(Some)
        .map_err(|e| PrepareError::Config(e.reason, e.message))
}
