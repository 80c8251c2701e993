//! The pods' network: a bridge with a /23 and the gateway address, the addresses it hands out,
//! and starting pods on it.

use super::cidr::{PodCidr, PREFIX_LEN};
use super::host::{
    delete_link, host_lock, ip, list_dir_names, owner_alive, owner_lock_path, pods_state_dir,
    require_root, take_owner_lock, tools,
};
use super::names::NAME_PREFIX;
use super::pod::RunningPod;
use super::sandbox::PodSandbox;
use super::spec::PodSpec;
use super::state::{lock, NetState, PodInner};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

/// A bridge with a /23 out of 10.250.0.0/16 ([`PodCidr`]: 509 pod addresses, as a node's pod
/// CIDR for more than 254 pods); the host holds the gateway address (the second) on it.
///
/// Pods on the network reach each other over the bridge and the host (anything listening on
/// [`Network::gateway`]) directly; there is no NAT and no route off the machine. Dropping the
/// network kills the pods still running on it and deletes the bridge.
pub struct Network {
    id: String,
    bridge: String,
    cidr: PodCidr,
    state: Arc<Mutex<NetState>>,
    torn_down: bool,
    /// Held while the network lives (see [`super::cleanup_dead_networks`]).
    owner: Option<nix::fcntl::Flock<fs::File>>,
}

impl Network {
    /// Creates a bridge `pk8s<6 hex>` with a /23 in 10.250.0.0/16 that no host interface
    /// address or route uses, puts the gateway on it and brings it up.
    pub fn create() -> Result<Network> {
        require_root()?;
        tools()?;
        let _guard = host_lock()?;

        let existing_links: HashSet<String> =
            list_dir_names("/sys/class/net").into_iter().collect();
        let id = (0..64)
            .map(|_| format!("{:06x}", rand::random::<u32>() & 0x00ff_ffff))
            .find(|id| {
                let p = format!("{NAME_PREFIX}{id}");
                !owner_alive(&p)
                    && !existing_links.iter().any(|l| l.starts_with(&p))
                    && !list_dir_names("/run/netns")
                        .iter()
                        .any(|n| n.starts_with(&p))
            })
            .ok_or_else(|| anyhow!("could not pick an unused network id"))?;
        let bridge = format!("{NAME_PREFIX}{id}");
        // Taken before anything is named with the prefix, under the host lock that a sweep of
        // dead networks also holds.
        let owner = take_owner_lock(&bridge)?;

        let used = used_ipv4_prefixes()?;
        let start = rand::random::<u16>() % PodCidr::CANDIDATES;
        let cidr = (0..PodCidr::CANDIDATES)
            .map(|i| PodCidr::candidate((start + i) % PodCidr::CANDIDATES))
            .find(|c| !used.iter().any(|&u| prefixes_overlap(u, c.prefix())))
            .ok_or_else(|| anyhow!("no free /{PREFIX_LEN} left in 10.250.0.0/16 on this host"))?;

        let net = Network {
            id,
            bridge,
            cidr,
            state: Arc::new(Mutex::new(NetState {
                reserved: BTreeSet::new(),
                in_use: BTreeSet::new(),
                pods: Vec::new(),
                next_seq: 0,
            })),
            torn_down: false,
            owner: Some(owner),
        };
        // From here on, Drop deletes the bridge if anything fails. Its MAC address is set, so
        // that it is kept: a bridge whose address was not set takes the lowest of its ports',
        // so it would change as pods come and go, and the pods' ARP entries for the gateway
        // would go stale (their traffic to the host, the API server's included, stalls for a
        // second or two until ARP finds the new address).
        let mac = net.bridge_mac();
        ip(&[
            "link",
            "add",
            "name",
            &net.bridge,
            "address",
            &mac,
            "type",
            "bridge",
            "stp_state",
            "0",
        ])
        .context("creating the bridge")?;
        net.configure_bridge()?;
        Ok(net)
    }

