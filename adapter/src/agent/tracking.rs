//! Tracking every descendant of a launch, including processes that left prted's process group
//! and session (a daemon that forks and calls `setsid()`).
//!
//! * **A cgroup per launch** where the machine allows it: the agent finds the cgroup hierarchy it
//!   runs in (cgroup v2, else a v1 hierarchy with the `pids` or `freezer` controller, else the
//!   named `systemd` one), creates `prrte-k8s-<random>` below its own cgroup for each launch and
//!   starts prted inside it. Membership is inherited by every fork, whatever the session or
//!   process group, so `cgroup.procs` lists exactly what the launch started; stopping it signals
//!   every member (cgroup v2's `cgroup.kill` for SIGKILL) until the cgroup is empty, then removes
//!   it. The agent moves itself into the new cgroup just for the `fork` (under the reaper's
//!   spawn lock) and back, so no process of the launch ever runs outside it.
//! * **A process-tree sweep** otherwise (no writable cgroup, or `--cgroup off`): the agent
//!   records, every [`SCAN_INTERVAL`] while the launch runs, every descendant of prted (by
//!   `/proc/PID/stat` parent links, with the start time against pid reuse), and when stopping it
//!   adds the current descendants and the agent's untracked children that belong to the launch:
//!   in the agent's own session, recorded before, or in a session whose leader is gone or was
//!   recorded (a double-forking daemon); a child in a session whose leader is alive and not the
//!   launch's (a `kubectl exec` shell's orphan) is left alone.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tracing::{debug, info, warn};

/// One line of `/proc/PID/stat`, the fields the agent needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
}

/// Parses `/proc/PID/stat` text (the command name may contain spaces and parentheses).
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let pid = text.split_whitespace().next()?.parse().ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
    })
}

/// Reads `/proc/PID/stat`.
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// How often the sweep fallback records the descendants of a running launch.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// Where per-launch cgroups are created: a cgroup directory of the agent and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupBase {
    /// The agent's own cgroup directory (new launch cgroups go below it).
    pub dir: PathBuf,
    /// cgroup v2 (`cgroup.kill`, `cgroup.events`) rather than a v1 hierarchy.
    pub v2: bool,
}

/// How the agent tracks the processes of a launch.
#[derive(Debug, Clone)]
pub enum Tracking {
    Cgroup(CgroupBase),
    Sweep,
}

impl Tracking {
    /// Cgroups if `enabled` and a writable hierarchy is found, else the sweep; logs the choice.
    pub fn detect(enabled: bool) -> Tracking {
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

/// One mounted cgroup hierarchy from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub mount_point: PathBuf,
    /// The path inside the hierarchy that is mounted there (`/` normally).
    pub root: String,
    pub v2: bool,
    /// v1 super options (controllers, `name=...`).
    pub options: Vec<String>,
}

/// The cgroup mounts listed in mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let v2 = match r[0] {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        out.push(CgroupMount {
            mount_point: PathBuf::from(unescape_mount(l[4])),
            root: unescape_mount(l[3]),
            v2,
            options: r[2].split(',').map(str::to_owned).collect(),
        });
    }
    out
}

fn unescape_mount(s: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The agent's cgroup path in each hierarchy from `/proc/self/cgroup` text: `(None, path)` for
/// v2, `(Some(controllers), path)` for v1.
pub fn parse_proc_cgroup(text: &str) -> Vec<(Option<Vec<String>>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let id = f.next()?;
            let ctrl = f.next()?;
            let path = f.next()?.to_owned();
            if id == "0" && ctrl.is_empty() {
                Some((None, path))
            } else {
                Some((Some(ctrl.split(',').map(str::to_owned).collect()), path))
            }
        })
        .collect()
}

