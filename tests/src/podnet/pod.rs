//! A running pod: its containers' processes, exit, kill and teardown, and `exec` into it.

use super::host::tools;
use super::process::PodExit;
use super::procfs::pids_in_pidns;
use super::state::{lock, NetState, PodInner};
use anyhow::Result;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A pod started by [`super::Network::start_pod`]. Dropping it kills everything in the pod and
/// deletes its network namespace and veth.
pub struct RunningPod {
    pub(super) name: String,
    pub(super) hostname: String,
    pub(super) ip: Ipv4Addr,
    pub(super) netns: String,
    pub(super) veth: String,
    /// The pod's containers, in its order, once started.
    pub(super) containers: Vec<RunningContainer>,
    pub(super) inner: Arc<Mutex<PodInner>>,
    pub(super) net: Weak<Mutex<NetState>>,
    pub(super) host: u8,
}

/// What the pod side knows of a started container.
#[derive(Debug, Clone)]
pub(super) struct RunningContainer {
    /// Host pid of the container's PID 1 (0 if it ended during startup before it was seen).
    pub(super) pid1: u32,
    /// Its PID namespace (`pid:[inode]`, "" when `pid1` is 0).
    pub(super) pidns: String,
    /// Its environment (the spec's, plus defaults).
    pub(super) env: Vec<(String, String)>,
    pub(super) workdir: PathBuf,
    /// The init program's configuration, for a container that runs an image.
    pub(super) config: Option<PathBuf>,
    pub(super) log_path: PathBuf,
}

impl RunningPod {
    /// The container whose command is the pod's PID 1 (the sandbox's pods have one).
    fn main(&self) -> Option<&RunningContainer> {
        self.containers.first()
    }

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
        self.main().map_or(0, |c| c.pid1)
    }

    /// The pod's environment (the spec's, plus defaults).
    pub fn env(&self) -> &[(String, String)] {
        self.main().map_or(&[], |c| &c.env)
    }

    pub fn log_path(&self) -> PathBuf {
        self.main().map(|c| c.log_path.clone()).unwrap_or_default()
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
        let workdir = self.main().map_or(Path::new("/"), |c| c.workdir.as_path());
        let mut c = exec_command(self.host_pid(), workdir, self.container_config(), argv);
        c.envs(self.env().iter().map(|(k, v)| (k, v)))
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
        match self.main() {
            Some(c) if !c.pidns.is_empty() => pids_in_pidns(&c.pidns),
            _ => Vec::new(),
        }
    }

    /// The init program's configuration, for a pod that runs an image.
    pub fn container_config(&self) -> Option<&Path> {
        self.main().and_then(|c| c.config.as_deref())
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
            .field("pid1", &self.host_pid())
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
