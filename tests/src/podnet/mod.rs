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
//! [`Network::prefix`], which is what [`leftovers`] takes to check that nothing stayed behind;
//! [`cleanup_leftovers`] removes what a killed test run left.
//!
//! Everything here needs root and blocks (it runs host tools and polls /proc); async code calls
//! it through `spawn_blocking`. Host settings touched: the `bridge-nf-call-*` sysctls are set to
//! 0 when `br_netfilter` is loaded, so that bridged pod traffic is never filtered. IP forwarding
//! is left alone: pods only talk to each other and to the gateway address, and nothing leaves the
//! machine.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::container::{Container, InitConfig};
use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Every bridge, veth, network namespace and state directory made here starts with this.
pub const NAME_PREFIX: &str = "pk8s";

/// Host directory for the lock file and the per-pod state directories.
pub const STATE_DIR: &str = "/run/prrte-k8s-sandbox";

pub use crate::container::DEFAULT_PATH;

/// `HOME` given to pods whose environment does not set one.
pub const DEFAULT_HOME: &str = "/root";

/// `PATH` used to run the host tools themselves.
const SYSTEM_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// How long to wait for a pod's PID 1 to appear and finish its setup.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long to wait for a pod to die after SIGKILL of its PID 1.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Marker passed as `$0` to the pod setup program (shows up in `ps`).
const INIT_ARG0: &str = "pk8s-pod-init";

/// Name of the tmpfs mounts the setup program puts over directories to create mount points.
const PUNCH_FS: &str = "pk8s-pod";

/// The program PID 1 of every pod runs before it becomes the container command.
///
/// Positional arguments: ready-file, hostname, workdir, path of `env`, number of bind mounts N,
/// then N (source, target) pairs, then `NAME=VALUE` words, then the command. stdout is the pod
/// log and stderr is pointed there too (the outer tools' stderr goes to a separate file). Errors
/// go to the log and exit with 125; "ok" is written to the ready file right before the final
/// `exec env -i -- NAME=VALUE... command...`, which gives the command exactly the pod's
/// environment.
const POD_INIT: &str = r#"
exec 2>&1
set -u
die() { printf 'pod-init: %s\n' "$*" >&2; exit 125; }

# Cover directory $1 with a pod-private tmpfs that keeps its current entries visible, so that
# new mount points can be created below it without touching the host.
punch() {
  d=$(readlink -f -- "$1") || die "cannot resolve $1"
  [ "$d" != / ] || die "cannot create mount point $2: no existing directory below / to cover"
  m=$(stat -c %a -- "$d") && u=$(stat -c %u -- "$d") && g=$(stat -c %g -- "$d") || die "cannot stat $d"
  exec 3<"$d" || die "cannot open $d"
  mount -n -t tmpfs -o "mode=$m,uid=$u,gid=$g" PUNCH_FS "$d" || die "cannot mount tmpfs on $d"
  for e in /proc/self/fd/3/* /proc/self/fd/3/.[!.]* /proc/self/fd/3/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    t=$d/${e##*/}
    if [ -L "$e" ]; then
      ln -s -- "$(readlink -- "$e")" "$t" || die "cannot keep $t visible"
    elif [ -d "$e" ]; then
      { [ -d "$t" ] || mkdir -- "$t"; } && mount -n -c --rbind -- "$e" "$t" || die "cannot keep $t visible"
    else
      { [ -e "$t" ] || : >"$t"; } && mount -n -c --bind -- "$e" "$t" || die "cannot keep $t visible"
    fi
  done
  exec 3<&-
}

bind() {
  src=$1 dst=$2
  [ -e "$src" ] || die "bind source $src does not exist"
  if [ ! -e "$dst" ]; then
    a=$(dirname -- "$dst")
    while [ ! -e "$a" ]; do a=$(dirname -- "$a"); done
    [ -d "$a" ] || die "cannot create mount point $dst: $a is not a directory"
    [ "$(findmnt -n -o SOURCE -T "$a")" = PUNCH_FS ] || punch "$a" "$dst"
    if [ -d "$src" ]; then
      mkdir -p -- "$dst" || die "cannot create mount point $dst"
    else
      { mkdir -p -- "$(dirname -- "$dst")" && : >"$dst"; } || die "cannot create mount point $dst"
    fi
  fi
  mount -n --rbind -- "$src" "$dst" || die "cannot bind-mount $src on $dst"
}

ready=$1 hn=$2 wd=$3 envbin=$4 n=$5
shift 5
exec 4>"$ready" || die "cannot open $ready"
printf '%s' "$hn" >/proc/sys/kernel/hostname || die "cannot set hostname $hn"
while [ "$n" -gt 0 ]; do
  bind "$1" "$2"
  shift 2
  n=$((n - 1))
done
cd -- "$wd" || die "cannot change to working directory $wd"
echo ok >&4 && exec 4>&- || die "cannot write $ready"
exec "$envbin" -i -- "$@"
"#;

