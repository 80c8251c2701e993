//! Pods as Linux namespaces.
//!
//! A sandbox pod is what a pod is on a node, minus the container image: the host filesystem is
//! shared (binaries under /opt, /usr and the repository's target directory are visible), but the
//! pod has
//!
//! * its own **network namespace**: `eth0` is one end of a veth pair whose other end sits on the
//!   [`Network`]'s bridge; it carries the pod's IPv4 address in the network's /24, `lo` is up and
//!   the default route points at the bridge's gateway address (the host side, where a sandbox API
//!   server can listen);
//! * its own **UTS namespace** (hostname = [`PodSpec::hostname`]);
//! * its own **mount namespace**, so files can be bind-mounted at pod-specific paths (for example
//!   the service-account directory). Mount points that do not exist on the host are created only
//!   inside the pod: the nearest existing ancestor directory is covered by a pod-private tmpfs that
//!   keeps the ancestor's entries visible through bind mounts, and the missing directories are
//!   made on that tmpfs. Like the kubelet, the sandbox also gives each pod an `/etc/hosts` that
//!   names the pod's own hostname;
//! * its own **PID namespace**: the container command is PID 1, and killing it ends every process
//!   in the pod, including the ones started later with [`RunningPod::exec`].
//!
//! Everything is built with `ip` (iproute2), `unshare`/`nsenter`/`mount` (util-linux) and a small
//! POSIX shell program that prepares the pod before it `exec`s the container command. All names
//! a [`Network`] creates (bridge, veths, network namespaces, state directories) start with
//! [`Network::prefix`], which is what [`leftovers()`] takes to check that nothing stayed behind;
//! [`cleanup_leftovers`] removes what a killed test run left.
//!
//! Everything here needs root and blocks (it runs host tools and polls /proc); async code calls
//! it through `spawn_blocking`. Host settings touched: the `bridge-nf-call-*` sysctls are set to
//! 0 when `br_netfilter` is loaded, so that bridged pod traffic is never filtered. IP forwarding
//! is left alone: pods only talk to each other and to the gateway address, and nothing leaves the
//! machine.
//!
//! A pod is its **sandbox** (`sandbox`: network namespace, veth, `/etc/hosts`, state directory)
//! and a list of **containers** ([`PodSpec::containers`], each a [`ContainerSpec`] with its own
//! command, environment, mounts, log and root filesystem), each run as its own process
//! (`spawn`, `process`). Sandbox pods have exactly one container, whose process makes the UTS,
//! mount and PID namespaces; a second container would join the first one's UTS namespace and
//! get mount and PID namespaces of its own. The rest: `network` (the bridge and its addresses),
//! `mounts` (the host-filesystem setup program), `state` (what a pod and its network share),
//! `pod` ([`RunningPod`], `exec`), `host` and `procfs` (host tools, /proc), `leftovers`.

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

pub use leftovers::{cleanup_leftovers, leftovers, Leftovers};
pub use network::Network;
pub use pod::{exec_command, RunningPod};
pub use process::PodExit;
pub use spec::{ContainerSpec, PodSpec};

pub use names::{DEFAULT_HOME, NAME_PREFIX, STATE_DIR};

pub use crate::container::DEFAULT_PATH;
