//! A container's process: PID 1 of its own PID namespace, what it runs with, how it ended,
//! killing it.

use super::procfs::{ns_id, pids_in_pidns, PidNs};
use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fmt;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
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

/// The process of one container: `ip netns exec` → `nsenter` → `unshare`, whose child is the
/// container's PID 1 (the container command once set up).
pub(super) struct ContainerProcess {
    /// The container's name in the pod.
    pub(super) name: String,
    /// Names the container in messages (the pod's network namespace and its name).
    pub(super) label: String,
    /// Its files on the host (ready file, runtime errors, the init program's configuration
    /// and the writable layer of an image container).
    pub(super) dir: PathBuf,
    /// What it runs with (the spec's environment plus defaults, its working directory).
    pub(super) env: Vec<(String, String)>,
    pub(super) workdir: PathBuf,
    /// The init program's configuration, for a container that runs an image.
    pub(super) config: Option<PathBuf>,
    pub(super) log_path: PathBuf,
    /// stderr of `ip netns exec` / `unshare`.
    pub(super) runtime_err: PathBuf,
    /// `ip netns exec` → `unshare`, the parent of the container's PID 1.
    pub(super) child: Child,
    pub(super) pid1: u32,
    /// PID 1's PID namespace, held for as long as this process is the container's (so that
    /// its name never becomes another container's while this one is looked for by it).
    pub(super) pidns: Option<PidNs>,
    pub(super) exit: Option<PodExit>,
}

impl ContainerProcess {
    pub(super) fn new(started: Started, child: Child) -> Self {
        ContainerProcess {
            label: started.label,
            name: started.name,
            runtime_err: started.dir.join("runtime.err"),
            dir: started.dir,
            env: started.env,
            workdir: started.workdir,
            config: started.config,
            log_path: started.log_path,
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

    /// Host pids of the container's processes (none once it has ended).
    pub(super) fn live_pids(&self) -> Vec<u32> {
        self.pidns
            .as_ref()
            .map(|ns| pids_in_pidns(ns.id()))
            .unwrap_or_default()
    }

    /// Whether `pid1` still is this container's PID 1 (not ended, its pid not taken by another
    /// process).
    fn pid1_is_ours(&self) -> bool {
        let ns = self.pidns.as_ref().map(PidNs::id);
        self.pid1 != 0 && ns.is_some() && ns_id(self.pid1, "pid").as_deref() == ns
    }

    /// Sends `signal` to PID 1 while it still runs (and still is this container's PID 1).
    pub(super) fn signal(&mut self, signal: Signal) -> Result<()> {
        if self.poll_exit()?.is_some() {
            return Ok(());
        }
        if self.pid1_is_ours() {
            let _ = kill(Pid::from_raw(self.pid1 as i32), signal);
        }
        Ok(())
    }

    /// SIGKILL PID 1 (the kernel then kills the whole PID namespace), reap, and wait until no
    /// process of the container is left.
    pub(super) fn kill(&mut self) -> Result<PodExit> {
        if let Some(e) = self.poll_exit()? {
            self.wait_empty()?;
            return Ok(e);
        }
        // Only signal the pid while it still is this container's PID 1.
        if self.pid1_is_ours() {
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
                bail!("{}: processes still alive after kill: {left:?}", self.label);
            }
            sleep(Duration::from_millis(5));
        }
    }
}

/// What a container starts with (see [`ContainerProcess`]'s fields).
pub(super) struct Started {
    pub(super) name: String,
    pub(super) label: String,
    pub(super) dir: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) workdir: PathBuf,
    pub(super) config: Option<PathBuf>,
    pub(super) log_path: PathBuf,
}

impl ContainerProcess {
    /// Removes the container's files (after it has ended), keeping its log.
    pub(super) fn remove_files(&self) {
        if let Err(e) = remove_tree(&self.dir) {
            tracing::warn!("{}: removing {}: {e:#}", self.label, self.dir.display());
        }
    }
}

fn remove_tree(d: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(d) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
