//! A running pod: its sandbox, starting its containers, their processes, exit, kill and
//! teardown, and `exec` into a container.

use super::host::tools;
use super::mounts::resolved_binds;
use super::process::PodExit;
use super::procfs::pids_in_pidns;
use super::sandbox::mounts_hosts;
use super::spawn::{start_container, Launch};
use super::spec::ContainerSpec;
use super::state::{lock, NetState, PodInner};
use crate::runtime::container::Container;
use anyhow::{bail, Result};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::thread::sleep;
use std::time::{Duration, Instant};

#[cfg(test)]
mod tests;

/// A pod started by [`super::Network::start_pod`] or [`super::Network::start_sandbox`].
/// Dropping it kills everything in the pod and deletes its network namespace and veth.
///
/// Its methods take `&self`: containers start, end and are entered while other threads hold
/// the pod. The pod-wide methods ([`RunningPod::host_pid`], [`RunningPod::exec`],
/// [`RunningPod::try_wait`], ...) are about its first container.
pub struct RunningPod {
    pub(super) name: String,
    pub(super) hostname: String,
    pub(super) ip: Ipv4Addr,
    pub(super) netns: String,
    pub(super) veth: String,
    pub(super) inner: Arc<Mutex<PodInner>>,
    pub(super) net: Weak<Mutex<NetState>>,
    pub(super) host: u16,
}

/// What `exec` needs of a running container.
struct ExecTarget {
    pid1: u32,
    workdir: PathBuf,
    config: Option<PathBuf>,
    env: Vec<(String, String)>,
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

    /// Starts container `spec` in the pod (in its network, UTS and IPC namespaces, with mount
    /// and PID namespaces of its own) and returns once its setup is done and its command has
    /// been `exec`ed. A container of the same name must have ended: it is replaced (a restart).
    /// A command that exits right away is not an error (see [`RunningPod::container_exit`]);
    /// failures of the setup itself are, with the log's tail.
    pub fn start_container(&self, spec: &ContainerSpec) -> Result<()> {
        spec.validate(&self.name)?;
        let tools = tools()?;
        let mut binds = resolved_binds(spec, &self.name)?;
        let (sandbox, seq) = {
            let mut inner = lock(&self.inner);
            let seq = inner.begin_start(&spec.name)?;
            (inner.sandbox.clone(), seq)
        };
        if !mounts_hosts(&binds) {
            binds.push((sandbox.hosts_file(), PathBuf::from("/etc/hosts")));
        }
        let image = match &spec.image {
            Some(c) => Some(self.memory_volumes(c, &mut binds)?),
            None => None,
        };
        let l = Launch {
            tools,
            sandbox: &sandbox,
            spec,
            image,
            binds,
            dir: sandbox.container_dir(&spec.name, seq)?,
            what: format!(
                "starting container {} of pod {} ({})",
                spec.name, self.name, self.netns
            ),
        };
        start_container(&l, &self.inner)
    }

    /// `c` with its memory-backed volumes as bind mounts (appended to `binds`) of the pod's
    /// tmpfs of each volume, mounted on first use.
    fn memory_volumes(
        &self,
        c: &Container,
        binds: &mut Vec<(PathBuf, PathBuf)>,
    ) -> Result<Container> {
        let mut inner = lock(&self.inner);
        for t in &c.tmpfs {
            let dir = match inner.memory.get(&t.volume) {
                Some(d) => d.clone(),
                None => {
                    let d = inner.sandbox.memory_volume(&t.volume, t.mode, t.gid)?;
                    inner.memory.insert(t.volume.clone(), d.clone());
                    d
                }
            };
            binds.push((dir, t.path.clone()));
        }
        Ok(Container {
            tmpfs: Vec::new(),
            ..c.clone()
        })
    }

