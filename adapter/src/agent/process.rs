//! Child processes of the agent: one reaper for every child (the agent may be PID 1 or a child
//! subreaper), spawning prted in its own process group, and stopping that group.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::sync::oneshot;
use tracing::{debug, error, warn};

use super::cgroup::{is_launch_cgroup_name, Cgroup};
use super::exit_status::ExitStatus;
use super::proc_stat::read_stat;
use super::tracking::{recorded_targets, sweep_targets, OrphanedRanks, Tracking, Tree};

/// Reaps every child of the agent and hands the statuses of registered children to their waiters.
///
/// Spawning and reaping take the same lock, so a child cannot be reaped before it is registered,
/// and the standard library's own wait for a child whose `exec` failed cannot be pre-empted.
#[derive(Default)]
pub(crate) struct Reaper {
    waiters: Mutex<HashMap<i32, oneshot::Sender<ExitStatus>>>,
}

impl Reaper {
    pub fn new() -> Arc<Reaper> {
        Arc::new(Reaper::default())
    }

    /// Spawns `cmd` and registers it; the receiver gets its exit status once it is reaped.
    #[cfg(test)]
    pub fn spawn(
        &self,
        cmd: &mut Command,
    ) -> std::io::Result<(u32, oneshot::Receiver<ExitStatus>)> {
        self.spawn_child(cmd).map(|(pid, rx, _)| (pid, rx))
    }

    /// Spawns `cmd` and registers it; the receiver gets its exit status once it is reaped.
    /// The [`std::process::Child`] is returned for its stdio pipes (never wait on it: the
    /// reaper collects the status).
    pub(crate) fn spawn_child(
        &self,
        cmd: &mut Command,
    ) -> std::io::Result<(u32, oneshot::Receiver<ExitStatus>, std::process::Child)> {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let child = cmd.spawn()?;
        let pid = child.id();
        let (tx, rx) = oneshot::channel();
        waiters.insert(pid as i32, tx);
        Ok((pid, rx, child))
    }

    /// Spawns `cmd` as a tracked launch: inside a fresh cgroup when `tracking` has a cgroup base
    /// (falling back to the sweep if the cgroup cannot be created or entered), and returns the
    /// [`Job`].
    pub(crate) fn spawn_job(&self, cmd: &mut Command, tracking: &Tracking) -> std::io::Result<Job> {
        self.spawn_job_child(cmd, tracking).map(|(job, _)| job)
    }

    /// As [`spawn_job`](Reaper::spawn_job), also returning the [`std::process::Child`] for its
    /// stdio pipes (never wait on it: the reaper collects the status).
    pub(crate) fn spawn_job_child(
        &self,
        cmd: &mut Command,
        tracking: &Tracking,
    ) -> std::io::Result<(Job, std::process::Child)> {
        let cgroup = match tracking {
            Tracking::Cgroup(base) => match Cgroup::create(base) {
                Ok(cg) => Some(cg),
                Err(e) => {
                    warn!(cgroup = %base.dir.display(), error = %e, "cannot create a cgroup for the launch; tracking its processes by a process-tree sweep");
                    None
                }
            },
            Tracking::Sweep => None,
        };
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        // The agent enters the cgroup for the fork only; the spawn lock keeps other forks out.
        let cgroup = cgroup.filter(|cg| match cg.enter_self() {
            Ok(()) => true,
            Err(e) => {
                warn!(cgroup = %cg.dir.display(), error = %e, "cannot enter the launch's cgroup; tracking its processes by a process-tree sweep");
                let _ = cg.remove_now();
                false
            }
        });
        let spawned = cmd.spawn();
        if let Some(cg) = &cgroup {
            cg.leave_self();
        }
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                if let Some(cg) = &cgroup {
                    let _ = cg.remove_now();
                }
                return Err(e);
            }
        };
        let pid = child.id();
        let (tx, rx) = oneshot::channel();
        waiters.insert(pid as i32, tx);
        drop(waiters);
        let in_cgroup = cgroup.filter(|cg| {
            let inside = cg.pids().contains(&(pid as i32));
            if !inside {
                warn!(pid, "the launch is not in its cgroup; tracking its processes by a process-tree sweep");
                cg.remove_eventually();
            }
            inside
        });
        Ok((Job::tracked(pid, rx, in_cgroup), child))
    }

    /// Reaps every child that has ended; returns how many were reaped.
    pub(crate) fn reap_all(&self) -> usize {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        loop {
            let (pid, status) = match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, ExitStatus::Code(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, ExitStatus::Signal(sig as i32)),
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(_) => continue,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    warn!(error = %e, "waitpid failed");
                    break;
                }
            };
            n += 1;
            match waiters.remove(&pid.as_raw()) {
                Some(tx) => {
                    let _ = tx.send(status);
                }
                None => debug!(pid = pid.as_raw(), %status, "reaped an orphaned process"),
            }
        }
        n
    }

    /// Whether `pid` is a child spawned through this reaper that has not been reaped yet.
    pub fn tracks(&self, pid: i32) -> bool {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&pid)
    }

    /// Reaps children whenever SIGCHLD arrives (and every second as a safety net), forever.
    pub async fn run(self: Arc<Self>, mut sigchld: tokio::signal::unix::Signal) {
        let mut orphans = OrphanedRanks::default();
        loop {
            tokio::select! {
                _ = sigchld.recv() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            self.reap_all();
            // Orphaned ranks are children of the agent: with no child at all there is nothing
            // to sweep, and an idle agent skips even the read of its children list (one syscall
            // instead).
            if has_children() {
                orphans.sweep(|p| self.tracks(p));
            }
        }
    }
}

