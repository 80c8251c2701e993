//! What to run in a pod: the pod's identity on the network and its containers.

use super::cidr::PodCidr;
use crate::runtime::container::Container;
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
    /// The containers [`super::Network::start_pod`] starts, in order (each its own process in
    /// its own mount and PID namespaces, sharing the pod's network, UTS and IPC namespaces).
    /// [`super::Network::start_sandbox`] starts none: see [`super::RunningPod::start_container`].
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
    /// Its name in the pod (letters, digits, '-', '_', '.'; unique in the pod). Empty in
    /// [`super::Network::start_pod`]: `c0`, `c1`, ... by position.
    pub name: String,
    /// The container command; becomes PID 1 of the container. Looked up in its `PATH`.
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
    /// (see [`crate::runtime::container`]).
    pub image: Option<Container>,
}

impl PodSpec {
    /// The host number of the pod's address, once the pod's identity is checked against the
    /// network's `cidr`. The containers are checked when they start.
    pub(super) fn validate(&self, cidr: &PodCidr) -> Result<u16> {
        if self.name.is_empty() {
            bail!("pod name is empty");
        }
        let Some(host) = cidr.pod_host(self.ip) else {
            bail!(
                "pod {}: address {} is not a pod address of {cidr} (neither its first, the gateway's nor its last)",
                self.name,
                self.ip,
            );
        };
        if self.hostname.is_empty()
            || self.hostname.len() > 64
            || !self
                .hostname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            bail!("pod {}: invalid hostname {:?}", self.name, self.hostname);
        }
        Ok(host)
    }
}

impl ContainerSpec {
    /// Checks the container of pod `pod`; creates the directory of its log.
    pub(super) fn validate(&self, pod: &str) -> Result<()> {
        if self.name.is_empty()
            || self.name.len() > 63
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            || self.name.starts_with('.')
        {
            bail!("pod {pod}: invalid container name {:?}", self.name);
        }
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
