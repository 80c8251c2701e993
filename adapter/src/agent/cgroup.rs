//! A cgroup per launch (see [`super::tracking`]): finding the hierarchy the agent runs in,
//! creating, signalling and removing a launch's cgroup, and removing the ones a killed agent
//! left behind.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tracing::{debug, warn};

use super::proc_stat::read_stat;

/// Where per-launch cgroups are created: a cgroup directory of the agent and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupBase {
    /// The agent's own cgroup directory (new launch cgroups go below it).
    pub dir: PathBuf,
    /// cgroup v2 (`cgroup.kill`, `cgroup.events`) rather than a v1 hierarchy.
    pub v2: bool,
}

/// One mounted cgroup hierarchy from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    pub mount_point: PathBuf,
    /// The path inside the hierarchy that is mounted there (`/` normally).
    pub root: String,
    pub v2: bool,
    /// v1 super options (controllers, `name=...`).
    pub options: Vec<String>,
}

/// The cgroup mounts listed in mountinfo text.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
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
pub(crate) fn parse_proc_cgroup(text: &str) -> Vec<(Option<Vec<String>>, String)> {
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
pub(crate) fn cgroup_candidates(
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

/// Why launches cannot be tracked in cgroups here (the agent then sweeps the process tree).
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoCgroup {
    #[error("cannot read {file}: {source}")]
    Unreadable {
        file: &'static str,
        source: std::io::Error,
    },
    #[error("no cgroup hierarchy is mounted")]
    NotMounted,
    /// Each candidate directory with why a launch cgroup cannot be made there.
    #[error("{}", .0.join("; "))]
    NotWritable(Vec<String>),
}

/// The first candidate where a launch cgroup can be created, entered and removed.
pub(crate) fn find_cgroup_base() -> Result<CgroupBase, NoCgroup> {
    let read = |file: &'static str| {
        std::fs::read_to_string(file).map_err(|source| NoCgroup::Unreadable { file, source })
    };
    let mountinfo = read("/proc/self/mountinfo")?;
    let own = read("/proc/self/cgroup")?;
    let candidates = cgroup_candidates(&parse_mountinfo(&mountinfo), &parse_proc_cgroup(&own));
    if candidates.is_empty() {
        return Err(NoCgroup::NotMounted);
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
    Err(NoCgroup::NotWritable(why))
}

/// How old an empty launch cgroup must be before an agent starting up removes it: a cgroup
/// another agent has just created is empty only until that agent forks prted into it.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(10);

/// Whether `name` is a launch cgroup's name (`prrte-k8s-` and 16 lowercase hex digits, as
/// [`Cgroup::create`] makes them).
pub(crate) fn is_launch_cgroup_name(name: &str) -> bool {
    name.strip_prefix("prrte-k8s-").is_some_and(|h| {
        h.len() == 16
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Removes the launch cgroups below `base` that an agent killed before it could clean up left
/// behind: only directories named like ours, empty (no process, no child cgroup: the kernel
/// refuses to remove any other) and unchanged for `older_than`. Returns what was removed.
pub(crate) fn remove_stale_cgroups(base: &CgroupBase, older_than: Duration) -> Vec<PathBuf> {
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
pub(crate) struct Cgroup {
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
    pub(crate) fn enter_self(&self) -> std::io::Result<()> {
        Self::enter(&self.dir, 0)
    }

    /// Moves the calling process back to its own cgroup.
    pub(crate) fn leave_self(&self) {
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
    pub(crate) fn populated(&self) -> bool {
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
    pub(crate) fn remove_now(&self) -> std::io::Result<()> {
        std::fs::remove_dir(&self.dir)
    }

    /// Removes the cgroup once its last process is reaped (in the background, bounded).
    pub(crate) fn remove_eventually(&self) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
