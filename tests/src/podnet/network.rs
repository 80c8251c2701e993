//! The pods' network: a bridge with a /24 and the gateway address, the addresses it hands out,
//! and starting pods on it.

use super::host::{
    delete_link, host_lock, ip, list_dir_names, pods_state_dir, require_root, tools, Tools,
};
use super::mounts::{INIT_ARG0, POD_INIT, PUNCH_FS};
use super::pod::{NetState, PodInner, PodSpec, RunningPod};
use super::procfs::{children_of, cmdline, ns_id, runtime_errors, tail_of};
use super::{lock, DEFAULT_HOME, DEFAULT_PATH, NAME_PREFIX, START_TIMEOUT, SYSTEM_PATH};
use crate::container::InitConfig;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A bridge with a /24 out of 10.250.0.0/16; the host holds the gateway address `.1` on it.
///
/// Pods on the network reach each other over the bridge and the host (anything listening on
/// [`Network::gateway`]) directly; there is no NAT and no route off the machine. Dropping the
/// network kills the pods still running on it and deletes the bridge.
pub struct Network {
    id: String,
    bridge: String,
    subnet: u8,
    state: Arc<Mutex<NetState>>,
    torn_down: bool,
}

impl Network {
    /// Creates a bridge `pk8s<6 hex>` with a /24 in 10.250.0.0/16 that no host interface
    /// address or route uses, puts the gateway `.1` on it and brings it up.
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
                !existing_links.iter().any(|l| l.starts_with(&p))
                    && !list_dir_names("/run/netns")
                        .iter()
                        .any(|n| n.starts_with(&p))
            })
            .ok_or_else(|| anyhow!("could not pick an unused network id"))?;
        let bridge = format!("{NAME_PREFIX}{id}");

        let used = used_ipv4_prefixes()?;
        let start: u8 = rand::random::<u8>() % 254 + 1;
        let subnet = (0..254u16)
            .map(|i| ((start as u16 - 1 + i) % 254 + 1) as u8)
            .find(|&n| {
                let cand = (u32::from(Ipv4Addr::new(10, 250, n, 0)), 24u8);
                !used.iter().any(|&u| prefixes_overlap(u, cand))
            })
            .ok_or_else(|| anyhow!("no free /24 left in 10.250.0.0/16 on this host"))?;

        let net = Network {
            id,
            bridge,
            subnet,
            state: Arc::new(Mutex::new(NetState {
                reserved: BTreeSet::new(),
                in_use: BTreeSet::new(),
                pods: Vec::new(),
                next_seq: 0,
            })),
            torn_down: false,
        };
        // From here on, Drop deletes the bridge if anything fails.
        ip(&[
            "link",
            "add",
            "name",
            &net.bridge,
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
        let gw = format!("{}/24", self.gateway());
        ip(&["addr", "add", &gw, "dev", br]).context("adding the gateway address")?;
        ip(&["link", "set", "dev", br, "up"]).context("bringing the bridge up")?;
        Ok(())
    }

    /// Random hex id of this network (part of every name it creates).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Common prefix of the bridge, veth, network-namespace and state-directory names of this
    /// network: `pk8s<id>`. Pass it to [`leftovers`].
    pub fn prefix(&self) -> String {
        format!("{NAME_PREFIX}{}", self.id)
    }

    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// The host's address on the bridge (`.1`); pods route through it, and a server bound to it
    /// is reachable from every pod.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 250, self.subnet, 1)
    }

    /// `10.250.N.0/24`.
    pub fn cidr(&self) -> String {
        format!("10.250.{}.0/24", self.subnet)
    }

    /// Reserves and returns the lowest address in `.2`-`.254` that is neither reserved nor used
    /// by a running pod. Addresses return to the pool when the pod using them is torn down.
    pub fn alloc_ip(&self) -> Result<Ipv4Addr> {
        let mut st = lock(&self.state);
        let host = (2..=254u8)
            .find(|h| !st.reserved.contains(h) && !st.in_use.contains(h))
            .ok_or_else(|| anyhow!("no free address left in {}", self.cidr()))?;
        st.reserved.insert(host);
        Ok(Ipv4Addr::new(10, 250, self.subnet, host))
    }

    /// Creates the pod's namespaces and veth, starts the container command as the pod's PID 1
    /// and returns once the pod is set up (hostname, bind mounts, working directory) and the
    /// command has been `exec`ed. A command that exits right away is not an error: see
    /// [`RunningPod::try_wait`]. Failures of the setup itself are, with the pod log's tail.
    pub fn start_pod(&self, spec: PodSpec) -> Result<RunningPod> {
        if self.torn_down {
            bail!("network {} is torn down", self.bridge);
        }
        let tools = tools()?;
        let host = self.validate(&spec)?;
        let mut binds = Vec::with_capacity(spec.bind_mounts.len() + 1);
        for (src, dst) in &spec.bind_mounts {
            let src = fs::canonicalize(src).with_context(|| {
                format!("bind-mount source {} of pod {}", src.display(), spec.name)
            })?;
            binds.push((src, dst.clone()));
        }
        let workdir = spec.workdir.clone().unwrap_or_else(|| PathBuf::from("/"));
        let env = pod_env(&spec.env);

        let seq = {
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
            st.next_seq - 1
        };
        let prefix = self.prefix();
        let netns = format!("{prefix}-{seq:04x}-{}", sanitize_name(&spec.name, 32));
        let veth = format!("{prefix}v{seq:04x}");
        let state_dir = pods_state_dir().join(&netns);

        let inner = Arc::new(Mutex::new(PodInner {
            netns: netns.clone(),
            veth: veth.clone(),
            state_dir: state_dir.clone(),
            runtime_err: state_dir.join("runtime.err"),
            log_path: spec.log_path.clone(),
            child: None,
            pid1: 0,
            pidns: None,
            exit: None,
            torn_down: false,
        }));
        let pod = RunningPod {
            name: spec.name.clone(),
            hostname: spec.hostname.clone(),
            ip: spec.ip,
            netns,
            veth,
            pid1: 0,
            pidns: String::new(),
            env,
            workdir,
            container: None,
            inner,
            net: Arc::downgrade(&self.state),
            host,
        };
        // Registered first, so that a failed start is cleaned up by the pod's Drop and a
        // network teardown also reaches it.
        lock(&self.state).pods.push(Arc::downgrade(&pod.inner));
        self.launch(tools, pod, &spec, binds)
    }

    fn launch(
        &self,
        tools: &Tools,
        mut pod: RunningPod,
        spec: &PodSpec,
        mut binds: Vec<(PathBuf, PathBuf)>,
    ) -> Result<RunningPod> {
        let what = format!("starting pod {} ({})", pod.name, pod.netns);
        let ctx = || what.clone();
        let state_dir = lock(&pod.inner).state_dir.clone();
        fs::create_dir_all(&state_dir)
            .with_context(|| format!("creating {}", state_dir.display()))
            .with_context(ctx)?;

        // Like the kubelet: an /etc/hosts that knows the pod's own name.
        if !binds.iter().any(|(_, d)| d == Path::new("/etc/hosts")) {
            let hosts = state_dir.join("hosts");
            fs::write(
                &hosts,
                format!(
                    "# Kubernetes-managed hosts file (prrte-k8s sandbox pod {}).\n\
                     127.0.0.1\tlocalhost\n\
                     ::1\tlocalhost ip6-localhost ip6-loopback\n\
                     fe00::0\tip6-localnet\nfe00::1\tip6-mcastprefix\n\
                     fe00::2\tip6-allrouters\n\
                     {}\t{}\n",
                    pod.name, pod.ip, pod.hostname
                ),
            )
            .with_context(ctx)?;
            binds.push((hosts, PathBuf::from("/etc/hosts")));
        }

        // Network namespace and veth.
        {
            let _guard = host_lock().with_context(ctx)?;
            ip(&["netns", "add", &pod.netns]).with_context(ctx)?;
        }
        let gw = self.gateway().to_string();
        let addr = format!("{}/24", pod.ip);
        let n = pod.netns.as_str();
        let steps: [&[&str]; 7] = [
            &[
                "link", "add", "name", &pod.veth, "type", "veth", "peer", "name", "eth0", "netns",
                n,
            ],
            &["link", "set", "dev", &pod.veth, "master", &self.bridge],
            &["link", "set", "dev", &pod.veth, "up"],
            &["-n", n, "link", "set", "dev", "lo", "up"],
            &["-n", n, "addr", "add", &addr, "dev", "eth0"],
            &["-n", n, "link", "set", "dev", "eth0", "up"],
            &[
                "-n", n, "route", "add", "default", "via", &gw, "dev", "eth0",
            ],
        ];
        for args in steps {
            ip(args).with_context(ctx)?;
        }
        let _ = fs::write(
            format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", pod.veth),
            "1",
        );

        // The container: PID 1 of fresh UTS, mount and PID namespaces inside the netns. Mount
        // propagation is "slave": the pod's mounts never reach the host, while unmounts on the
        // host (e.g. `ip netns del` of other pods) still reach the pod, so pods do not keep each
        // other's network namespaces alive.
        let log = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&spec.log_path)
            .with_context(|| format!("opening pod log {}", spec.log_path.display()))
            .with_context(ctx)?;
        // stderr of `ip netns exec` and `unshare` themselves; the pod's own stderr is sent to
        // the log by the setup program.
        let runtime_err_path = state_dir.join("runtime.err");
        let runtime_err = File::create(&runtime_err_path).with_context(ctx)?;
        let ready = state_dir.join("ready");
        let mut cmd = Command::new(&tools.ip);
        cmd.args(["netns", "exec", n]).arg(&tools.unshare).args([
            "--uts",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "slave",
            "--",
        ]);
        // What PID 1 runs right before it becomes the container command.
        let final_stage: Vec<u8>;
        if let Some(c) = &spec.container {
            let init = crate::container::init_binary().with_context(ctx)?;
            let config = state_dir.join("container.json");
            let ic = InitConfig {
                container: c.clone(),
                layer_dir: state_dir.join("layer"),
                hostname: pod.hostname.clone(),
                workdir: pod.workdir.clone(),
                env: pod.env.clone(),
                command: spec.command.clone(),
                binds: binds.clone(),
                ready: ready.clone(),
            };
            fs::write(&config, serde_json::to_vec_pretty(&ic)?)
                .with_context(|| format!("writing {}", config.display()))
                .with_context(ctx)?;
            cmd.arg(&init).arg("run").arg(&config);
            final_stage = {
                let mut p = init.as_os_str().as_encoded_bytes().to_vec();
                p.push(0);
                p
            };
            pod.container = Some(config);
        } else {
            cmd.arg(&tools.sh)
                .arg("-c")
                .arg(POD_INIT.replace("PUNCH_FS", PUNCH_FS))
                .arg(INIT_ARG0)
                .arg(&ready)
                .arg(&pod.hostname)
                .arg(&pod.workdir)
                .arg(&tools.env)
                .arg(binds.len().to_string());
            for (src, dst) in &binds {
                cmd.arg(src).arg(dst);
            }
            for (k, v) in &pod.env {
                cmd.arg(format!("{k}={v}"));
            }
            cmd.args(&spec.command);
            final_stage = {
                let mut p = tools.env.as_os_str().as_encoded_bytes().to_vec();
                p.extend_from_slice(b"\0-i\0--\0");
                p
            };
        }
        cmd.env_clear()
            .env("PATH", SYSTEM_PATH)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(runtime_err);
        let child = cmd.spawn().with_context(ctx)?;
        let outer = child.id();
        lock(&pod.inner).child = Some(child);

        // Find PID 1 (the child of `unshare`) and wait for its setup to finish.
        let own_pidns = ns_id(std::process::id(), "pid");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let exited = {
                let mut inner = lock(&pod.inner);
                inner.poll_exit().with_context(ctx)?.is_some()
            };
            if pod.pid1 == 0 {
                if let Some(&p) = children_of(outer).first() {
                    match ns_id(p, "pid") {
                        Some(ns) if Some(&ns) != own_pidns.as_ref() => {
                            pod.pid1 = p;
                            pod.pidns = ns.clone();
                            let mut inner = lock(&pod.inner);
                            inner.pid1 = p;
                            inner.pidns = Some(ns);
                        }
                        _ => {}
                    }
                }
            }
            let setup_done = fs::read_to_string(&ready)
                .map(|s| s.trim() == "ok")
                .unwrap_or(false);
            if exited {
                if setup_done {
                    break;
                }
                bail!(
                    "{}: the pod exited during setup; log {}:\n{}{}",
                    ctx(),
                    spec.log_path.display(),
                    tail_of(&spec.log_path, 4096),
                    runtime_errors(&runtime_err_path)
                );
            }
            if setup_done && pod.pid1 != 0 {
                match cmdline(pod.pid1) {
                    Some(c) if !c.is_empty() && !c.starts_with(&final_stage) => break,
                    _ => {}
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{}: not set up after {:?}; log {}:\n{}{}",
                    ctx(),
                    START_TIMEOUT,
                    spec.log_path.display(),
                    tail_of(&spec.log_path, 4096),
                    runtime_errors(&runtime_err_path)
                );
            }
            sleep(Duration::from_millis(5));
        }
        Ok(pod)
    }

    fn validate(&self, spec: &PodSpec) -> Result<u8> {
        if spec.name.is_empty() {
            bail!("pod name is empty");
        }
        let o = spec.ip.octets();
        if o[0] != 10 || o[1] != 250 || o[2] != self.subnet || !(2..=254).contains(&o[3]) {
            bail!(
                "pod {}: address {} is not a host address .2-.254 of {}",
                spec.name,
                spec.ip,
                self.cidr()
            );
        }
        if spec.hostname.is_empty()
            || spec.hostname.len() > 64
            || !spec
                .hostname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            bail!("pod {}: invalid hostname {:?}", spec.name, spec.hostname);
        }
        let Some(cmd0) = spec.command.first() else {
            bail!("pod {}: empty command", spec.name);
        };
        if cmd0.is_empty() || cmd0.contains('=') {
            bail!(
                "pod {}: command name {cmd0:?} must be non-empty and contain no '='",
                spec.name
            );
        }
        for (k, _) in &spec.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                bail!("pod {}: invalid environment variable name {k:?}", spec.name);
            }
        }
        if let Some(w) = &spec.workdir {
            if !w.is_absolute() {
                bail!(
                    "pod {}: working directory {} is not absolute",
                    spec.name,
                    w.display()
                );
            }
        }
        for (_, dst) in &spec.bind_mounts {
            if !dst.is_absolute() {
                bail!(
                    "pod {}: mount point {} is not absolute",
                    spec.name,
                    dst.display()
                );
            }
        }
        if let Some(parent) = spec.log_path.parent() {
            if !parent.as_os_str().is_empty() {
                fs::create_dir_all(parent)
                    .with_context(|| format!("creating log directory {}", parent.display()))?;
            }
        }
        Ok(o[3])
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
/// every candidate, yet the more specific /24 on the bridge still keeps pod traffic local.
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

/// The pod's environment: `env` in order, then `PATH`/`HOME` defaults if absent.
fn pod_env(env: &[(String, String)]) -> Vec<(String, String)> {
    let mut v = env.to_vec();
    for (k, d) in [("PATH", DEFAULT_PATH), ("HOME", DEFAULT_HOME)] {
        if !v.iter().any(|(n, _)| n == k) {
            v.push((k.to_string(), d.to_string()));
        }
    }
    v
}
