//! Tracking every descendant of a launch, including processes that left prted's process group
//! and session (a daemon that forks and calls `setsid()`).
//!
//! * **A cgroup per launch** where the machine allows it: the agent finds the cgroup hierarchy it
//!   runs in (cgroup v2, else a v1 hierarchy with the `pids` or `freezer` controller, else the
//!   named `systemd` one), creates `prrte-k8s-<random>` below its own cgroup for each launch and
//!   starts prted inside it. Membership is inherited by every fork, whatever the session or
//!   process group, so `cgroup.procs` lists what the launch started; stopping it signals
//!   every member (cgroup v2's `cgroup.kill` for SIGKILL) until the cgroup is empty, then removes
//!   it. The agent moves itself into the new cgroup just for the `fork` (under the reaper's
//!   spawn lock) and back, so no process of the launch ever starts outside it. A process of
//!   the launch may still move itself out (into any cgroup the pod's user can write, such as
//!   the agent's own), so the process tree is followed as for the sweep below as well; only
//!   processes in another launch's cgroup are left to that launch.
//! * **A process-tree sweep** otherwise (no writable cgroup, or `--cgroup off`): the agent
//!   records, every [`SCAN_INTERVAL`] while the launch runs, every descendant of prted (by the
//!   kernel's children lists, `/proc/PID/task/TID/children`, with the start time against pid
//!   reuse; a kernel without them: by the parent links of the whole table), and when stopping it
//!   adds the current descendants and the agent's untracked children that belong to the launch:
//!   in the agent's own session, recorded before, or in a session whose leader is gone or was
//!   recorded (a double-forking daemon); a child in a session whose leader is alive and not the
//!   launch's (a `kubectl exec` shell's orphan) is left alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tracing::{info, warn};

use super::cgroup::{find_cgroup_base, remove_stale_cgroups, CgroupBase, STALE_AFTER};
use super::proc_stat::{
    all_stats, descendants, descendants_in, own_children, read_stat, start_time, ProcStat,
};

/// How often the sweep fallback records the descendants of a running launch.
pub(crate) const SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// How the agent tracks the processes of a launch.
#[derive(Debug, Clone)]
pub enum Tracking {
    Cgroup(CgroupBase),
    Sweep,
}

impl Tracking {
    /// Cgroups if `enabled` and a writable hierarchy is found, else the sweep; logs the choice.
    pub(crate) fn detect(enabled: bool) -> Tracking {
        if !enabled {
            info!("descendants of prted are tracked by a process-tree sweep (--cgroup off)");
            return Tracking::Sweep;
        }
        match find_cgroup_base() {
            Ok(base) => {
                info!(cgroup = %base.dir.display(), v2 = base.v2, "descendants of prted are tracked in a cgroup per launch");
                let removed = remove_stale_cgroups(&base, STALE_AFTER);
                if !removed.is_empty() {
                    info!(
                        cgroup = %base.dir.display(),
                        removed = removed.len(),
                        "removed empty launch cgroups left behind by an agent that was killed"
                    );
                }
                Tracking::Cgroup(base)
            }
            Err(why) => {
                info!(reason = %why, "no writable cgroup: descendants of prted are tracked by a process-tree sweep");
                Tracking::Sweep
            }
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Tracking::Cgroup(b) if b.v2 => "cgroup v2",
            Tracking::Cgroup(_) => "cgroup v1",
            Tracking::Sweep => "process-tree sweep",
        }
    }
}

/// The recorded descendants of a job and the task recording them.
pub struct Tree {
    pub(crate) known: Known,
    scanner: Option<tokio::task::JoinHandle<()>>,
}

impl Tree {
    /// Records the descendants of `pid` every [`SCAN_INTERVAL`] (needs a tokio runtime; the
    /// recording runs until the tree is dropped).
    pub fn record(pid: u32) -> Tree {
        let known = Known::default();
        known.record(pid as i32);
        let k = known.clone();
        let scanner = tokio::spawn(async move {
            loop {
                tokio::time::sleep(SCAN_INTERVAL).await;
                k.record(pid as i32);
            }
        });
        Tree {
            known,
            scanner: Some(scanner),
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        if let Some(t) = self.scanner.take() {
            t.abort();
        }
    }
}

/// Descendants of a launch recorded by the sweep fallback: pid → start time.
#[derive(Debug, Default, Clone)]
pub(crate) struct Known(Arc<Mutex<HashMap<i32, u64>>>);

impl Known {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the current descendants of `root` (and `root`).
    pub fn record(&self, root: i32) {
        let now = descendants(root);
        let mut known = self.lock();
        for p in std::iter::once(root).chain(now) {
            if let Some(t) = start_time(p) {
                known.insert(p, t);
            }
        }
        // Forget what is gone (its pid may be reused).
        known.retain(|p, t| start_time(*p) == Some(*t));
    }

    /// Whether `pid` is the process recorded under that pid.
    pub fn contains(&self, pid: i32) -> bool {
        self.lock()
            .get(&pid)
            .is_some_and(|t| start_time(pid) == Some(*t))
    }