    /// The names of the containers started so far, in the order they were first started.
    pub fn containers(&self) -> Vec<String> {
        lock(&self.inner)
            .containers
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// `Some` once container `name`'s PID 1 has ended (every process of the container has
    /// ended then).
    pub fn container_exit(&self, name: &str) -> Result<Option<PodExit>> {
        lock(&self.inner).container(name)?.poll_exit()
    }

    /// SIGKILLs container `name`'s PID 1 (its PID namespace, and with it every process of
    /// the container, dies with it), reaps it and returns how it ended (or how it had ended).
    pub fn kill_container(&self, name: &str) -> Result<PodExit> {
        lock(&self.inner).container(name)?.kill()
    }

    /// Sends `signal` to container `name`'s PID 1 if it still runs (as a container runtime
    /// stops a container: PID 1 of its PID namespace gets it only if it handles it).
    pub fn signal_container(&self, name: &str, signal: nix::sys::signal::Signal) -> Result<()> {
        lock(&self.inner).container(name)?.signal(signal)
    }

    /// Host pid of container `name`'s PID 1 (None before it was seen, e.g. when it ended
    /// during startup).
    pub fn container_pid(&self, name: &str) -> Option<u32> {
        let mut inner = lock(&self.inner);
        inner
            .container(name)
            .ok()
            .map(|c| c.pid1)
            .filter(|p| *p != 0)
    }

    /// Container `name`'s environment (the spec's, plus defaults).
    pub fn container_env(&self, name: &str) -> Vec<(String, String)> {
        let mut inner = lock(&self.inner);
        inner
            .container(name)
            .map(|c| c.env.clone())
            .unwrap_or_default()
    }

    /// The init program's configuration of container `name`, when it runs an image.
    pub fn container_config(&self, name: &str) -> Option<PathBuf> {
        let mut inner = lock(&self.inner);
        inner.container(name).ok().and_then(|c| c.config.clone())
    }

    /// A command that runs `argv` in running container `name` (see [`RunningPod::exec`]).
    pub fn exec_in(
        &self,
        name: &str,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<Command> {
        let t = {
            let mut inner = lock(&self.inner);
            let c = inner.container(name)?;
            if c.poll_exit()?.is_some() || c.pid1 == 0 {
                bail!("container {name:?} of pod {} is not running", self.name);
            }
            ExecTarget {
                pid1: c.pid1,
                workdir: c.workdir.clone(),
                config: c.config.clone(),
                env: c.env.clone(),
            }
        };
        let mut c = exec_command(t.pid1, &t.workdir, t.config.as_deref(), argv);
        c.envs(t.env.iter().map(|(k, v)| (k, v)))
            .envs(env.iter().map(|(k, v)| (k, v)));
        Ok(c)
    }

    /// The first container's name ("" before any started).
    fn first(&self) -> String {
        lock(&self.inner)
            .containers
            .first()
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }

    /// Host pid of the first container's PID 1. 0 if it could not be determined because it
    /// ended during startup.
    pub fn host_pid(&self) -> u32 {
        self.container_pid(&self.first()).unwrap_or(0)
    }

    /// The first container's environment (the spec's, plus defaults).
    pub fn env(&self) -> Vec<(String, String)> {
        self.container_env(&self.first())
    }

    /// The first container's log.
    pub fn log_path(&self) -> PathBuf {
        let inner = lock(&self.inner);
        inner
            .containers
            .first()
            .map(|c| c.log_path.clone())
            .unwrap_or_default()
    }

    /// `Some` once the first container's PID 1 has ended.
    pub fn try_wait(&self) -> Result<Option<PodExit>> {
        lock(&self.inner).poll_exit()
    }

    /// Waits up to `d` for the first container to end.
    pub fn wait_timeout(&self, d: Duration) -> Result<Option<PodExit>> {
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

    /// A command that runs `argv` inside all of the first container's namespaces (network,
    /// UTS, IPC, mount, PID) in its working directory, with its environment overridden by
    /// `env`. The process is in the container's PID namespace, so it dies with it. The caller
    /// sets stdio and spawns it; `argv[0]` is looked up in the resulting `PATH`.
    ///
    /// In a container that runs an image, the command runs in the container's root
    /// filesystem as the container's user, with its capabilities and `no_new_privs`, as
    /// `kubectl exec` does.
    pub fn exec(&self, argv: &[String], env: &[(String, String)]) -> Command {
        let first = self.first();
        self.exec_in(&first, argv, env).unwrap_or_else(|_| {
            // Ended: a command that fails like nsenter does for a gone process.
            let mut c = exec_command(0, Path::new("/"), None, argv);
            c.envs(env.iter().map(|(k, v)| (k, v)));
            c
        })
    }

    /// SIGKILLs every container's PID 1, reaps them and returns how the first one ended. The
    /// network namespace stays until the pod is dropped.
    pub fn kill(&self) -> Result<PodExit> {
        lock(&self.inner).kill()
    }

    /// Host pids of every process of the pod's containers (empty once they have ended). A
    /// container seen to have ended (a finished init container) is left out: its PID 1 is
    /// reaped only after every other process of its PID namespace is gone.
    pub fn host_pids(&self) -> Vec<u32> {
        let inner = lock(&self.inner);
        let mut v: Vec<u32> = inner
            .containers
            .iter()
            .filter(|c| c.exit.is_none())
            .filter_map(|c| c.pidns.as_ref())
            .flat_map(|ns| pids_in_pidns(ns.id()))
            .collect();
        v.sort_unstable();
        v
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

    /// Sets the sandbox up: state directory, `/etc/hosts`, network namespace and veth on
    /// `bridge`, UTS and IPC namespaces.
    pub(super) fn set_up(&self, bridge: &str, gateway: Ipv4Addr) -> Result<()> {
        let sandbox = lock(&self.inner).sandbox.clone();
        sandbox.create_state_dir()?;
        sandbox.write_hosts(&self.name, self.ip, &self.hostname)?;
        sandbox.connect(bridge, gateway, self.ip)?;
        sandbox.pin_namespaces(&self.hostname)
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
            .field("containers", &self.containers())
            .finish()
    }
}

/// A command that runs `argv` in the container whose PID 1 has host pid `pid1` (see
/// [`RunningPod::exec`]), with an empty environment for the caller to fill. `container` is the
/// init program's configuration of a container that runs an image.
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
    match (container, crate::runtime::container::init_binary()) {
        (Some(config), Ok(init)) => {
            // The init program enters the mount namespace itself (its own path is a host path)
            // and drops to the container's user.
            c.args(["--net", "--uts", "--ipc", "--pid", "--"])
                .arg(init)
                .arg("exec")
                .arg(config)
                .arg(pid1.to_string())
                .arg("--");
        }
        _ => {
            // The working directory is resolved in the container's mount namespace via PID 1's
            // root.
            let wd = Path::new(&format!("/proc/{pid1}/root"))
                .join(workdir.strip_prefix("/").unwrap_or(workdir));
            c.args(["--net", "--uts", "--ipc", "--mount", "--pid"])
                .arg(format!("--wd={}", wd.display()))
                .arg("--");
        }
    }
    c.args(argv).env_clear();
    c
}