/// Whether this process has any child, running or not yet reaped (`waitid` without waiting or
/// reaping; only "no children" (ECHILD) is a no).
pub(crate) fn has_children() -> bool {
    use nix::sys::wait::{waitid, Id};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::All, flags) {
            Err(Errno::ECHILD) => return false,
            Err(Errno::EINTR) => continue,
            _ => return true,
        }
    }
}

/// Whether any process is left in process group `pgid` (zombies count until reaped).
pub(crate) fn group_exists(pgid: i32) -> bool {
    !matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH))
}

fn signal_group(pgid: i32, sig: Signal) {
    match killpg(Pid::from_raw(pgid), sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => warn!(pgid, signal = sig.as_str(), error = %e, "cannot signal process group"),
    }
}

fn signal_pid(pid: i32, sig: Signal) {
    match kill(Pid::from_raw(pid), sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => warn!(pid, signal = sig.as_str(), error = %e, "cannot signal process"),
    }
}

const POLL: Duration = Duration::from_millis(20);
/// How long to wait for processes to disappear after SIGKILL.
const AFTER_KILL: Duration = Duration::from_secs(10);
/// How long `terminate` still waits for prted's exit status once its group has been stopped.
const STATUS_WAIT: Duration = Duration::from_secs(2);

/// How the processes of a job beyond its process group are found.
enum Descendants {
    /// Only the process group (and the agent's strays in its own session).
    Group,
    /// Every process in the launch's cgroup, and the process tree as for the sweep: a process
    /// of the job can move itself to another cgroup the pod's user may write (the agent's own),
    /// but not out of the agent's process tree. Processes in another launch's cgroup are that
    /// launch's.
    Cgroup { cg: Cgroup, tree: Tree },
    /// Descendants recorded while the job runs, plus a process-tree sweep when it is stopped.
    Sweep(Tree),
}

/// A running prted (or the DVM head's prte): its pid (= process group id), the channel
/// bringing its exit status, and how its other processes are tracked (see
/// `tracking`). Dropping a job that was not [`terminate`](Job::terminate)d kills
/// whatever is left of it.
pub struct Job {
    pub pid: u32,
    exit_rx: oneshot::Receiver<ExitStatus>,
    status: Option<ExitStatus>,
    /// Set once `terminate` has stopped the group (its pgid may be reused afterwards).
    terminated: bool,
    descendants: Descendants,
}

impl Drop for Job {
    fn drop(&mut self) {
        self.kill_leftovers();
    }
}

impl Job {
    /// A job tracked by its process group only.
    pub fn new(pid: u32, exit_rx: oneshot::Receiver<ExitStatus>) -> Job {
        Job {
            pid,
            exit_rx,
            status: None,
            terminated: false,
            descendants: Descendants::Group,
        }
    }

    /// A job tracked by `cgroup` and by recording its descendants, or by the recording alone
    /// (which needs a tokio runtime: it runs as a task until the job is dropped).
    pub fn tracked(
        pid: u32,
        exit_rx: oneshot::Receiver<ExitStatus>,
        cgroup: Option<Cgroup>,
    ) -> Job {
        let tree = Tree::record(pid);
        let descendants = match cgroup {
            Some(cg) => Descendants::Cgroup { cg, tree },
            None => Descendants::Sweep(tree),
        };
        Job {
            pid,
            exit_rx,
            status: None,
            terminated: false,
            descendants,
        }
    }