// ---------------------------------------------------------------------------------------------
// Host tools
// ---------------------------------------------------------------------------------------------

struct Tools {
    ip: PathBuf,
    unshare: PathBuf,
    nsenter: PathBuf,
    sh: PathBuf,
    env: PathBuf,
}

fn find_tool(name: &str) -> Option<PathBuf> {
    SYSTEM_PATH
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn tools() -> Result<&'static Tools> {
    static TOOLS: OnceLock<std::result::Result<Tools, String>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let need = |n: &str| {
                find_tool(n).ok_or_else(|| {
                    format!(
                        "podnet needs `{n}` (iproute2 / util-linux / coreutils) in {SYSTEM_PATH}"
                    )
                })
            };
            // Used by the pod setup program.
            for n in [
                "mount", "findmnt", "stat", "readlink", "dirname", "mkdir", "ln",
            ] {
                need(n)?;
            }
            Ok(Tools {
                ip: need("ip")?,
                unshare: need("unshare")?,
                nsenter: need("nsenter")?,
                sh: need("sh")?,
                env: need("env")?,
            })
        })
        .as_ref()
        .map_err(|e| anyhow!("{e}"))
}

/// Runs a host tool, returns its stdout; a non-zero exit becomes an error carrying stderr.
fn run(program: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "`{} {}` failed ({}): {}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String> {
    run(&tools()?.ip, args)
}

/// `ip link del`, treating "already gone" as success.
fn delete_link(name: &str) -> Result<()> {
    if !Path::new("/sys/class/net").join(name).exists() {
        return Ok(());
    }
    match ip(&["link", "del", "dev", name]) {
        Ok(_) => Ok(()),
        Err(_) if !Path::new("/sys/class/net").join(name).exists() => Ok(()),
        Err(e) => Err(e),
    }
}

/// `ip netns del`, treating "already gone" as success.
fn delete_netns(name: &str) -> Result<()> {
    let path = Path::new("/run/netns").join(name);
    if !path.exists() {
        return Ok(());
    }
    match ip(&["netns", "del", name]) {
        Ok(_) => Ok(()),
        Err(_) if !path.exists() => Ok(()),
        Err(e) => Err(e),
    }
}

fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "sandbox pods need root (network, mount, UTS and PID namespaces, bridges, veths); \
             run as root"
        );
    }
    Ok(())
}

/// Exclusive lock shared by every process that creates networks or network namespaces.
fn host_lock() -> Result<Flock<File>> {
    fs::create_dir_all(STATE_DIR).with_context(|| format!("creating {STATE_DIR}"))?;
    let path = Path::new(STATE_DIR).join("net.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", path.display()))
}

fn pods_state_dir() -> PathBuf {
    Path::new(STATE_DIR).join("pods")
}

// ---------------------------------------------------------------------------------------------
// /proc helpers
// ---------------------------------------------------------------------------------------------

