//! What a pod's containers need before they start: once for the pod, the service-account
//! files and the volumes; at each start of a container, its mounts, environment, command and
//! (in an image) root filesystem and security settings. Something missing that may still
//! appear (a Secret, a ConfigMap, the ServiceAccount) keeps the pod or the container waiting,
//! as on a node.

mod command;
mod env;
mod error;
mod prepared;
pub(super) mod sources;
mod volumes;

pub use env::expand;
use error::fatal;
pub(super) use error::PrepareError;
pub(super) use prepared::{PodPrep, Prepared};
pub use volumes::SA_MOUNT;

use super::containers::{Pod, PodContainer};
use super::pod::PodCtx;
use crate::cluster::security::{self, Security};
use std::net::Ipv4Addr;

impl PodCtx {
    /// Prepares what the pod's containers share: the service account's files and the volumes
    /// (their users' checks come with each container).
    pub(super) fn prepare_pod(&self, pod: &Pod) -> Result<PodPrep, PrepareError> {
        let fs_group = pod
            .object
            .pointer("/spec/securityContext/fsGroup")
            .and_then(serde_json::Value::as_u64)
            .filter(|_| pod.runs_images())
            .map(|g| g as u32);
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| fatal(format!("creating {}: {e}", self.dir.display())))?;
        let sa = self.service_account(&pod.object)?;
        let volumes = self.volumes(&pod.object, fs_group, pod.runs_images())?;
        let hostname = pod.object["spec"]["hostname"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.name)
            .to_string();
        Ok(PodPrep {
            hostname,
            sa,
            volumes,
            fs_group,
        })
    }

    /// Prepares container `c` of `pod` (whose address is `ip`) to start: what it runs as (in
    /// an image; a refusal keeps it waiting), its mounts, environment and command.
    pub(super) fn prepare_container(
        &self,
        pod: &Pod,
        prep: &PodPrep,
        c: &PodContainer,
        ip: Ipv4Addr,
    ) -> Result<Prepared, PrepareError> {
        let security = container_security(&pod.object, c)?;
        let mounts = prep.volumes.mounts(c, prep.sa.as_deref(), prep.fs_group)?;
        let env = self.env(&pod.object, c, &prep.hostname)?;
        Ok(command::prepared(c, security, env, mounts)?.with_pod_ip(ip))
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
