//! What a pod's containers share once prepared, what one container runs, and the pod IP filled
//! in.

use super::volumes::Volumes;
use crate::runtime::container::Container;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Stands for the pod IP in the environment until it is filled in.
pub(super) const POD_IP_MARK: &str = "\u{1}pod-ip\u{1}";

/// What the pod's containers share: the hostname, the service-account files, the volumes.
pub(in crate::cluster::kubelet) struct PodPrep {
    pub(in crate::cluster::kubelet) hostname: String,
    /// The service-account files' directory (None: not mounted).
    pub(super) sa: Option<PathBuf>,
    pub(super) volumes: Volumes,
    /// `fsGroup` of a pod that runs images.
    pub(super) fs_group: Option<u32>,
}

/// What one container runs.
pub(in crate::cluster::kubelet) struct Prepared {
    pub(in crate::cluster::kubelet) command: Vec<String>,
    pub(in crate::cluster::kubelet) env: Vec<(String, String)>,
    pub(in crate::cluster::kubelet) workdir: Option<PathBuf>,
    /// (host source, path in the container).
    pub(in crate::cluster::kubelet) mounts: Vec<(PathBuf, PathBuf)>,
    /// Set for containers that run an image.
    pub(in crate::cluster::kubelet) container: Option<Container>,
}

impl Prepared {
    /// With the pod's address in place of [`POD_IP_MARK`] (in env values and the command).
    pub(super) fn with_pod_ip(self, ip: Ipv4Addr) -> Prepared {
        let ip = ip.to_string();
        Prepared {
            env: self
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace(POD_IP_MARK, &ip)))
                .collect(),
            command: self
                .command
                .iter()
                .map(|a| a.replace(POD_IP_MARK, &ip))
                .collect(),
            ..self
        }
    }
}
