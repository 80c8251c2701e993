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
//!   records, every `SCAN_INTERVAL` while the launch runs, every descendant of prted (by the
//!   kernel's children lists, `/proc/PID/task/TID/children`, with the start time against pid
//!   reuse; a kernel without them: by the parent links of the whole table), and when stopping it
//!   adds the current descendants and the agent's untracked children that belong to the launch:
//!   in the agent's own session, recorded before, or in a session whose leader is gone or was
//!   recorded (a double-forking daemon), or in a session or process group of a process found to
//!   be the launch's, to a fixed point (a session made and left between two recordings: its
//!   leader, orphaned to the agent, is the launch's, so are the orphans in its session); every
//!   session and process group seen among the launch's processes is recorded too. A child in a
//!   session whose leader is alive and not the launch's (a `kubectl exec` shell's orphan) is left
//!   alone. A process can leave neither its session for one it did not create nor the agent's
//!   process tree (the agent is the pod's PID 1 or a child subreaper), so nothing of the launch
//!   escapes this.

use std::collections::{HashMap, HashSet};
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
pub(crate) enum Tracking {
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
}

/// The recorded descendants of a job and the task recording them.
pub struct Tree {
    pub(crate) known: Known,
    scanner: Option<tokio::task::JoinHandle<()>>,
}

impl Tree {
    /// Records the descendants of `pid` every `SCAN_INTERVAL` (needs a tokio runtime; the
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

/// Descendants of a launch recorded by the sweep fallback: pid → start time, and the sessions
/// and process groups they were seen in.
#[derive(Debug, Default, Clone)]
pub(crate) struct Known(Arc<Mutex<Recorded>>);

#[derive(Debug, Default)]
struct Recorded {
    procs: HashMap<i32, u64>,
    /// Session ids and process group ids of the launch's processes (the agent's own excluded).
    groups: HashSet<i32>,
}

impl Known {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the current descendants of `root` (and `root`), their sessions and groups.
    pub fn record(&self, root: i32) {
        let now = descendants(root);
        let mine = read_stat(std::process::id() as i32);
        let mut known = self.lock();
        for p in std::iter::once(root).chain(now) {
            if let Some(t) = start_time(p) {
                known.procs.insert(p, t);
            }
            if let Some(s) = read_stat(p) {
                known.note_groups(&s, mine.as_ref());
            }
        }
        // Forget what is gone (its pid may be reused).
        known.procs.retain(|p, t| start_time(*p) == Some(*t));
    }

    /// Whether `pid` is the process recorded under that pid.
    pub fn contains(&self, pid: i32) -> bool {
        self.lock()
            .procs
            .get(&pid)
            .is_some_and(|t| start_time(pid) == Some(*t))
    }

    /// Whether a process of the launch was seen in session or process group `id`.
    pub(crate) fn has_group(&self, id: i32) -> bool {
        self.lock().groups.contains(&id)
    }

    /// Records the session and process group of `s`, a process of the launch.
    fn note(&self, s: &ProcStat, mine: Option<&ProcStat>) {
        self.lock().note_groups(s, mine);
    }

    /// Recorded pids still alive.
    pub fn alive(&self) -> Vec<i32> {
        let known = self.lock();
        known
            .procs
            .iter()
            .filter(|(p, t)| {
                start_time(**p) == Some(**t) && read_stat(**p).is_some_and(|s| s.state != 'Z')
            })
            .map(|(p, _)| *p)
            .collect()
    }
}

impl Recorded {
    fn note_groups(&mut self, s: &ProcStat, mine: Option<&ProcStat>) {
        let theirs = |id: i32| id > 0 && mine.is_none_or(|m| id != m.session && id != m.pgrp);
        for id in [s.session, s.pgrp] {
            if theirs(id) {
                self.groups.insert(id);
            }
        }
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
    let mine = by_pid.get(&me).copied();
    let candidates: Vec<&ProcStat> = stats
        .iter()
        .filter(|s| s.ppid == me && s.state != 'Z' && !tracked(s.pid))
        .collect();
    // To a fixed point: a child of the agent in a session or process group of a process of the
    // launch is the launch's, and brings its own descendants' sessions and groups.
    loop {
        for p in &out {
            if let Some(s) = by_pid.get(p) {
                known.note(s, mine);
            }
        }
        let before = out.len();
        for s in &candidates {
            if out.contains(&s.pid) {
                continue;
            }
            let leader_alive =
                s.session != s.pid && by_pid.get(&s.session).is_some_and(|l| l.state != 'Z');
            let ours = Some(s.session) == my_session
                || known.contains(s.pid)
                || known.contains(s.session)
                || known.has_group(s.session)
                || known.has_group(s.pgrp)
                || !leader_alive;
            if ours {
                add(s.pid, &mut out);
                for d in descendants_in(s.pid, &stats) {
                    add(d, &mut out);
                }
            }
        }
        if out.len() == before {
            break;
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
