//! What to run in a pod: the pod's identity on the network and its containers.

use crate::container::Container;
use anyhow::{bail, Context, Result};
use std::fs;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// What to run in a pod.
#[derive(Debug, Clone)]
pub struct PodSpec {
    /// Pod name (part of the network-namespace name, truncated).
    pub name: String,
    /// Hostname inside the pod (at most 64 characters: letters, digits, '-', '.').
    pub hostname: String,
    /// Address in the network's /24, `.2`-`.254` (e.g. from [`super::Network::alloc_ip`]).
    pub ip: Ipv4Addr,
    /// The pod's containers. The sandbox runs exactly one per pod: its command is the pod's
    /// PID 1, in the pod's own UTS, mount and PID namespaces.
    pub containers: Vec<ContainerSpec>,
}

impl Default for PodSpec {
    fn default() -> Self {
        PodSpec {
            name: String::new(),
            hostname: String::new(),
            ip: Ipv4Addr::UNSPECIFIED,
            containers: Vec::new(),
        }
    }
}

/// One container of a pod: its command, environment, mounts, log and root filesystem.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// The container command; becomes PID 1 of the pod. Looked up in the pod's `PATH`.
    pub command: Vec<String>,
    /// Exactly the command's environment, plus `PATH` and `HOME` defaults if absent.
    pub env: Vec<(String, String)>,
    /// Working directory inside the pod (default `/`).
    pub workdir: Option<PathBuf>,
    /// (host source, path inside the pod). Missing mount points are created inside the pod
    /// only; the host's directories are left as they are.
    pub bind_mounts: Vec<(PathBuf, PathBuf)>,
    /// File (created or truncated) that gets the command's stdout and stderr, and the pod setup
    /// program's error messages.
    pub log_path: PathBuf,
    /// Run in an image's root filesystem with these settings instead of the host's filesystem
    /// (see [`crate::container`]).
    pub image: Option<Container>,
}

impl PodSpec {
    /// The host part of the pod's address, once the spec is checked against the network's
    /// `10.250.<subnet>.0/24` (`cidr`). Creates the directories of the containers' logs.
    pub(super) fn validate(&self, subnet: u8, cidr: &str) -> Result<u8> {
        if self.name.is_empty() {
            bail!("pod name is empty");
        }
        let o = self.ip.octets();
        if o[0] != 10 || o[1] != 250 || o[2] != subnet || !(2..=254).contains(&o[3]) {
            bail!(
                "pod {}: address {} is not a host address .2-.254 of {cidr}",
                self.name,
                self.ip,
            );
        }
        if self.hostname.is_empty()
            || self.hostname.len() > 64
            || !self
                .hostname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            bail!("pod {}: invalid hostname {:?}", self.name, self.hostname);
        }
        if self.containers.len() != 1 {
            bail!(
                "pod {}: sandbox pods run exactly one container, not {}",
                self.name,
                self.containers.len()
            );
        }
        for c in &self.containers {
            c.validate(&self.name)?;
        }
        Ok(o[3])
    }
}

impl ContainerSpec {
    fn validate(&self, pod: &str) -> Result<()> {
        let Some(cmd0) = self.command.first() else {
            bail!("pod {pod}: empty command");
        };
        if cmd0.is_empty() || cmd0.contains('=') {
            bail!("pod {pod}: command name {cmd0:?} must be non-empty and contain no '='");
        }
        for (k, _) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                bail!("pod {pod}: invalid environment variable name {k:?}");
            }
        }
        if let Some(w) = &self.workdir {
            if !w.is_absolute() {
                bail!(
                    "pod {pod}: working directory {} is not absolute",
                    w.display()
                );
            }
        }
        for (_, dst) in &self.bind_mounts {
            if !dst.is_absolute() {
                bail!("pod {pod}: mount point {} is not absolute", dst.display());
            }
        }
        if let Some(parent) = self.log_path.parent() {
            if !parent.as_os_str().is_empty() {
                fs::create_dir_all(parent)
                    .with_context(|| format!("creating log directory {}", parent.display()))?;
            }
        }
        Ok(())
    }
}
