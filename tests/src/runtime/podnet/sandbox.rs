//! A pod's sandbox: what its containers share. The network namespace with `lo` and `eth0` (one
//! end of a veth pair on the network's bridge, the pod's address, the default route via the
//! gateway), the UTS namespace (the pod's hostname) and the IPC namespace, both kept by bind
//! mounts of their namespace files in the state directory (as `ip netns` keeps a network
//! namespace), the pod's `/etc/hosts`, its memory-backed volumes (a tmpfs each, mounted in the
//! state directory), and the state directory on the host.

use super::cidr::PREFIX_LEN;
use super::host::{delete_link, delete_netns, host_lock, ip, run, tools, unmount_below};
use anyhow::{Context, Result};
use nix::mount::{mount, MsFlags};
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// `$0` of the program that sets the hostname in the pod's new UTS namespace.
const UTS_ARG0: &str = "pk8s-pod-uts";

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

    /// The pod's `/etc/hosts` (see [`PodSandbox::write_hosts`]).
    pub(super) fn hosts_file(&self) -> PathBuf {
        self.state_dir.join("hosts")
    }

    /// Like the kubelet: an /etc/hosts that knows the pod's own name (in the state directory).
    pub(super) fn write_hosts(&self, pod: &str, pod_ip: Ipv4Addr, hostname: &str) -> Result<()> {
        let hosts = self.hosts_file();
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
        )
        .with_context(|| format!("writing {}", hosts.display()))
    }

    /// Creates the network namespace and the veth pair, and configures both ends: `eth0` with
    /// `pod_ip`/23 ([`PREFIX_LEN`]) and a default route via `gateway`, the host end on `bridge`.
    pub(super) fn connect(&self, bridge: &str, gateway: Ipv4Addr, pod_ip: Ipv4Addr) -> Result<()> {
        {
            let _guard = host_lock()?;
            ip(&["netns", "add", &self.netns])?;
        }
        let gw = gateway.to_string();
        let addr = format!("{pod_ip}/{PREFIX_LEN}");
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
        // A pod that gets the address of a pod gone before announces itself (a gratuitous
        // ARP), as a node's CNI makes it do: its neighbours forget the old pod's MAC at once
        // instead of after their ARP timeouts.
        announce(n, pod_ip)?;
        let _ = fs::write(format!("/proc/sys/net/ipv6/conf/{veth}/disable_ipv6"), "1");
        Ok(())
    }

    /// The file that keeps the pod's namespace `kind` (`uts`, `ipc`).
    pub(super) fn ns_file(&self, kind: &str) -> PathBuf {
        self.state_dir.join("ns").join(kind)
    }

    /// Creates the pod's UTS and IPC namespaces, kept by bind mounts of their files (see
    /// [`PodSandbox::ns_file`]), and sets the hostname in the UTS namespace.
    pub(super) fn pin_namespaces(&self, hostname: &str) -> Result<()> {
        let (uts, ipc) = (self.ns_file("uts"), self.ns_file("ipc"));
        fs::create_dir_all(self.state_dir.join("ns"))?;
        for f in [&uts, &ipc] {
            fs::write(f, b"").with_context(|| format!("creating {}", f.display()))?;
        }
        let t = tools()?;
        let (uts_opt, ipc_opt) = (
            format!("--uts={}", uts.display()),
            format!("--ipc={}", ipc.display()),
        );
        let set_hostname = r#"printf '%s' "$1" >/proc/sys/kernel/hostname"#;
        run(
            &t.unshare,
            &[
                &uts_opt,
                &ipc_opt,
                "--",
                &t.sh.to_string_lossy(),
                "-c",
                set_hostname,
                UTS_ARG0,
                hostname,
            ],
        )
        .with_context(|| format!("creating the UTS and IPC namespaces of pod {}", self.netns))?;
        Ok(())
    }

    /// The pod's memory-backed volume `name` (a tmpfs with root directory `mode` and group
    /// `gid`, mounted on first use): its directory on the host, which every container that
    /// mounts the volume gets.
    pub(super) fn memory_volume(&self, name: &str, mode: u32, gid: u32) -> Result<PathBuf> {
        let d = self.state_dir.join("memory").join(name);
        fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        let data = format!("mode={mode:o},gid={gid}");
        mount(
            Some("tmpfs"),
            &d,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .with_context(|| format!("mounting the memory volume {name} on {}", d.display()))?;
        Ok(d)
    }

    /// A fresh directory for the files of container `name`'s start number `seq`.
    pub(super) fn container_dir(&self, name: &str, seq: u32) -> Result<PathBuf> {
        let d = self
            .state_dir
            .join("containers")
            .join(format!("{name}.{seq}"));
        fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }

    /// Deletes the veth, the network namespace, what is mounted in the state directory
    /// (namespace files, memory volumes) and the state directory; errors go to `errors`.
    pub(super) fn teardown(&self, errors: &mut Vec<String>) {
        if let Err(e) = delete_link(&self.veth) {
            errors.push(format!("{e:#}"));
        }
        if let Err(e) = delete_netns(&self.netns) {
            errors.push(format!("{e:#}"));
        }
        if let Err(e) = unmount_below(&self.state_dir) {
            errors.push(format!("{e:#}"));
        }
        if self.state_dir.exists() {
            if let Err(e) = fs::remove_dir_all(&self.state_dir) {
                errors.push(format!("removing {}: {e}", self.state_dir.display()));
            }
        }
    }
}

/// Whether `binds` already mount something on `/etc/hosts`.
pub(super) fn mounts_hosts(binds: &[(PathBuf, PathBuf)]) -> bool {
    binds.iter().any(|(_, d)| d == Path::new("/etc/hosts"))
}

/// Gratuitous ARP (a request and a reply for its own address) from `eth0` in `netns`.
const GARP_PY: &str = r#"
import socket, struct, sys
ip = socket.inet_aton(sys.argv[1])
mac = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
for op, tha in ((1, b"\x00" * 6), (2, b"\xff" * 6)):
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, mac, ip, tha, ip)
    s.send(b"\xff" * 6 + mac + b"\x08\x06" + arp)
"#;

/// Sends [`GARP_PY`]'s gratuitous ARP for `pod_ip` in `netns`.
fn announce(netns: &str, pod_ip: Ipv4Addr) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", netns, "python3", "-c", GARP_PY])
        .arg(pod_ip.to_string())
        .output()
        .context("running ip netns exec python3")?;
    if !out.status.success() {
        anyhow::bail!(
            "announcing {pod_ip} in {netns}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