/// Candidate directories for launch cgroups, best first.
pub fn cgroup_candidates(
    mounts: &[CgroupMount],
    own: &[(Option<Vec<String>>, String)],
) -> Vec<CgroupBase> {
    let mut out = Vec::new();
    let join = |m: &CgroupMount, path: &str| -> Option<PathBuf> {
        // The mount shows the hierarchy from m.root; our path must lie below it.
        let rel = path
            .strip_prefix(m.root.trim_end_matches('/'))
            .unwrap_or(path);
        let rel = rel.trim_start_matches('/');
        if path.contains("/..") || rel.split('/').any(|c| c == "..") {
            return None;
        }
        Some(if rel.is_empty() {
            m.mount_point.clone()
        } else {
            m.mount_point.join(rel)
        })
    };
    if let Some((_, path)) = own.iter().find(|(c, _)| c.is_none()) {
        for m in mounts.iter().filter(|m| m.v2) {
            if let Some(dir) = join(m, path) {
                out.push(CgroupBase { dir, v2: true });
            }
        }
    }
    for wanted in ["pids", "freezer", "name=systemd"] {
        for m in mounts
            .iter()
            .filter(|m| !m.v2 && m.options.iter().any(|o| o == wanted))
        {
            if let Some((_, path)) = own
                .iter()
                .find(|(c, _)| c.as_ref().is_some_and(|c| c.iter().any(|x| x == wanted)))
            {
                if let Some(dir) = join(m, path) {
                    out.push(CgroupBase { dir, v2: false });
                }
            }
        }
    }
    out
}

/// The first candidate where a launch cgroup can be created, entered and removed.
pub fn find_cgroup_base() -> Result<CgroupBase, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let candidates = cgroup_candidates(&parse_mountinfo(&mountinfo), &parse_proc_cgroup(&own));
    if candidates.is_empty() {
        return Err("no cgroup hierarchy is mounted".into());
    }
    let mut why = Vec::new();
    for base in candidates {
        let usable = Cgroup::create(&base).and_then(|cg| {
            let writable = [Cgroup::procs_file(&cg.dir), Cgroup::procs_file(&base.dir)]
                .iter()
                .try_for_each(|f| std::fs::OpenOptions::new().write(true).open(f).map(drop));
            cg.remove_now()?;
            writable
        });
        match usable {
            Ok(()) => return Ok(base),
            Err(e) => why.push(format!("{}: {e}", base.dir.display())),
        }
    }
    Err(why.join("; "))
}

/// How old an empty launch cgroup must be before an agent starting up removes it: a cgroup
/// another agent has just created is empty only until that agent forks prted into it.
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// Whether `name` is a launch cgroup's name (`prrte-k8s-` and 16 lowercase hex digits, as
/// [`Cgroup::create`] makes them).
pub fn is_launch_cgroup_name(name: &str) -> bool {
    name.strip_prefix("prrte-k8s-").is_some_and(|h| {
        h.len() == 16
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Removes the launch cgroups below `base` that an agent killed before it could clean up left
/// behind: only directories named like ours, empty (no process, no child cgroup: the kernel
/// refuses to remove any other) and unchanged for `older_than`. Returns what was removed.
pub fn remove_stale_cgroups(base: &CgroupBase, older_than: Duration) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(&base.dir) else {
        return Vec::new();
    };
    let now = std::time::SystemTime::now();
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(is_launch_cgroup_name) {
            continue;
        }
        let dir = e.path();
        let old = e
            .metadata()
            .ok()
            .filter(|m| m.is_dir())
            .and_then(|m| m.modified().ok())
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age >= older_than);
        let empty =
            std::fs::read_to_string(Cgroup::procs_file(&dir)).is_ok_and(|t| t.trim().is_empty());
        if old && empty && std::fs::remove_dir(&dir).is_ok() {
            debug!(cgroup = %dir.display(), "removed a stale launch cgroup");
            removed.push(dir);
        }
    }
    removed
}

/// The cgroup of one launch.
#[derive(Debug)]
pub struct Cgroup {
    pub dir: PathBuf,
    pub base: CgroupBase,
}

impl Cgroup {
    /// Creates a fresh, uniquely named cgroup below `base`.
    pub fn create(base: &CgroupBase) -> std::io::Result<Cgroup> {
        let name = format!(
            "prrte-k8s-{}",
            hex::encode(&crate::protocol::new_nonce()[..8])
        );
        let dir = base.dir.join(name);
        std::fs::create_dir(&dir)?;
        Ok(Cgroup {
            dir,
            base: base.clone(),
        })
    }

    fn procs_file(dir: &Path) -> PathBuf {
        dir.join("cgroup.procs")
    }