    /// How the job's processes are tracked, for logs and tests.
    pub(crate) fn tracking_label(&self) -> &'static str {
        match &self.descendants {
            Descendants::Group => "process group",
            Descendants::Cgroup { cg, .. } if cg.base.v2 => "cgroup v2",
            Descendants::Cgroup { .. } => "cgroup v1",
            Descendants::Sweep(_) => "process-tree sweep",
        }
    }

    /// Processes of the job outside its process group that are still alive (prted itself and
    /// its group excluded).
    fn others(&self, tracked: &(dyn Fn(i32) -> bool + Sync)) -> Vec<i32> {
        let pgid = self.pid as i32;
        let live = |p: &i32| read_stat(*p).is_some_and(|s| s.state != 'Z' && s.pgrp != pgid);
        match &self.descendants {
            Descendants::Group => Vec::new(),
            Descendants::Cgroup { cg, tree } => {
                let mut pids = cg.pids();
                let tree: Vec<i32> = sweep_targets(pgid, &tree.known, tracked)
                    .into_iter()
                    .filter(|p| !pids.contains(p) && !in_other_launch(*p, cg))
                    .collect();
                pids.extend(tree);
                pids.into_iter()
                    .filter(|p| *p != pgid)
                    .filter(live)
                    .collect()
            }
            Descendants::Sweep(tree) => sweep_targets(pgid, &tree.known, tracked)
                .into_iter()
                .filter(|p| *p != pgid)
                .filter(live)
                .collect(),
        }
    }

    /// Sends `sig` to prted itself while it is not reaped (a prted that has not made itself the
    /// leader of its own group yet is not reached through the group), to the process group and
    /// to every other process of the job.
    fn signal_all(&mut self, sig: Signal, tracked: &(dyn Fn(i32) -> bool + Sync)) {
        let pgid = self.pid as i32;
        if self.poll_status().is_none() {
            signal_pid(pgid, sig);
        }
        signal_group(pgid, sig);
        if let Descendants::Cgroup { cg, .. } = &self.descendants {
            cg.signal(sig);
        }
        if !matches!(self.descendants, Descendants::Group) {
            for p in self.others(tracked) {
                let _ = kill(Pid::from_raw(p), sig);
            }
        }
    }

    /// For a job abandoned without [`terminate`](Job::terminate) (a panic, an aborted task):
    /// SIGKILL to whatever is left in its process group. Does nothing after `terminate`.
    pub(crate) fn kill_leftovers(&mut self) {
        if std::mem::replace(&mut self.terminated, true) {
            return;
        }
        let pgid = self.pid as i32;
        if self.poll_status().is_none() {
            signal_pid(pgid, Signal::SIGKILL);
        }
        if group_exists(pgid) {
            error!(
                pgid,
                "the process group is still there while its job is dropped; killing it"
            );
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let others: Vec<i32> = match &self.descendants {
            Descendants::Group => Vec::new(),
            // Without the reaper, only what was recorded as the job's (never another child).
            Descendants::Cgroup { cg, tree } => {
                let mut pids = cg.pids();
                pids.extend(
                    recorded_targets(pgid, &tree.known)
                        .into_iter()
                        .filter(|p| !in_other_launch(*p, cg)),
                );
                pids
            }
            Descendants::Sweep(tree) => recorded_targets(pgid, &tree.known),
        };
        let others: Vec<i32> = others
            .into_iter()
            .filter(|p| read_stat(*p).is_some_and(|s| s.state != 'Z'))
            .collect();
        if !others.is_empty() {
            error!(pids = ?others, "processes of the job are still there while it is dropped; killing them");
            if let Descendants::Cgroup { cg, .. } = &self.descendants {
                cg.signal(Signal::SIGKILL);
            }
            others.iter().for_each(|p| {
                let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
            });
        }
        if let Descendants::Cgroup { cg, .. } = &self.descendants {
            cg.remove_eventually();
        }
    }

    /// Waits until prted itself has ended (cancel-safe).
    pub async fn wait_exit(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let s = match (&mut self.exit_rx).await {
            Ok(s) => s,
            Err(_) => {
                error!(pid = self.pid, "lost track of prted's exit status");
                ExitStatus::Code(-1)
            }
        };
        self.status = Some(s);
        s
    }

    fn poll_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            match self.exit_rx.try_recv() {
                Ok(s) => self.status = Some(s),
                Err(oneshot::error::TryRecvError::Empty) => {}
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.status = Some(ExitStatus::Code(-1))
                }
            }
        }
        self.status
    }

    /// Waits up to `within` until prted has ended and its process group and other tracked
    /// processes are gone; sends `sig` to each process of the job found meanwhile that had not
    /// been found before (one found only once another died, such as an orphan whose session
    /// leader was the launch's and has just been killed).
    async fn wait_all_gone(
        &mut self,
        within: Duration,
        tracked: &(dyn Fn(i32) -> bool + Sync),
        sig: Signal,
    ) -> bool {
        let deadline = Instant::now() + within;
        let mut signalled: HashSet<i32> = self.others(tracked).into_iter().collect();
        loop {
            let others = self.others(tracked);
            for p in others.iter().filter(|p| !signalled.contains(p)) {
                debug!(
                    pid = p,
                    signal = sig.as_str(),
                    "a process of the job found while it stops"
                );
                signal_pid(*p, sig);
            }
            signalled.extend(others.iter().copied());
            if self.poll_status().is_some() && !group_exists(self.pid as i32) && others.is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops prted's whole process group: SIGTERM, SIGKILL after `grace`, and waits until
    /// everything in it has been reaped; then stops any descendant that left the group.
    /// Also used after prted ended by itself, to stop whatever it left behind.
    /// Returns prted's own exit status.
    pub async fn terminate(&mut self, grace: Duration, reaper: &Reaper) -> ExitStatus {
        let pgid = self.pid as i32;
        let tracked = |p: i32| reaper.tracks(p);
        if self.poll_status().is_none() || group_exists(pgid) || !self.others(&tracked).is_empty() {
            self.signal_all(Signal::SIGTERM, &tracked);
            if !self.wait_all_gone(grace, &tracked, Signal::SIGTERM).await {
                debug!(
                    pgid,
                    "processes of the job alive after the grace period, sending SIGKILL"
                );
                self.signal_all(Signal::SIGKILL, &tracked);
                if !self
                    .wait_all_gone(AFTER_KILL, &tracked, Signal::SIGKILL)
                    .await
                {
                    error!(pgid, "processes of the job survive SIGKILL");
                }
            }
        }
        sweep_descendants(grace, reaper).await;
        if let Descendants::Cgroup { cg, .. } = &self.descendants {
            if cg.populated() {
                cg.signal(Signal::SIGKILL);
            }
            reaper.reap_all();
            cg.remove_eventually();
        }
        self.terminated = true;
        match tokio::time::timeout(STATUS_WAIT, self.wait_exit()).await {
            Ok(status) => status,
            Err(_) => {
                error!(
                    pid = self.pid,
                    "no exit status after SIGKILL (the process is stuck in the kernel); \
                     reporting exit code -1"
                );
                ExitStatus::Code(-1)
            }
        }
    }
}

/// Whether process `pid` is in a launch cgroup other than `ours` (another job's process).
fn in_other_launch(pid: i32, ours: &Cgroup) -> bool {
    let ours_name = ours.dir.file_name().and_then(|n| n.to_str());
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| {
        text.lines().any(|l| {
            let name = l.rsplit('/').next().unwrap_or_default();
            is_launch_cgroup_name(name) && Some(name) != ours_name
        })
    })
}