fn ns_id(pid: u32, kind: &str) -> Option<String> {
    fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

fn all_pids() -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Children of `pid`: from /proc/PID/task/PID/children, or by scanning every process's ppid.
fn children_of(pid: u32) -> Vec<u32> {
    if let Ok(s) = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        return s
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
    }
    all_pids()
        .into_iter()
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn cmdline(pid: u32) -> Option<Vec<u8>> {
    fs::read(format!("/proc/{pid}/cmdline")).ok()
}

fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

fn describe_process(pid: u32) -> String {
    let args = cmdline(pid)
        .map(|c| {
            c.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    format!("{} [{}]", comm(pid), args)
}

/// Host pids of every process whose PID namespace is `pidns` (a `pid:[inode]` link text).
fn pids_in_pidns(pidns: &str) -> Vec<u32> {
    let mut v: Vec<u32> = all_pids()
        .into_iter()
        .filter(|&p| ns_id(p, "pid").as_deref() == Some(pidns))
        .collect();
    v.sort_unstable();
    v
}

/// The outer tools' stderr, as a suffix for error messages.
fn runtime_errors(path: &Path) -> String {
    let t = tail_of(path, 4096);
    if t.is_empty() {
        t
    } else {
        format!("\n(runtime) {t}")
    }
}

fn tail_of(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).trim().to_string()
}

// ---------------------------------------------------------------------------------------------
// Network
// ---------------------------------------------------------------------------------------------

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

struct NetState {
    /// Addresses handed out by `alloc_ip` and not yet released.
    reserved: BTreeSet<u8>,
    /// Addresses of pods that have not been torn down.
    in_use: BTreeSet<u8>,
    pods: Vec<Weak<Mutex<PodInner>>>,
    next_seq: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

fn list_dir_names(dir: &str) -> Vec<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
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

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

/// What to run in a pod.
#[derive(Debug, Clone)]
pub struct PodSpec {
    /// Pod name (part of the network-namespace name, truncated).
    pub name: String,
    /// Hostname inside the pod (at most 64 characters: letters, digits, '-', '.').
    pub hostname: String,
    /// Address in the network's /24, `.2`-`.254` (e.g. from [`Network::alloc_ip`]).
    pub ip: Ipv4Addr,
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
    pub container: Option<Container>,
}

impl Default for PodSpec {
    fn default() -> Self {
        PodSpec {
            name: String::new(),
            hostname: String::new(),
            ip: Ipv4Addr::UNSPECIFIED,
            command: Vec::new(),
            env: Vec::new(),
            workdir: None,
            bind_mounts: Vec::new(),
            log_path: PathBuf::new(),
            container: None,
        }
    }
}

/// How a pod's PID 1 ended: exit `code`, or the `signal` that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodExit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl PodExit {
    fn from_status(s: ExitStatus) -> PodExit {
        PodExit {
            code: s.code(),
            signal: s.signal(),
        }
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for PodExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => write!(f, "unknown exit"),
        }
    }
}

/// State shared between a [`RunningPod`] and its [`Network`] (which tears down the pods still
/// alive when it goes away).
struct PodInner {
    netns: String,
    veth: String,
    state_dir: PathBuf,
    /// stderr of `ip netns exec` / `unshare`.
    runtime_err: PathBuf,
    log_path: PathBuf,
    /// `ip netns exec` → `unshare`, the parent of the pod's PID 1.
    child: Option<Child>,
    pid1: u32,
    pidns: Option<String>,
    exit: Option<PodExit>,
    torn_down: bool,
}

impl PodInner {
    fn poll_exit(&mut self) -> Result<Option<PodExit>> {
        if self.exit.is_none() {
            if let Some(c) = self.child.as_mut() {
                if let Some(s) = c.try_wait().context("waiting for the pod")? {
                    self.exit = Some(self.exit_of(s));
                }
            }
        }
        Ok(self.exit)
    }

    /// `unshare` passes PID 1's exit code on and re-raises the signal that killed it, except
    /// for SIGKILL, which it cannot re-raise that way: it then reports "sigprocmask unblock
    /// failed" and exits with 1.
    fn exit_of(&self, s: ExitStatus) -> PodExit {
        let e = PodExit::from_status(s);
        if e.code == Some(1)
            && fs::read_to_string(&self.runtime_err)
                .is_ok_and(|t| t.contains("sigprocmask unblock failed"))
        {
            return PodExit {
                code: None,
                signal: Some(Signal::SIGKILL as i32),
            };
        }
        e
    }

    fn live_pids(&self) -> Vec<u32> {
        self.pidns.as_deref().map(pids_in_pidns).unwrap_or_default()
    }

    /// SIGKILL PID 1 (the kernel then kills the whole PID namespace), reap, and wait until no
    /// process of the pod is left.
    fn kill(&mut self) -> Result<PodExit> {
        if let Some(e) = self.poll_exit()? {
            self.wait_empty()?;
            return Ok(e);
        }
        // Only signal the pid while it still is this pod's PID 1.
        if self.pid1 != 0 && self.pidns.is_some() && ns_id(self.pid1, "pid") == self.pidns {
            let _ = kill(Pid::from_raw(self.pid1 as i32), Signal::SIGKILL);
        }
        let deadline = Instant::now() + KILL_TIMEOUT;
        let exit = loop {
            if let Some(e) = self.poll_exit()? {
                break e;
            }
            if Instant::now() > deadline {
                // unshare's --kill-child takes PID 1 down with it.
                let child = self
                    .child
                    .as_mut()
                    .ok_or_else(|| anyhow!("pod was never started"))?;
                let _ = child.kill();
                let s = child.wait().context("waiting for the pod")?;
                let e = self.exit_of(s);
                self.exit = Some(e);
                break e;
            }
            sleep(Duration::from_millis(5));
        };
        self.wait_empty()?;
        Ok(exit)
    }

    fn wait_empty(&self) -> Result<()> {
        let deadline = Instant::now() + KILL_TIMEOUT;
        loop {
            let left = self.live_pids();
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "pod {}: processes still alive after kill: {left:?}",
                    self.netns
                );
            }
            sleep(Duration::from_millis(5));
        }
    }

    /// Kill everything, delete veth, network namespace and state directory. Idempotent.
    fn teardown(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        let mut errors = Vec::new();
        if self.child.is_some() {
            if let Err(e) = self.kill() {
                errors.push(format!("{e:#}"));
            }
        }
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
        self.torn_down = true;
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("tearing down pod {}: {}", self.netns, errors.join("; "))
        }
    }
}

/// A pod started by [`Network::start_pod`]. Dropping it kills everything in the pod and
/// deletes its network namespace and veth.
pub struct RunningPod {
    name: String,
    hostname: String,
    ip: Ipv4Addr,
    netns: String,
    veth: String,
    pid1: u32,
    pidns: String,
    env: Vec<(String, String)>,
    workdir: PathBuf,
    /// The init program's configuration, for pods that run an image.
    container: Option<PathBuf>,
    inner: Arc<Mutex<PodInner>>,
    net: Weak<Mutex<NetState>>,
    host: u8,
}