    /// Moves process `pid` (0: the calling process) into the cgroup at `dir`.
    fn enter(dir: &Path, pid: u32) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(Self::procs_file(dir))?;
        f.write_all(pid.to_string().as_bytes())
    }

    /// Moves the calling process (all its threads) into this cgroup; a child forked now starts
    /// inside it. The caller must make sure no other fork happens until [`leave_self`](Self::leave_self).
    pub fn enter_self(&self) -> std::io::Result<()> {
        Self::enter(&self.dir, 0)
    }

    /// Moves the calling process back to its own cgroup.
    pub fn leave_self(&self) {
        if let Err(e) = Self::enter(&self.base.dir, 0) {
            warn!(cgroup = %self.base.dir.display(), error = %e, "cannot move the agent back to its own cgroup");
        }
    }

    /// The pids in the cgroup (as seen from this PID namespace; 0 for processes outside it).
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(Self::procs_file(&self.dir))
            .map(|t| {
                t.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .filter(|p| *p > 0)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether any live (non-zombie) process is left.
    pub fn populated(&self) -> bool {
        self.pids()
            .into_iter()
            .any(|p| read_stat(p).is_some_and(|s| s.state != 'Z'))
    }

    /// Sends `sig` to every member; for SIGKILL on cgroup v2, through `cgroup.kill` (atomic, no
    /// fork can escape it).
    pub fn signal(&self, sig: Signal) {
        let me = std::process::id() as i32;
        if self.pids().contains(&me) {
            // Moving back failed earlier: never signal the agent itself.
            self.leave_self();
        }
        let agent_inside = self.pids().contains(&me);
        if sig == Signal::SIGKILL && self.base.v2 && !agent_inside {
            match std::fs::write(self.dir.join("cgroup.kill"), "1") {
                Ok(()) => return,
                Err(e) => {
                    debug!(cgroup = %self.dir.display(), error = %e, "cgroup.kill failed; signalling each member")
                }
            }
        }
        // Repeat while new members appear (a fork racing the signal).
        for _ in 0..10 {
            let pids = self.pids();
            let mut fresh = false;
            for p in pids.into_iter().filter(|p| *p != me) {
                match kill(Pid::from_raw(p), sig) {
                    Ok(()) => fresh = true,
                    Err(Errno::ESRCH) => {}
                    Err(e) => debug!(pid = p, error = %e, "cannot signal a process of the launch"),
                }
            }
            if !fresh || sig != Signal::SIGKILL {
                break;
            }
            if !self.populated() {
                break;
            }
        }
    }

    /// Removes the (empty) cgroup directory.
    pub fn remove_now(&self) -> std::io::Result<()> {
        std::fs::remove_dir(&self.dir)
    }

    /// Removes the cgroup once its last process is reaped (in the background, bounded).
    pub fn remove_eventually(&self) {
        if self.remove_now().is_ok() {
            return;
        }
        let dir = self.dir.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => return,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            warn!(cgroup = %dir.display(), "cannot remove the launch's cgroup (processes still in it)");
        });
    }
}

/// Every process's stat line, from /proc.
pub fn all_stats() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// All descendants of `root` in `stats` (not `root` itself).
pub fn descendants_in(root: i32, stats: &[ProcStat]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for s in stats {
        children.entry(s.ppid).or_default().push(s.pid);
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        if let Some(c) = children.get(&p) {
            for &k in c {
                if !out.contains(&k) && k != root {
                    out.push(k);
                    todo.push(k);
                }
            }
        }
    }
    out
}