    fn configure_bridge(&self) -> Result<()> {
        let br = self.bridge.as_str();
        // Bridged pod-to-pod traffic must not go through the host's iptables/arptables (when
        // br_netfilter is loaded). The per-bridge switches only help when the global ones are
        // off, so both are turned off.
        let _ = ip(&[
            "link",
            "set",
            "dev",
            br,
            "type",
            "bridge",
            "nf_call_iptables",
            "0",
            "nf_call_ip6tables",
            "0",
            "nf_call_arptables",
            "0",
        ]);
        for f in [
            "bridge-nf-call-iptables",
            "bridge-nf-call-ip6tables",
            "bridge-nf-call-arptables",
        ] {
            let p = Path::new("/proc/sys/net/bridge").join(f);
            if fs::read_to_string(&p)
                .map(|v| v.trim() != "0")
                .unwrap_or(false)
            {
                if let Err(e) = fs::write(&p, "0") {
                    tracing::warn!("could not turn off {}: {e}", p.display());
                }
            }
        }
        // The sandbox network is IPv4 only.
        let _ = fs::write(format!("/proc/sys/net/ipv6/conf/{br}/disable_ipv6"), "1");
        let gw = format!("{}/{PREFIX_LEN}", self.gateway());
        ip(&["addr", "add", &gw, "dev", br]).context("adding the gateway address")?;
        ip(&["link", "set", "dev", br, "up"]).context("bringing the bridge up")?;
        Ok(())
    }

    /// The bridge's MAC address: locally administered, unicast, from the network's id.
    fn bridge_mac(&self) -> String {
        let id = self.id.as_bytes();
        format!(
            "02:70:6b:{}:{}:{}",
            std::str::from_utf8(&id[0..2]).unwrap_or("00"),
            std::str::from_utf8(&id[2..4]).unwrap_or("00"),
            std::str::from_utf8(&id[4..6]).unwrap_or("00")
        )
    }

    /// As if the owning process had been killed: the owner lock is released and nothing is
    /// torn down.
    #[cfg(test)]
    pub(super) fn abandon(mut self) {
        self.owner = None;
        std::mem::forget(self);
    }

    /// Random hex id of this network (part of every name it creates).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Common prefix of the bridge, veth, network-namespace and state-directory names of this
    /// network: `pk8s<id>`. Pass it to [`super::leftovers()`].
    pub fn prefix(&self) -> String {
        format!("{NAME_PREFIX}{}", self.id)
    }

    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// The host's address on the bridge (the /23's second); pods route through it, and a
    /// server bound to it is reachable from every pod.
    pub fn gateway(&self) -> Ipv4Addr {
        self.cidr.gateway()
    }

    /// `10.250.N.0/23`.
    pub fn cidr(&self) -> String {
        self.cidr.to_string()
    }

    /// Reserves and returns the lowest pod address that is neither reserved nor used by a
    /// running pod. Addresses return to the pool when the pod using them is torn down.
    pub fn alloc_ip(&self) -> Result<Ipv4Addr> {
        let mut st = lock(&self.state);
        let host = self.cidr.lowest_free(&st.reserved, &st.in_use)?;
        st.reserved.insert(host);
        Ok(self.cidr.addr(host))
    }

    /// Creates the pod's namespaces and veth, starts its containers in order (see
    /// [`RunningPod::start_container`]; a container with an empty name is named `c<index>`) and
    /// returns once each is set up and its command has been `exec`ed. A command that exits right
    /// away is not an error: see [`RunningPod::try_wait`]. Failures of the setup itself are,
    /// with the log's tail.
    pub fn start_pod(&self, spec: PodSpec) -> Result<RunningPod> {
        if spec.containers.is_empty() {
            bail!("pod {}: no container to start", spec.name);
        }
        let pod = self.start_sandbox(&spec)?;
        for (i, c) in spec.containers.iter().enumerate() {
            let mut c = c.clone();
            if c.name.is_empty() {
                c.name = format!("c{i}");
            }
            pod.start_container(&c)?;
        }
        Ok(pod)
    }

    /// Creates the pod's sandbox, without containers: its state directory, `/etc/hosts`,
    /// network namespace and veth (the pod's address), UTS namespace (its hostname) and IPC
    /// namespace. `spec.containers` is not looked at: start them with
    /// [`RunningPod::start_container`].
    pub fn start_sandbox(&self, spec: &PodSpec) -> Result<RunningPod> {
        if self.torn_down {
            bail!("network {} is torn down", self.bridge);
        }
        tools()?;
        let host = spec.validate(&self.cidr)?;
        let seq = self.take_address(host, spec)?;
        let pod = self.new_pod(spec, host, seq);
        // Registered first, so that a failed start is cleaned up by the pod's Drop and a
        // network teardown also reaches it.
        lock(&self.state).pods.push(Arc::downgrade(&pod.inner));
        let what = format!("starting pod {} ({})", pod.name, pod.netns);
        pod.set_up(&self.bridge, self.gateway()).context(what)?;
        Ok(pod)
    }