impl RunningPod {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Name of the pod's network namespace (`ip netns exec <netns> ...` works on the host).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Host-side name of the pod's veth (the pod side is `eth0`).
    pub fn veth(&self) -> &str {
        &self.veth
    }

    /// Host pid of the pod's PID 1 (the container command). 0 if it could not be determined
    /// because the pod ended during startup.
    pub fn host_pid(&self) -> u32 {
        self.pid1
    }

    /// The pod's environment (the spec's, plus defaults).
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    pub fn log_path(&self) -> PathBuf {
        lock(&self.inner).log_path.clone()
    }

    /// `Some` once PID 1 has ended (the whole pod has ended then).
    pub fn try_wait(&mut self) -> Result<Option<PodExit>> {
        lock(&self.inner).poll_exit()
    }

    /// Waits up to `d` for the pod to end.
    pub fn wait_timeout(&mut self, d: Duration) -> Result<Option<PodExit>> {
        let deadline = Instant::now() + d;
        loop {
            if let Some(e) = self.try_wait()? {
                return Ok(Some(e));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            sleep((deadline - now).min(Duration::from_millis(10)));
        }
    }

    /// A command that runs `argv` inside all of the pod's namespaces (network, UTS, mount,
    /// PID) in the pod's working directory, with the pod's environment overridden by `env`.
    /// The process is in the pod's PID namespace, so it dies with the pod. The caller sets
    /// stdio and spawns it; `argv[0]` is looked up in the resulting `PATH`.
    ///
    /// In a pod that runs an image, the command runs in the container's root filesystem as
    /// the container's user, with its capabilities and `no_new_privs`, as `kubectl exec` does.
    pub fn exec(&self, argv: &[String], env: &[(String, String)]) -> Command {
        let mut c = exec_command(self.pid1, &self.workdir, self.container.as_deref(), argv);
        c.envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// SIGKILLs the pod's PID 1 (the PID namespace, and with it every process started in the
    /// pod, dies with it), reaps it and returns how it ended. If the pod had already ended, that
    /// exit is returned. The network namespace stays until the pod is dropped.
    pub fn kill(&mut self) -> Result<PodExit> {
        lock(&self.inner).kill()
    }

    /// Host pids of every process in the pod's PID namespace (empty once the pod has ended).
    pub fn host_pids(&self) -> Vec<u32> {
        if self.pidns.is_empty() {
            return Vec::new();
        }
        pids_in_pidns(&self.pidns)
    }

    /// Kills the pod and deletes its network namespace and veth, reporting errors (Drop does
    /// the same and only logs them).
    pub fn teardown(mut self) -> Result<()> {
        self.teardown_inner()
    }

    fn teardown_inner(&mut self) -> Result<()> {
        let r = lock(&self.inner).teardown();
        if let Some(net) = self.net.upgrade() {
            let mut st = lock(&net);
            st.in_use.remove(&self.host);
            st.reserved.remove(&self.host);
            st.pods
                .retain(|w| w.strong_count() > 0 && !Weak::ptr_eq(w, &Arc::downgrade(&self.inner)));
        }
        r
    }
}

impl Drop for RunningPod {
    fn drop(&mut self) {
        if let Err(e) = self.teardown_inner() {
            tracing::warn!("{e:#}");
        }
    }
}

impl fmt::Debug for RunningPod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningPod")
            .field("name", &self.name)
            .field("ip", &self.ip)
            .field("netns", &self.netns)
            .field("pid1", &self.pid1)
            .finish()
    }
}

/// A command that runs `argv` in the pod whose PID 1 has host pid `pid1` (see
/// [`RunningPod::exec`]), with an empty environment for the caller to fill. `container` is the
/// init program's configuration of a pod that runs an image.
pub fn exec_command(
    pid1: u32,
    workdir: &Path,
    container: Option<&Path>,
    argv: &[String],
) -> Command {
    let nsenter = tools()
        .map(|t| t.nsenter.clone())
        .unwrap_or_else(|_| PathBuf::from("/usr/bin/nsenter"));
    let mut c = Command::new(nsenter);
    c.arg("--target").arg(pid1.to_string());
    match (container, crate::container::init_binary()) {
        (Some(config), Ok(init)) => {
            // The init program enters the mount namespace itself (its own path is a host path)
            // and drops to the container's user.
            c.args(["--net", "--uts", "--pid", "--"])
                .arg(init)
                .arg("exec")
                .arg(config)
                .arg(pid1.to_string())
                .arg("--");
        }
        _ => {
            // The working directory is resolved in the pod's mount namespace via PID 1's root.
            let wd = Path::new(&format!("/proc/{pid1}/root"))
                .join(workdir.strip_prefix("/").unwrap_or(workdir));
            c.args(["--net", "--uts", "--mount", "--pid"])
                .arg(format!("--wd={}", wd.display()))
                .arg("--");
        }
    }
    c.args(argv).env_clear();
    c
}

