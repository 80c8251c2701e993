//! Container images for sandbox pods: the local image store (containers-storage, as `buildah`
//! leaves it), each image's configuration, its root filesystem, and a tiny test image.
//!
//! A sandbox has no registry: an image runs when it is in the local store (built with
//! `buildah bud`, imported with `buildah`/`podman`, or tagged there). Its root filesystem comes
//! from a `buildah from --pull-never` working container, mounted once per image and sandbox
//! (`buildah mount`) and removed when the sandbox stops; every pod stacks its own writable
//! layer on it. The working containers are named after the sandbox's network prefix, so
//! [`crate::runtime::podnet::leftovers`] finds them if a sandbox was killed.

mod buildah;
mod test_image;
mod users;

use buildah::{buildah_ok, run_buildah};
pub use buildah::{
    inspect, remove_working_container, tag, untag, working_containers, ImageConfig, CONTAINERS_JSON,
};
pub use test_image::{test_image, TEST_IMAGE_REPO};
pub use users::{groups, passwd, PasswdEntry};

use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Images whose name starts with this (any tag), the empty image and `none` run the host's
/// programs in the host's filesystem, as sandbox pods always did.
pub const HOST_IMAGE_REPO: &str = "prrte-k8s/sandbox-host";

/// Whether a pod with this image runs host programs (no image root filesystem).
pub fn runs_on_host(image: &str) -> bool {
    let image = image.trim();
    image.is_empty()
        || image == "none"
        || image == HOST_IMAGE_REPO
        || image.starts_with(&format!("{HOST_IMAGE_REPO}:"))
        || image.starts_with(&format!("{HOST_IMAGE_REPO}@"))
}

/// The reference a container runtime resolves an image name to, as containerd and CRI-O do
/// (Docker's normalization): a name whose first component is not a registry (no `.` or `:`,
/// not `localhost`) is on `docker.io`, a single-component name in its `library/`, and a name
/// without tag or digest is `:latest`. `mpioperator/x:1` is `docker.io/mpioperator/x:1`,
/// `ubuntu` is `docker.io/library/ubuntu:latest`, `localhost/x` is `localhost/x:latest`. An
/// image ID (64 hex digits, or `sha256:` and them) stays as it is.
pub fn normalize(image: &str) -> String {
    let image = image.trim();
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if hex(image) || image.strip_prefix("sha256:").is_some_and(hex) {
        return image.to_string();
    }
    let mut full = match image.split_once('/') {
        Some((first, _))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            image.to_string()
        }
        Some(_) => format!("docker.io/{image}"),
        None => format!("docker.io/library/{image}"),
    };
    if let Some(rest) = full.strip_prefix("docker.io/") {
        if !rest.contains('/') {
            full = format!("docker.io/library/{rest}");
        }
    }
    let last = full.rsplit('/').next().unwrap_or("");
    if !full.contains('@') && !last.contains(':') {
        full.push_str(":latest");
    }
    full
}

/// Kubernetes' default `imagePullPolicy` for an image name: `Always` when it names the tag
/// `latest` or no tag (and no digest), else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    let image = image.trim();
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or("");
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// An image's root filesystem, mounted for the lifetime of a sandbox.
#[derive(Debug)]
pub struct MountedImage {
    pub config: ImageConfig,
    /// The working container holding the mount.
    pub container: String,
    /// Its root filesystem (never written by pods: they stack their own layer on it).
    pub rootfs: PathBuf,
}

/// The images a sandbox has mounted, by image ID.
pub struct ImageStore {
    prefix: String,
    mounted: Mutex<HashMap<String, Arc<MountedImage>>>,
    released: Mutex<bool>,
}

impl ImageStore {
    /// Working containers are named `<prefix>-img-<image id>`; use the network's prefix.
    pub fn new(prefix: &str) -> ImageStore {
        ImageStore {
            prefix: prefix.to_string(),
            mounted: Mutex::new(HashMap::new()),
            released: Mutex::new(false),
        }
    }

    /// The mounted root filesystem of `image` (mounted on first use); `None` when the local store
    /// does not have the image.
    pub fn get(&self, image: &str) -> Result<Option<Arc<MountedImage>>> {
        let Some(config) = inspect(image)? else {
            return Ok(None);
        };
        let mut m = self.mounted.lock().unwrap_or_else(|p| p.into_inner());
        if *self.released.lock().unwrap_or_else(|p| p.into_inner()) {
            bail!("the sandbox is shutting down");
        }
        if let Some(mi) = m.get(&config.id) {
            return Ok(Some(mi.clone()));
        }
        let name = format!(
            "{}-img-{}",
            self.prefix,
            &config.id[..12.min(config.id.len())]
        );
        // A stale one from an earlier attempt of this same sandbox (never of another).
        let _ = run_buildah(&["rm", &name]);
        buildah_ok(&[
            "from",
            "--pull-never",
            "--quiet",
            "--name",
            &name,
            &config.id,
        ])
        .with_context(|| format!("creating a working container of image {image}"))?;
        let rootfs = match buildah_ok(&["mount", &name]) {
            Ok(p) => PathBuf::from(p),
            Err(e) => {
                let _ = run_buildah(&["rm", &name]);
                return Err(e.context(format!("mounting image {image}")));
            }
        };
        let mi = Arc::new(MountedImage {
            config,
            container: name,
            rootfs,
        });
        m.insert(mi.config.id.clone(), mi.clone());
        Ok(Some(mi))
    }

    /// Unmounts and removes every working container (after the sandbox's pods are gone).
    pub fn release(&self) {
        *self.released.lock().unwrap_or_else(|p| p.into_inner()) = true;
        let all: Vec<Arc<MountedImage>> = self
            .mounted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, v)| v)
            .collect();
        for mi in all {
            if let Err(e) = buildah_ok(&["rm", &mi.container]) {
                tracing::warn!("removing working container {}: {e:#}", mi.container);
            }
        }
    }
}

impl Drop for ImageStore {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests;
