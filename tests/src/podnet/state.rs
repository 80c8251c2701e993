//! What a [`super::RunningPod`] and its [`super::Network`] share: the pod's sandbox and its
//! containers' processes (the network tears down the pods still alive when it goes away), and
//! the network's address pool.

use super::process::{ContainerProcess, PodExit};
use super::sandbox::PodSandbox;
use anyhow::{anyhow, bail, Result};
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, Weak};

/// Locks `m`, also when a thread panicked holding it (the state stays usable for teardown).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The network's addresses and the pods started on it.
pub(super) struct NetState {
    /// Addresses handed out by `alloc_ip` and not yet released.
    pub(super) reserved: BTreeSet<u8>,
    /// Addresses of pods that have not been torn down.
    pub(super) in_use: BTreeSet<u8>,
    pub(super) pods: Vec<Weak<Mutex<PodInner>>>,
    pub(super) next_seq: u32,
}

/// A pod's sandbox and the processes of its containers, in the pod's order.
pub(super) struct PodInner {
    pub(super) sandbox: PodSandbox,
    pub(super) containers: Vec<ContainerProcess>,
    pub(super) torn_down: bool,
}

impl PodInner {
    pub(super) fn new(sandbox: PodSandbox) -> Self {
        PodInner {
            sandbox,
            containers: Vec::new(),
            torn_down: false,
        }
    }

    /// How the pod's PID 1 (its first container's) ended, once it has.
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