impl RunningPod {
    /// The init program's configuration, for a pod that runs an image.
    pub fn container_config(&self) -> Option<&Path> {
        self.container.as_deref()
    }
}

// ---------------------------------------------------------------------------------------------
// Leftovers
// ---------------------------------------------------------------------------------------------

/// What is left on the host under a name prefix.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    /// Network namespaces (`ip netns list`).
    pub netns: Vec<String>,
    /// Links (bridges, veths) in the host's network namespace.
    pub links: Vec<String>,
    /// Processes whose name starts with the prefix or that live in one of the namespaces
    /// above: (host pid, description).
    pub processes: Vec<(u32, String)>,
    /// Pod state directories under `/run/prrte-k8s-sandbox/pods`.
    pub state_dirs: Vec<PathBuf>,
    /// buildah working containers holding image root filesystems.
    pub containers: Vec<String>,
    /// nftables tables (family bridge) enforcing NetworkPolicies.
    pub nft_tables: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.netns.is_empty()
            && self.links.is_empty()
            && self.processes.is_empty()
            && self.state_dirs.is_empty()
            && self.containers.is_empty()
            && self.nft_tables.is_empty()
    }
}

impl fmt::Display for Leftovers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "nothing left");
        }
        write!(
            f,
            "netns {:?}; links {:?}; processes {:?}; state dirs {:?}; image containers {:?}; nft tables {:?}",
            self.netns,
            self.links,
            self.processes,
            self.state_dirs,
            self.containers,
            self.nft_tables
        )
    }
}

/// Network namespaces, links and pod state directories whose names start with `prefix`, and
/// processes whose name (comm or argv[0]) starts with it or that live in such a namespace.
pub fn leftovers(prefix: &str) -> Leftovers {
    let mut netns: Vec<String> = list_dir_names("/run/netns")
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    netns.sort();
    let mut links: Vec<String> = list_dir_names("/sys/class/net")
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    links.sort();
    let mut state_dirs: Vec<PathBuf> = list_dir_names(&pods_state_dir().to_string_lossy())
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .map(|n| pods_state_dir().join(n))
        .collect();
    state_dirs.sort();

    let ns_inodes: HashSet<String> = netns
        .iter()
        .filter_map(|n| fs::metadata(Path::new("/run/netns").join(n)).ok())
        .map(|m| format!("net:[{}]", m.ino()))
        .collect();
    let me = std::process::id();
    let mut processes = Vec::new();
    for pid in all_pids() {
        if pid == me {
            continue;
        }
        let argv0 = cmdline(pid)
            .and_then(|c| {
                let first = c.split(|&b| b == 0).next()?.to_vec();
                let s = String::from_utf8_lossy(&first).into_owned();
                Some(s.rsplit('/').next().unwrap_or("").to_string())
            })
            .unwrap_or_default();
        let named =
            (!prefix.is_empty()) && (comm(pid).starts_with(prefix) || argv0.starts_with(prefix));
        let in_ns = ns_id(pid, "net").is_some_and(|n| ns_inodes.contains(&n));
        if named || in_ns {
            processes.push((pid, describe_process(pid)));
        }
    }
    let (containers, nft_tables) = if prefix.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        (
            crate::images::working_containers(prefix),
            crate::netpol::tables(prefix),
        )
    };
    Leftovers {
        netns,
        links,
        processes,
        state_dirs,
        containers,
        nft_tables,
    }
}

