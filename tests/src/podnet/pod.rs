//! A running pod: its PID 1, exit, kill and teardown, and `exec` into it.

use super::host::{delete_link, delete_netns, tools};
use super::procfs::{ns_id, pids_in_pidns};
use super::{lock, KILL_TIMEOUT};
use crate::container::Container;
use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex, Weak};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub(super) struct NetState {
    /// Addresses handed out by `alloc_ip` and not yet released.
    pub(super) reserved: BTreeSet<u8>,
    /// Addresses of pods that have not been torn down.
    pub(super) in_use: BTreeSet<u8>,
    pub(super) pods: Vec<Weak<Mutex<PodInner>>>,
    pub(super) next_seq: u32,
}

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
    pub(super) fn from_status(s: ExitStatus) -> PodExit {
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
pub(super) struct PodInner {
    pub(super) netns: String,
    pub(super) veth: String,
    pub(super) state_dir: PathBuf,
    /// stderr of `ip netns exec` / `unshare`.
    pub(super) runtime_err: PathBuf,
    pub(super) log_path: PathBuf,
    /// `ip netns exec` → `unshare`, the parent of the pod's PID 1.
    pub(super) child: Option<Child>,
    pub(super) pid1: u32,
    pub(super) pidns: Option<String>,
    pub(super) exit: Option<PodExit>,
    pub(super) torn_down: bool,
}

impl PodInner {
    pub(super) fn poll_exit(&mut self) -> Result<Option<PodExit>> {
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
    pub(super) fn exit_of(&self, s: ExitStatus) -> PodExit {
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

    pub(super) fn live_pids(&self) -> Vec<u32> {
        self.pidns.as_deref().map(pids_in_pidns).unwrap_or_default()
    }

    /// SIGKILL PID 1 (the kernel then kills the whole PID namespace), reap, and wait until no
    /// process of the pod is left.
    pub(super) fn kill(&mut self) -> Result<PodExit> {
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

    pub(super) fn wait_empty(&self) -> Result<()> {
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
    pub(super) fn teardown(&mut self) -> Result<()> {
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
    pub(super) name: String,
    pub(super) hostname: String,
    pub(super) ip: Ipv4Addr,
    pub(super) netns: String,
    pub(super) veth: String,
    pub(super) pid1: u32,
    pub(super) pidns: String,
    pub(super) env: Vec<(String, String)>,
    pub(super) workdir: PathBuf,
    /// The init program's configuration, for pods that run an image.
    pub(super) container: Option<PathBuf>,
    pub(super) inner: Arc<Mutex<PodInner>>,
    pub(super) net: Weak<Mutex<NetState>>,
    pub(super) host: u8,
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
