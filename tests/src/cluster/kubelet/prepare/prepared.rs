//! What a pod's containers run once prepared, and the pod IP filled in once it is known.

use crate::container::Container;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Stands for the pod IP in the environment until the address is allocated.
pub(super) const POD_IP_MARK: &str = "\u{1}pod-ip\u{1}";

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

/// What the pod's containers run, in the pod's order.
pub(in crate::cluster::kubelet) struct PreparedPod {
    pub(in crate::cluster::kubelet) hostname: String,
    pub(in crate::cluster::kubelet) containers: Vec<Prepared>,
}

impl PreparedPod {
    /// With the pod's address in place of [`POD_IP_MARK`] (in env values and the command).
    pub(in crate::cluster::kubelet) fn with_pod_ip(self, ip: Ipv4Addr) -> PreparedPod {
        let ip = ip.to_string();
        let containers = self
            .containers
            .into_iter()
            .map(|p| Prepared {
                env: p
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.replace(POD_IP_MARK, &ip)))
                    .collect(),
                command: p
                    .command
                    .iter()
                    .map(|a| a.replace(POD_IP_MARK, &ip))
                    .collect(),
                ..p
            })
            .collect();
        PreparedPod { containers, ..self }
    }
}