/// A process's start time (clock ticks since boot), to tell a pid from a later reuse of it.
pub fn start_time(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    // fields after the command: state(3) ... starttime is field 22, i.e. index 19 here
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Descendants of a launch recorded by the sweep fallback: pid → start time.
#[derive(Debug, Default, Clone)]
pub struct Known(Arc<Mutex<HashMap<i32, u64>>>);

impl Known {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the current descendants of `root` (and `root`).
    pub fn record(&self, root: i32) {
        let stats = all_stats();
        let mut known = self.lock();
        for p in std::iter::once(root).chain(descendants_in(root, &stats)) {
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
pub fn recorded_targets(root: i32, known: &Known) -> Vec<i32> {
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
pub fn sweep_targets(root: i32, known: &Known, tracked: impl Fn(i32) -> bool) -> Vec<i32> {
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
pub struct OrphanedRanks {
    /// pid, start time → when it was sent SIGTERM.
    seen: HashMap<(i32, u64), Instant>,
}

impl OrphanedRanks {
    /// One pass: signal the agent's untracked children that are PRRTE-launched processes.
    pub fn sweep(&mut self, tracked: impl Fn(i32) -> bool) {
        let me = std::process::id() as i32;
        let mut now_seen = HashMap::new();
        for s in all_stats()
            .into_iter()
            .filter(|s| s.ppid == me && s.state != 'Z' && !tracked(s.pid))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse() {
        let s = parse_stat("1234 (we ird) name)) S 1 1234 77 0 -1 4194560 0 0").unwrap();
        assert_eq!(
            s,
            ProcStat {
                pid: 1234,
                state: 'S',
                ppid: 1,
                pgrp: 1234,
                session: 77
            }
        );
        assert!(parse_stat("garbage").is_none());
        let me = read_stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
    }

    const MOUNTINFO: &str = "\
25 30 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup rw shared:9 - tmpfs tmpfs rw,mode=755
33 31 0:28 / /sys/fs/cgroup/pids rw shared:10 - cgroup cgroup rw,pids
34 31 0:29 / /sys/fs/cgroup/freezer rw shared:11 - cgroup cgroup rw,freezer
35 31 0:30 / /sys/fs/cgroup/unified rw shared:12 - cgroup2 cgroup2 rw
36 31 0:31 / /sys/fs/cgroup/systemd rw shared:13 - cgroup cgroup rw,name=systemd
";

    #[test]
    fn launch_cgroup_names() {
        assert!(is_launch_cgroup_name("prrte-k8s-05a048a94abb0e9e"));
        for other in [
            "prrte-k8s-05a048a94abb0e9",
            "prrte-k8s-05a048a94abb0e9e0",
            "prrte-k8s-05A048A94ABB0E9E",
            "prrte-k8s-test-12345",
            "system.slice",
            "xprrte-k8s-05a048a94abb0e9e",
        ] {
            assert!(!is_launch_cgroup_name(other), "{other}");
        }
    }

    #[test]
    fn mountinfo_and_own_cgroup_give_candidates_in_order() {
        let mounts = parse_mountinfo(MOUNTINFO);
        assert_eq!(mounts.len(), 4);
        let own = parse_proc_cgroup("9:name=systemd:/\n8:pids:/a/b\n6:freezer:/\n0::/x\n");
        let c = cgroup_candidates(&mounts, &own);
        assert_eq!(
            c,
            vec![
                CgroupBase {
                    dir: "/sys/fs/cgroup/unified/x".into(),
                    v2: true
                },
                CgroupBase {
                    dir: "/sys/fs/cgroup/pids/a/b".into(),
                    v2: false
                },
                CgroupBase {
                    dir: "/sys/fs/cgroup/freezer".into(),
                    v2: false
                },
                CgroupBase {
                    dir: "/sys/fs/cgroup/systemd".into(),
                    v2: false
                },
            ]
        );
        // A v2-only system.
        let m2 = parse_mountinfo("30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
        let c2 = cgroup_candidates(&m2, &parse_proc_cgroup("0::/kubepods/pod1/c1\n"));
        assert_eq!(
            c2,
            vec![CgroupBase {
                dir: "/sys/fs/cgroup/kubepods/pod1/c1".into(),
                v2: true
            }]
        );
        // A cgroup namespace root mounted: paths are relative to it.
        let m3 =
            parse_mountinfo("30 1 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        let c3 = cgroup_candidates(&m3, &parse_proc_cgroup("0::/kubepods/pod1/c1\n"));
        assert_eq!(c3[0].dir, PathBuf::from("/sys/fs/cgroup/c1"));
        // Nothing mounted: no candidate.
        assert!(cgroup_candidates(&[], &own).is_empty());
    }

    #[test]
    fn descendants_follow_parent_links() {
        let st = |pid, ppid| ProcStat {
            pid,
            state: 'S',
            ppid,
            pgrp: pid,
            session: pid,
        };
        let stats = vec![st(10, 1), st(11, 10), st(12, 11), st(13, 1), st(14, 12)];
        let mut d = descendants_in(10, &stats);
        d.sort();
        assert_eq!(d, vec![11, 12, 14]);
        assert!(descendants_in(13, &stats).is_empty());
    }
}
