//! A container's process: the pod's PID 1 in its own PID namespace, how it ended, killing it.

use super::procfs::{ns_id, pids_in_pidns};
use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fmt;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long to wait for a container to die after SIGKILL of its PID 1.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The process of one container: `ip netns exec` → `unshare`, whose child is the container's
/// PID 1 (the container command once set up).
pub(super) struct ContainerProcess {
    /// Names the pod in messages (its network namespace).
    pub(super) label: String,
    /// stderr of `ip netns exec` / `unshare`.
    pub(super) runtime_err: PathBuf,
    /// `ip netns exec` → `unshare`, the parent of the container's PID 1.
    pub(super) child: Child,
    pub(super) pid1: u32,
    pub(super) pidns: Option<String>,
    pub(super) exit: Option<PodExit>,
}

impl ContainerProcess {
    pub(super) fn new(label: &str, child: Child, runtime_err: PathBuf) -> Self {
        ContainerProcess {
            label: label.to_string(),
            runtime_err,
            child,
            pid1: 0,
            pidns: None,
            exit: None,
        }
    }

    pub(super) fn poll_exit(&mut self) -> Result<Option<PodExit>> {
        if self.exit.is_none() {
            if let Some(s) = self.child.try_wait().context("waiting for the pod")? {
                self.exit = Some(self.exit_of(s));
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
    /// process of the container is left.
    pub(super) fn kill(&mut self) -> Result<PodExit> {
        if let Some(e) = self.poll_exit()? {
            self.wait_empty()?;
            return Ok(e);
        }
        // Only signal the pid while it still is this container's PID 1.
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
                let _ = self.child.kill();
                let s = self.child.wait().context("waiting for the pod")?;
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
                    self.label
                );
            }
            sleep(Duration::from_millis(5));
        }
    }
}