/// Removes what [`leftovers`] finds (for instance after a test run that was killed): kills the
/// processes, deletes links and network namespaces, removes state directories. Returns what was
/// found. Only prefixes starting with `pk8s` are accepted.
pub fn cleanup_leftovers(prefix: &str) -> Result<Leftovers> {
    if !prefix.starts_with(NAME_PREFIX) {
        bail!("refusing to clean up names starting with {prefix:?} (not {NAME_PREFIX}...)");
    }
    require_root()?;
    let found = leftovers(prefix);
    for (pid, _) in &found.processes {
        let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
    let mut errors = Vec::new();
    // Veths first (their peers go with them), bridges last.
    let mut links = found.links.clone();
    links.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for l in &links {
        if let Err(e) = delete_link(l) {
            errors.push(format!("{e:#}"));
        }
    }
    for n in &found.netns {
        if let Err(e) = delete_netns(n) {
            errors.push(format!("{e:#}"));
        }
    }
    for d in &found.state_dirs {
        if let Err(e) = fs::remove_dir_all(d) {
            errors.push(format!("removing {}: {e}", d.display()));
        }
    }
    for c in &found.containers {
        if let Err(e) = crate::images::remove_working_container(c) {
            errors.push(format!("{e:#}"));
        }
    }
    for t in &found.nft_tables {
        if let Err(e) = crate::netpol::delete_table(t) {
            errors.push(format!("{e:#}"));
        }
    }
    if errors.is_empty() {
        Ok(found)
    } else {
        bail!("cleaning up {prefix}: {}", errors.join("; "))
    }
}

// ---------------------------------------------------------------------------------------------
// Tests (need root)
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    fn need_root() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "podnet tests create bridges, veths and namespaces: they must run as root"
        );
        tools().expect("host tools");
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn spec(net: &Network, dir: &Path, name: &str, command: &[&str]) -> PodSpec {
        PodSpec {
            name: name.to_string(),
            hostname: format!("{name}-host"),
            ip: net.alloc_ip().unwrap(),
            command: s(command),
            log_path: dir.join(format!("{name}.log")),
            ..Default::default()
        }
    }

    /// Runs `argv` in the pod; returns (success, stdout, stderr).
    fn run_in(pod: &RunningPod, argv: &[&str]) -> (bool, String, String) {
        let out = pod
            .exec(&s(argv), &[])
            .stdin(Stdio::null())
            .output()
            .expect("spawn nsenter");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok_in(pod: &RunningPod, argv: &[&str]) -> String {
        let (ok, out, err) = run_in(pod, argv);
        assert!(ok, "{argv:?} in pod {} failed: {err}", pod.name());
        out
    }

    fn assert_clean(prefix: &str) {
        // Exiting processes can take a moment to disappear from /proc.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let l = leftovers(prefix);
            if l.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "left behind under {prefix}: {l}");
            sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn podnet_eight_pods_have_own_identity() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let net = Network::create().unwrap();
        let prefix = net.prefix();
        assert!(net.bridge().len() <= 15 && net.bridge().starts_with("pk8s"));
        assert!(net.cidr().starts_with("10.250.") && net.cidr().ends_with(".0/24"));
        let mut pods = Vec::new();
        for i in 0..8 {
            let mut sp = spec(&net, dir.path(), &format!("pod-{i}"), &["sleep", "1000"]);
            sp.hostname = format!("worker-{i}");
            pods.push(net.start_pod(sp).unwrap());
        }
        let ips: HashSet<Ipv4Addr> = pods.iter().map(|p| p.ip()).collect();
        assert_eq!(ips.len(), 8);
        for (i, pod) in pods.iter().enumerate() {
            assert_eq!(ok_in(pod, &["hostname"]).trim(), format!("worker-{i}"));
            let addr = ok_in(pod, &["ip", "-4", "-o", "addr", "show", "eth0"]);
            assert!(addr.contains(&format!("inet {}/24", pod.ip())), "{addr}");
            assert_eq!(
                ok_in(pod, &["cat", "/proc/1/cmdline"]),
                "sleep\u{0}1000\u{0}"
            );
            let route = ok_in(pod, &["ip", "-4", "route", "show", "default"]);
            assert!(route.contains(&format!("via {}", net.gateway())), "{route}");
            let lo = ok_in(pod, &["ip", "-o", "link", "show", "lo"]);
            assert!(lo.contains("UP"), "{lo}");
            let hosts = ok_in(pod, &["cat", "/etc/hosts"]);
            assert!(
                hosts.contains(&format!("{}\tworker-{i}", pod.ip())),
                "{hosts}"
            );
            // Own PID namespace: the pod sees its PID 1 and the exec'd processes only.
            let ps = ok_in(pod, &["sh", "-c", "ls -d /proc/[0-9]* | wc -l"]);
            assert!(ps.trim().parse::<u32>().unwrap() <= 5, "{ps}");
            let pid1 = pod.host_pid();
            assert_eq!(parent_of(pid1).map(comm).as_deref(), Some("unshare"));
            assert_eq!(pod.host_pids(), vec![pid1]);
            assert!(pod.netns().starts_with(&prefix));
        }
        drop(pods);
        net.teardown().unwrap();
        assert_clean(&prefix);
    }

    #[test]
    fn podnet_tcp_between_pods_and_to_gateway() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let net = Network::create().unwrap();
        let prefix = net.prefix();
        let a = net
            .start_pod(spec(&net, dir.path(), "server", &["sleep", "1000"]))
            .unwrap();
        let b = net
            .start_pod(spec(&net, dir.path(), "client", &["sleep", "1000"]))
            .unwrap();

        // Pod-to-pod: a listener in pod a, a client in pod b.
        let listener_py = "import socket,sys\n\
            s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
            s.bind(('0.0.0.0', 7100)); s.listen(1); s.settimeout(20)\n\
            print('listening', flush=True)\n\
            c, addr = s.accept(); data = c.recv(100)\n\
            print(addr[0], data.decode(), flush=True)\n";
        let mut server = a
            .exec(&s(&["python3", "-c", listener_py]), &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "listening");
        let client_py = format!(
            "import socket\nc=socket.create_connection(('{}', 7100), 10)\nc.sendall(b'hello')\nc.close()\n",
            a.ip()
        );
        ok_in(&b, &["python3", "-c", &client_py]);
        assert_eq!(lines.next().unwrap().unwrap(), format!("{} hello", b.ip()));
        assert!(server.wait().unwrap().success());

        // Pod-to-host: a listener on the gateway address in this process.
        let l = TcpListener::bind((net.gateway(), 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let client_py = format!(
            "import socket\nc=socket.create_connection(('{}', {port}), 10)\nc.sendall(b'to-gateway')\nprint(c.recv(10).decode())\n",
            net.gateway()
        );
        let client = b
            .exec(&s(&["python3", "-c", &client_py]), &[])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (mut conn, peer) = l.accept().unwrap();
        assert_eq!(peer.ip(), std::net::IpAddr::V4(b.ip()));
        let mut buf = [0u8; 10];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"to-gateway");
        conn.write_all(b"reply").unwrap();
        drop(conn);
        let out = client.wait_with_output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "reply");

        drop((a, b));
        drop(net);
        assert_clean(&prefix);
    }

    #[test]
    fn podnet_bind_mount_is_private_to_its_pod() {
        need_root();
        let sa_target = Path::new("/var/run/secrets/kubernetes.io/serviceaccount");
        let host_had_secrets = Path::new("/run/secrets").exists();
        let dir = tempfile::tempdir().unwrap();
        let sa = dir.path().join("sa");
        fs::create_dir(&sa).unwrap();
        fs::write(sa.join("token"), "secret-token").unwrap();
        fs::write(dir.path().join("single"), "one file").unwrap();
        fs::create_dir(dir.path().join("wd")).unwrap();

        let net = Network::create().unwrap();
        let prefix = net.prefix();
        let mut sp = spec(&net, dir.path(), "with-sa", &["sleep", "1000"]);
        sp.bind_mounts = vec![
            (sa.clone(), sa_target.to_path_buf()),
            (
                dir.path().join("single"),
                PathBuf::from("/opt/pk8s-test/deep/file"),
            ),
            (dir.path().join("wd"), PathBuf::from("/srv/pk8s-work")),
        ];
        sp.workdir = Some(PathBuf::from("/srv/pk8s-work"));
        let with = net.start_pod(sp).unwrap();
        let without = net
            .start_pod(spec(&net, dir.path(), "without-sa", &["sleep", "1000"]))
            .unwrap();

        assert_eq!(
            ok_in(
                &with,
                &["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"]
            ),
            "secret-token"
        );
        assert_eq!(
            ok_in(&with, &["cat", "/opt/pk8s-test/deep/file"]),
            "one file"
        );
        // The covered directories still show what the host has there.
        let run_entries = ok_in(&with, &["ls", "/run"]);
        assert!(
            run_entries.contains("prrte-k8s-sandbox") && run_entries.contains("netns"),
            "{run_entries}"
        );
        assert!(Path::new("/opt").read_dir().unwrap().all(|e| {
            let n = e.unwrap().file_name();
            with.exec(
                &s(&["test", "-e", &format!("/opt/{}", n.to_string_lossy())]),
                &[],
            )
            .status()
            .unwrap()
            .success()
        }));
        // Working directory (also for exec), and writes through the bind mount reach the host.
        assert_eq!(ok_in(&with, &["pwd"]).trim(), "/srv/pk8s-work");
        ok_in(&with, &["sh", "-c", "echo written > out.txt"]);
        assert_eq!(
            fs::read_to_string(dir.path().join("wd/out.txt")).unwrap(),
            "written\n"
        );

        let (ok, _, _) = run_in(&without, &["test", "-e", sa_target.to_str().unwrap()]);
        assert!(!ok, "the other pod must not see the service-account mount");
        let (ok, _, _) = run_in(&without, &["test", "-e", "/opt/pk8s-test"]);
        assert!(!ok);
        // Nothing was created on the host.
        assert_eq!(Path::new("/run/secrets").exists(), host_had_secrets);
        assert!(!Path::new("/opt/pk8s-test").exists());
        assert!(!Path::new("/srv/pk8s-work").exists());

        // Pods do not keep each other's network namespaces mounted (and thus alive), even
        // through the copies of /run the covering tmpfs holds.
        let other_ns = without.netns().to_string();
        let mountinfo = format!("/proc/{}/mountinfo", with.host_pid());
        assert!(fs::read_to_string(&mountinfo).unwrap().contains(&other_ns));
        drop(without);
        let mi = fs::read_to_string(&mountinfo).unwrap();
        assert!(!mi.contains(&other_ns), "{mi}");

        drop(with);
        drop(net);
        assert_clean(&prefix);
    }

    #[test]
    fn podnet_kill_ends_every_process_in_the_pod() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let net = Network::create().unwrap();
        let prefix = net.prefix();
        let mut pod = net
            .start_pod(spec(
                &net,
                dir.path(),
                "victim",
                &["sh", "-c", "sleep 1000 & sleep 1000"],
            ))
            .unwrap();
        let mut extra = pod
            .exec(&s(&["sleep", "1000"]), &[])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while pod.host_pids().len() < 4 {
            assert!(Instant::now() < deadline, "pids: {:?}", pod.host_pids());
            sleep(Duration::from_millis(10));
        }
        let pids = pod.host_pids();
        assert!(pod.try_wait().unwrap().is_none());
        let exit = pod.kill().unwrap();
        assert_eq!(
            exit,
            PodExit {
                code: None,
                signal: Some(9)
            }
        );
        assert!(pod.host_pids().is_empty());
        for p in pids {
            assert!(!Path::new(&format!("/proc/{p}")).exists() || ns_id(p, "pid").is_none());
        }
        // nsenter reports its child's death.
        let st = extra.wait().unwrap();
        assert!(!st.success());
        // kill() again returns the same exit.
        assert_eq!(pod.kill().unwrap(), exit);
        drop(pod);
        drop(net);
        assert_clean(&prefix);
    }

    #[test]
    fn podnet_exit_code_env_and_log() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let net = Network::create().unwrap();
        let prefix = net.prefix();
        let mut sp = spec(
            &net,
            dir.path(),
            "exits",
            &["sh", "-c", "env | sort; echo oops >&2; exit 3"],
        );
        sp.env = vec![("A".into(), "1".into()), ("SPACED".into(), "x y=z".into())];
        let mut pod = net.start_pod(sp).unwrap();
        let exit = pod
            .wait_timeout(Duration::from_secs(10))
            .unwrap()
            .expect("pod ended");
        assert_eq!(
            exit,
            PodExit {
                code: Some(3),
                signal: None
            }
        );
        let log = fs::read_to_string(dir.path().join("exits.log")).unwrap();
        let mut vars: Vec<&str> = log.lines().filter(|l| l.contains('=')).collect();
        vars.sort();
        // Exactly the given variables plus PATH/HOME defaults (and PWD, which sh exports).
        assert_eq!(
            vars,
            vec![
                "A=1",
                "HOME=/root",
                &format!("PATH={DEFAULT_PATH}"),
                "PWD=/",
                "SPACED=x y=z"
            ]
        );
        assert!(log.contains("oops"));

        // A failing setup is an error that carries the log.
        let mut bad = spec(&net, dir.path(), "bad", &["sleep", "1000"]);
        bad.workdir = Some(PathBuf::from("/nonexistent/pk8s"));
        let err = format!("{:#}", net.start_pod(bad).unwrap_err());
        assert!(err.contains("cannot change to working directory"), "{err}");

        drop(pod);
        drop(net);
        assert_clean(&prefix);
    }

    #[test]
    fn podnet_network_drop_takes_live_pods_down() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let net = Network::create().unwrap();
        let net2 = Network::create().unwrap();
        assert_ne!(net.cidr(), net2.cidr());
        let prefix = net.prefix();
        let mut pod = net
            .start_pod(spec(&net, dir.path(), "orphan", &["sleep", "1000"]))
            .unwrap();
        let pid1 = pod.host_pid();
        drop(net);
        assert_eq!(
            pod.try_wait().unwrap(),
            Some(PodExit {
                code: None,
                signal: Some(9)
            })
        );
        assert!(ns_id(pid1, "pid").is_none() || pod.host_pids().is_empty());
        drop(pod);
        drop(net2);
        assert_clean(&prefix);
    }

    #[test]
    fn podnet_panic_still_cleans_up() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        /// Reaps an exec'd process after the pod (declared earlier, dropped later) is gone.
        struct Reap(Option<Child>);
        impl Drop for Reap {
            fn drop(&mut self) {
                if let Some(mut c) = self.0.take() {
                    let _ = c.wait();
                }
            }
        }
        let mut prefix = String::new();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut exec = Reap(None);
            let net = Network::create().unwrap();
            prefix = net.prefix();
            let pod = net
                .start_pod(spec(&net, dir.path(), "doomed", &["sleep", "1000"]))
                .unwrap();
            exec.0 = Some(pod.exec(&s(&["sleep", "1000"]), &[]).spawn().unwrap());
            assert!(!leftovers(&prefix).is_empty());
            panic!("test body fails");
        }));
        assert!(r.is_err());
        assert!(prefix.starts_with(NAME_PREFIX));
        assert_clean(&prefix);
    }

    #[test]
    fn podnet_cleanup_leftovers_after_a_lost_network() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let net = Network::create().unwrap();
        let prefix = net.prefix();
        let pod = net
            .start_pod(spec(&net, dir.path(), "lost", &["sleep", "1000"]))
            .unwrap();
        let pid1 = pod.host_pid();
        // As if the test process had died: nothing gets torn down.
        std::mem::forget(pod);
        std::mem::forget(net);
        let found = leftovers(&prefix);
        assert_eq!(found.netns.len(), 1, "{found}");
        assert_eq!(found.links.len(), 2, "{found}");
        assert!(found.processes.iter().any(|(p, _)| *p == pid1), "{found}");
        assert_eq!(found.state_dirs.len(), 1, "{found}");
        assert!(cleanup_leftovers("eth").is_err());
        let cleaned = cleanup_leftovers(&prefix).unwrap();
        assert_eq!(cleaned.netns, found.netns);
        assert_clean(&prefix);
    }
}