    /// Recorded pids still alive.
    pub fn alive(&self) -> Vec<i32> {
        let known = self.lock();
        known
            .iter()
            .filter(|(p, t)| {
                start_time(**p) == Some(**t) && read_stat(**p).is_some_and(|s| s.state != 'Z')
            })
            .map(|(p, _)| *p)
            .collect()
    }
}

/// The recorded processes of a launch still alive and their current descendants (what can be
/// attributed to it without knowing the agent's other children).
pub(crate) fn recorded_targets(root: i32, known: &Known) -> Vec<i32> {
    let stats = all_stats();
    let mut out = known.alive();
    out.push(root);
    for r in out.clone() {
        out.extend(descendants_in(r, &stats));
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|p| *p != std::process::id() as i32);
    out
}

/// The processes of a launch the sweep fallback would stop now: the recorded ones, the current
/// descendants of `root` and of every recorded one, and the agent's untracked children that
/// belong to the launch (see the module documentation). `tracked` tells the agent's own
/// registered children (prted itself, the DVM head's prte), which are never strays.
pub(crate) fn sweep_targets(root: i32, known: &Known, tracked: impl Fn(i32) -> bool) -> Vec<i32> {
    let me = std::process::id() as i32;
    let stats = all_stats();
    let by_pid: HashMap<i32, &ProcStat> = stats.iter().map(|s| (s.pid, s)).collect();
    let my_session = by_pid.get(&me).map(|s| s.session);
    let mut out: Vec<i32> = Vec::new();
    let add = |p: i32, out: &mut Vec<i32>| {
        if p != me && p > 0 && !out.contains(&p) && by_pid.get(&p).is_some_and(|s| s.state != 'Z') {
            out.push(p);
        }
    };
    let mut roots = known.alive();
    roots.push(root);
    for r in &roots {
        add(*r, &mut out);
        for d in descendants_in(*r, &stats) {
            add(d, &mut out);
        }
    }
    for s in stats
        .iter()
        .filter(|s| s.ppid == me && s.state != 'Z' && !tracked(s.pid))
    {
        let leader_alive =
            s.session != s.pid && by_pid.get(&s.session).is_some_and(|l| l.state != 'Z');
        let ours = Some(s.session) == my_session
            || known.contains(s.pid)
            || known.contains(s.session)
            || !leader_alive;
        if ours {
            add(s.pid, &mut out);
            for d in descendants_in(s.pid, &stats) {
                add(d, &mut out);
            }
        }
    }
    // Never the root itself once it is reaped, never the agent's tracked children other than root.
    out.retain(|p| *p == root || !tracked(*p));
    out
}

/// How long an orphaned rank gets between SIGTERM and SIGKILL.
const ORPHAN_GRACE: Duration = Duration::from_secs(2);

/// MPI ranks (and other PRRTE-launched processes: their environment names a PMIx namespace)
/// whose launcher died and left them to the agent, which is the pod's PID 1 or a child
/// subreaper. A rank whose daemon (prted, or prte/prterun in the launcher's pod) is gone can
/// never finish its job: the agent stops it (SIGTERM, SIGKILL after [`ORPHAN_GRACE`]), so no
/// rank outlives a failed job even in the pod where prterun ran. Other orphans are left alone.
#[derive(Default)]
pub(crate) struct OrphanedRanks {
    /// pid, start time → when it was sent SIGTERM.
    seen: HashMap<(i32, u64), Instant>,
}

impl OrphanedRanks {
    /// One pass: signal the agent's untracked children that are PRRTE-launched processes.
    pub fn sweep(&mut self, tracked: impl Fn(i32) -> bool) {
        let mut now_seen = HashMap::new();
        for s in own_children()
            .into_iter()
            .filter(|s| s.state != 'Z' && !tracked(s.pid))
        {
            if !is_prrte_launched(s.pid) {
                continue;
            }
            let Some(t) = start_time(s.pid) else { continue };
            let key = (s.pid, t);
            let first = match self.seen.get(&key) {
                Some(at) => *at,
                None => {
                    warn!(
                        pid = s.pid,
                        "stopping a rank whose PRRTE daemon is gone (orphaned to the agent)"
                    );
                    let _ = kill(Pid::from_raw(s.pid), Signal::SIGTERM);
                    Instant::now()
                }
            };
            if first.elapsed() >= ORPHAN_GRACE {
                let _ = kill(Pid::from_raw(s.pid), Signal::SIGKILL);
            }
            now_seen.insert(key, first);
        }
        self.seen = now_seen;
    }
}

/// Whether `pid`'s environment names a PMIx namespace (PRRTE sets `PMIX_NAMESPACE` for every
/// process it launches).
fn is_prrte_launched(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| {
            env.split(|b| *b == 0)
                .any(|kv| kv.starts_with(b"PMIX_NAMESPACE="))
        })
        .unwrap_or(false)
}
