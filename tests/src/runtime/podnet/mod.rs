//! Pods as Linux namespaces.
//!
//! A sandbox pod is what a pod is on a node: a **sandbox** that its containers share, and
//! **containers**, each its own process. The sandbox (`sandbox`) is
//!
//! * the pod's **network namespace**: `eth0` is one end of a veth pair whose other end sits on
//!   the [`Network`]'s bridge; it carries the pod's IPv4 address in the network's /24, `lo` is up
//!   and the default route points at the bridge's gateway address (the host side, where a
//!   sandbox API server can listen);
//! * its **UTS namespace** (hostname = [`PodSpec::hostname`]) and **IPC namespace** (System V
//!   IPC, POSIX message queues), kept by bind mounts of their namespace files in the pod's state
//!   directory while the pod lives, as `ip netns` keeps a network namespace;
//! * its `/etc/hosts` (as the kubelet writes it: it names the pod's own hostname) and its
//!   memory-backed volumes (a tmpfs each, mounted in the state directory on first use, so that
//!   every container mounting the volume shares it).
//!
//! Each container ([`ContainerSpec`], started by [`RunningPod::start_container`]; `spawn`,
//! `process`) joins the sandbox's namespaces and gets
//!
//! * its own **mount namespace**: on the host's filesystem (binaries under /opt, /usr and the
//!   repository's target directory are visible), files are bind-mounted at container-specific
//!   paths (for example the service-account directory). Mount points that do not exist on the
//!   host are created only inside the container: the nearest existing ancestor directory is
//!   covered by a private tmpfs that keeps the ancestor's entries visible through bind mounts,
//!   and the missing directories are made on that tmpfs. A container with an image runs in the
//!   image's root filesystem instead (see [`crate::runtime::container`]). Two containers that mount the
//!   same host directory (an emptyDir) see the same files;
//! * its own **PID namespace**: the container command is PID 1, and killing it ends every
//!   process of the container, including the ones started later with [`RunningPod::exec_in`].
//!
//! Everything is built with `ip` (iproute2), `unshare`/`nsenter`/`mount` (util-linux) and a small
//! POSIX shell program that prepares the container before it `exec`s its command. All names
//! a [`Network`] creates (bridge, veths, network namespaces, state directories) start with
//! [`Network::prefix`], which is what [`leftovers()`] takes to check that nothing stayed behind;
//! [`cleanup_leftovers`] removes what a killed test run left. A network's owner holds a lock
//! named with its prefix while it lives, so [`cleanup_dead_networks`] finds and removes what
//! killed runs left without touching the networks of live ones.
//!
//! Everything here needs root and blocks (it runs host tools and polls /proc); async code calls
//! it through `spawn_blocking`. Host settings touched: the `bridge-nf-call-*` sysctls are set to
//! 0 when `br_netfilter` is loaded, so that bridged pod traffic is never filtered. IP forwarding
//! is left alone: pods only talk to each other and to the gateway address, and nothing leaves the
//! machine.
//!
//! The rest: `network` (the bridge, starting pods), `cidr` (its /23 and pod addresses), `mounts` (the
//! host-filesystem setup program), `state` (what a pod and its network share), `pod`
//! ([`RunningPod`], `exec`), `host` and `procfs` (host tools, mounts, /proc), `names`,
//! `leftovers`.

mod cidr;
mod host;
mod leftovers;
mod mounts;
mod names;
mod network;
mod pod;
mod process;
mod procfs;
mod sandbox;
mod spawn;
mod spec;
mod state;
#[cfg(test)]
mod tests;

pub use cidr::{PodCidr, MAX_PODS, PREFIX_LEN};
pub use leftovers::{cleanup_dead_networks, cleanup_leftovers, leftovers, Leftovers};
pub use network::Network;
pub use pod::{exec_command, RunningPod};
pub use process::PodExit;
pub use spec::{ContainerSpec, PodSpec};

pub use names::{DEFAULT_HOME, NAME_PREFIX, STATE_DIR};

pub use crate::runtime::container::DEFAULT_PATH;
