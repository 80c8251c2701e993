//! What a [`super::RunningPod`] and its [`super::Network`] share: the pod's sandbox and its
//! containers' processes (the network tears down the pods still alive when it goes away), and
//! the network's address pool.

use super::process::{ContainerProcess, PodExit};
use super::sandbox::PodSandbox;
use anyhow::{anyhow, bail, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, Weak};

/// Locks `m`, also when a thread panicked holding it (the state stays usable for teardown).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The network's addresses and the pods started on it.
pub(super) struct NetState {
    /// Addresses handed out by `alloc_ip` and not yet released.
    pub(super) reserved: BTreeSet<u16>,
    /// Addresses of pods that have not been torn down.
    pub(super) in_use: BTreeSet<u16>,
    pub(super) pods: Vec<Weak<Mutex<PodInner>>>,
    pub(super) next_seq: u32,
}

/// A pod's sandbox and the processes of its containers, in the order they were first started
/// (a restarted container keeps its place).
pub(super) struct PodInner {
    pub(super) sandbox: PodSandbox,
    pub(super) containers: Vec<ContainerProcess>,
    /// The memory-backed volumes mounted so far: name → directory on the host.
    pub(super) memory: BTreeMap<String, PathBuf>,
    /// Numbers the containers' starts (their directories carry it).
    pub(super) starts: u32,
    pub(super) torn_down: bool,
}

impl PodInner {
    pub(super) fn new(sandbox: PodSandbox) -> Self {
        PodInner {
            sandbox,
            containers: Vec::new(),
            memory: BTreeMap::new(),
            starts: 0,
            torn_down: false,
        }
    }

    /// The container named `name`.
    pub(super) fn container(&mut self, name: &str) -> Result<&mut ContainerProcess> {
        let pod = self.sandbox.netns.clone();
        self.containers
            .iter_mut()
            .find(|c| c.name == name)
            .ok_or_else(|| anyhow!("pod {pod} has no container {name:?}"))
    }

    /// Makes room for a new start of container `name`: a previous start must have ended; its
    /// files go (its log stays). Returns the start's number.
    pub(super) fn begin_start(&mut self, name: &str) -> Result<u32> {
        if self.torn_down {
            bail!("pod {} is torn down", self.sandbox.netns);
        }
        if let Some(i) = self.containers.iter().position(|c| c.name == name) {
            let c = &mut self.containers[i];
            if c.poll_exit()?.is_none() {
                bail!(
                    "container {name:?} of pod {} is running",
                    self.sandbox.netns
                );
            }
            c.kill()?;
            c.remove_files();
        }
        self.starts += 1;
        Ok(self.starts)
    }

    /// Adds the process of a container start (replacing the container's previous one in place).
    pub(super) fn register(&mut self, p: ContainerProcess) {
        match self.containers.iter().position(|c| c.name == p.name) {
            Some(i) => self.containers[i] = p,
            None => self.containers.push(p),
        }
    }

    /// How the pod's first container's PID 1 ended, once it has.
    pub(super) fn poll_exit(&mut self) -> Result<Option<PodExit>> {
        match self.containers.first_mut() {
            Some(c) => c.poll_exit(),
            None => Ok(None),
        }
    }

    /// Kills every container (see [`ContainerProcess::kill`]); how the first one ended.
    pub(super) fn kill(&mut self) -> Result<PodExit> {
        let mut first = None;
        for c in &mut self.containers {
            let e = c.kill()?;
            first.get_or_insert(e);
        }
        first.ok_or_else(|| anyhow!("pod was never started"))
    }

    /// Kill everything, delete veth, network namespace and state directory. Idempotent.
    pub(super) fn teardown(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        let mut errors = Vec::new();
        for c in &mut self.containers {
            if let Err(e) = c.kill() {
                errors.push(format!("{e:#}"));
            }
        }
        self.sandbox.teardown(&mut errors);
        self.torn_down = true;
        if errors.is_empty() {
            Ok(())
        } else {
            bail!(
                "tearing down pod {}: {}",
                self.sandbox.netns,
                errors.join("; ")
            )
        }
    }
}