    /// Marks the pod's address (host part `host`) as used and numbers the pod: its names on
    /// the host carry the number.
    fn take_address(&self, host: u16, spec: &PodSpec) -> Result<u32> {
        let mut st = lock(&self.state);
        if st.in_use.contains(&host) {
            bail!("address {} is already used by a running pod", spec.ip);
        }
        if st.next_seq > 0xffff {
            bail!("network {} has started too many pods", self.bridge);
        }
        st.in_use.insert(host);
        st.reserved.insert(host);
        st.next_seq += 1;
        Ok(st.next_seq - 1)
    }

    /// The pod, named on the host, before anything of it exists.
    fn new_pod(&self, spec: &PodSpec, host: u16, seq: u32) -> RunningPod {
        let prefix = self.prefix();
        let netns = format!("{prefix}-{seq:04x}-{}", sanitize_name(&spec.name, 32));
        let veth = format!("{prefix}v{seq:04x}");
        let sandbox = PodSandbox {
            netns: netns.clone(),
            veth: veth.clone(),
            state_dir: pods_state_dir().join(&netns),
        };
        RunningPod {
            name: spec.name.clone(),
            hostname: spec.hostname.clone(),
            ip: spec.ip,
            netns,
            veth,
            inner: Arc::new(Mutex::new(PodInner::new(sandbox))),
            net: Arc::downgrade(&self.state),
            host,
        }
    }

    /// Kills the pods still running on this network and deletes the bridge, reporting errors
    /// (Drop does the same and only logs them).
    pub fn teardown(mut self) -> Result<()> {
        self.teardown_inner()
    }

    fn teardown_inner(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let pods: Vec<_> = lock(&self.state).pods.drain(..).collect();
        let mut errors = Vec::new();
        for p in pods.iter().filter_map(Weak::upgrade) {
            if let Err(e) = lock(&p).teardown() {
                errors.push(format!("{e:#}"));
            }
        }
        {
            let mut st = lock(&self.state);
            st.in_use.clear();
            st.reserved.clear();
        }
        if let Err(e) = delete_link(&self.bridge) {
            errors.push(format!("{e:#}"));
        }
        if errors.is_empty() {
            let _ = fs::remove_file(owner_lock_path(&self.bridge));
        }
        // Released even when something was left: a sweep may then remove it.
        self.owner = None;
        if errors.is_empty() {
            Ok(())
        } else {
            bail!(
                "tearing down network {}: {}",
                self.bridge,
                errors.join("; ")
            )
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Err(e) = self.teardown_inner() {
            tracing::warn!("{e:#}");
        }
    }
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Network")
            .field("bridge", &self.bridge)
            .field("cidr", &self.cidr())
            .finish()
    }
}

/// IPv4 prefixes of the host's interface addresses and routes (all tables). Prefixes shorter
/// than /16 are left out: a route covering all of 10.250.0.0/16 (say 10.0.0.0/8) would rule out
/// every candidate, yet the more specific /23 on the bridge still keeps pod traffic local.
fn used_ipv4_prefixes() -> Result<Vec<(u32, u8)>> {
    let mut v = Vec::new();
    for line in ip(&["-o", "-4", "addr", "show"])?.lines() {
        let mut it = line.split_whitespace();
        while let Some(t) = it.next() {
            if t == "inet" {
                if let Some(p) = it.next().and_then(parse_prefix) {
                    v.push(p);
                }
            }
        }
    }
    const ROUTE_TYPES: [&str; 10] = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "anycast",
        "unreachable",
        "blackhole",
        "prohibit",
        "throw",
        "nat",
    ];
    for line in ip(&["-4", "route", "show", "table", "all"])?.lines() {
        let mut it = line.split_whitespace();
        let mut t = it.next();
        if t.is_some_and(|t| ROUTE_TYPES.contains(&t)) {
            t = it.next();
        }
        if let Some(p) = t.and_then(parse_prefix) {
            v.push(p);
        }
    }
    v.retain(|&(_, len)| len >= 16);
    Ok(v)
}

fn parse_prefix(s: &str) -> Option<(u32, u8)> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().ok()?),
        None => (s, 32),
    };
    let a: Ipv4Addr = a.parse().ok()?;
    (len <= 32).then_some((u32::from(a), len))
}

fn prefixes_overlap(a: (u32, u8), b: (u32, u8)) -> bool {
    let len = a.1.min(b.1);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a.0 & mask == b.0 & mask
}

fn sanitize_name(name: &str, max: usize) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect()
}