/// Children of this process in its own session that `reaper` did not spawn: with the agent as a
/// child subreaper (or PID 1), these are descendants of a prted that were orphaned after leaving
/// prted's process group. The agent's own children (a running prted, the DVM head's prte) are
/// not strays.
fn stray_children(reaper: &Reaper) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Some(my_session) = read_stat(me).map(|s| s.session) else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .filter(|s| s.ppid == me && s.session == my_session && s.state != 'Z')
        .map(|s| s.pid)
        .filter(|pid| !reaper.tracks(*pid))
        .collect()
}

/// Stops stray children (see [`stray_children`]): SIGTERM, SIGKILL after `grace`; repeats for
/// the grandchildren that get reparented meanwhile. Bounded in time.
async fn sweep_descendants(grace: Duration, reaper: &Reaper) {
    for _round in 0..4 {
        reaper.reap_all();
        let strays = stray_children(reaper);
        if strays.is_empty() {
            return;
        }
        warn!(pids = ?strays, "stopping processes that prted left behind outside its process group");
        for &pid in &strays {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        let alive = |pids: &[i32]| -> Vec<i32> {
            pids.iter()
                .copied()
                .filter(|p| read_stat(*p).is_some_and(|s| s.state != 'Z'))
                .collect()
        };
        while !alive(&strays).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
        for pid in alive(&strays) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let deadline = Instant::now() + AFTER_KILL;
        while !alive(&strays).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
    }
    reaper.reap_all();
}

#[cfg(test)]
mod tests;
