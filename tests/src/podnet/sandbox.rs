//! A pod's sandbox: what its containers share. The network namespace with `lo` and `eth0` (one
//! end of a veth pair on the network's bridge, the pod's address, the default route via the
//! gateway), the pod's `/etc/hosts`, and its state directory on the host.

use super::host::{delete_link, delete_netns, host_lock, ip};
use anyhow::{Context, Result};
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The names of a pod's sandbox on the host.
#[derive(Debug, Clone)]
pub(super) struct PodSandbox {
    /// Network namespace (`ip netns`), also the prefix-carrying name of the pod on the host.
    pub(super) netns: String,
    /// Host side of the pod's veth pair (the pod side is `eth0`).
    pub(super) veth: String,
    /// The pod's files on the host (`/etc/hosts`, its containers' files).
    pub(super) state_dir: PathBuf,
}

impl PodSandbox {
    pub(super) fn create_state_dir(&self) -> Result<()> {
        fs::create_dir_all(&self.state_dir)
            .with_context(|| format!("creating {}", self.state_dir.display()))
    }

    /// Like the kubelet: an /etc/hosts that knows the pod's own name (in the state directory).
    pub(super) fn write_hosts(
        &self,
        pod: &str,
        pod_ip: Ipv4Addr,
        hostname: &str,
    ) -> Result<PathBuf> {
        let hosts = self.state_dir.join("hosts");
        fs::write(
            &hosts,
            format!(
                "# Kubernetes-managed hosts file (prrte-k8s sandbox pod {pod}).\n\
                 127.0.0.1\tlocalhost\n\
                 ::1\tlocalhost ip6-localhost ip6-loopback\n\
                 fe00::0\tip6-localnet\nfe00::1\tip6-mcastprefix\n\
                 fe00::2\tip6-allrouters\n\
                 {pod_ip}\t{hostname}\n"
            ),
        )?;
        Ok(hosts)
    }

    /// Creates the network namespace and the veth pair, and configures both ends: `eth0` with
    /// `pod_ip`/24 and a default route via `gateway`, the host end on `bridge`.
    pub(super) fn connect(&self, bridge: &str, gateway: Ipv4Addr, pod_ip: Ipv4Addr) -> Result<()> {
        {
            let _guard = host_lock()?;
            ip(&["netns", "add", &self.netns])?;
        }
        let gw = gateway.to_string();
        let addr = format!("{pod_ip}/24");
        let n = self.netns.as_str();
        let veth = self.veth.as_str();
        let steps: [&[&str]; 7] = [
            &[
                "link", "add", "name", veth, "type", "veth", "peer", "name", "eth0", "netns", n,
            ],
            &["link", "set", "dev", veth, "master", bridge],
            &["link", "set", "dev", veth, "up"],
            &["-n", n, "link", "set", "dev", "lo", "up"],
            &["-n", n, "addr", "add", &addr, "dev", "eth0"],
            &["-n", n, "link", "set", "dev", "eth0", "up"],
            &[
                "-n", n, "route", "add", "default", "via", &gw, "dev", "eth0",
            ],
        ];
        for args in steps {
            ip(args)?;
        }
        let _ = fs::write(format!("/proc/sys/net/ipv6/conf/{veth}/disable_ipv6"), "1");
        Ok(())
    }

    /// Deletes the veth, the network namespace and the state directory; errors go to `errors`.
    pub(super) fn teardown(&self, errors: &mut Vec<String>) {
        if let Err(e) = delete_link(&self.veth) {
            errors.push(format!("{e:#}"));
        }
        if let Err(e) = delete_netns(&self.netns) {
            errors.push(format!("{e:#}"));
        }
        if self.state_dir.exists() {
            if let Err(e) = fs::remove_dir_all(&self.state_dir) {
                errors.push(format!("removing {}: {e}", self.state_dir.display()));
            }
        }
    }

    /// Path of a file of the pod's (single) container: its files sit in the state directory.
    pub(super) fn file(&self, name: &str) -> PathBuf {
        self.state_dir.join(name)
    }
}

/// Whether `binds` already mount something on `/etc/hosts`.
pub(super) fn mounts_hosts(binds: &[(PathBuf, PathBuf)]) -> bool {
    binds.iter().any(|(_, d)| d == Path::new("/etc/hosts"))
}
