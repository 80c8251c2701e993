//! What a network left on the host (namespaces, links, processes, state directories, image
//! containers, nftables tables), and removing it.

use super::host::{
    delete_link, delete_netns, host_lock, list_dir_names, owner_alive, owner_lock_dir,
    owner_lock_path, pods_state_dir, require_root, unmount_below,
};
use super::names::NAME_PREFIX;
use super::procfs::{all_pids, cmdline, comm, describe_process, ns_id};
use anyhow::{bail, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What is left on the host under a name prefix.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    /// Network namespaces (`ip netns list`).
    pub netns: Vec<String>,
    /// Links (bridges, veths) in the host's network namespace.
    pub links: Vec<String>,
    /// Processes whose name starts with the prefix or that live in one of the namespaces
    /// above: (host pid, description).
    pub processes: Vec<(u32, String)>,
    /// Pod state directories under `/run/prrte-k8s-sandbox/pods`.
    pub state_dirs: Vec<PathBuf>,
    /// buildah working containers holding image root filesystems.
    pub containers: Vec<String>,
    /// nftables tables (family bridge) enforcing NetworkPolicies.
    pub nft_tables: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.netns.is_empty()
            && self.links.is_empty()
            && self.processes.is_empty()
            && self.state_dirs.is_empty()
            && self.containers.is_empty()
            && self.nft_tables.is_empty()
    }
}

impl fmt::Display for Leftovers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "nothing left");
        }
        write!(
            f,
            "netns {:?}; links {:?}; processes {:?}; state dirs {:?}; image containers {:?}; nft tables {:?}",
            self.netns,
            self.links,
            self.processes,
            self.state_dirs,
            self.containers,
            self.nft_tables
        )
    }
}

/// Network namespaces, links and pod state directories whose names start with `prefix`, and
/// processes whose name (comm or `argv[0]`) starts with it or that live in such a namespace.
pub fn leftovers(prefix: &str) -> Leftovers {
    let mut netns: Vec<String> = list_dir_names("/run/netns")
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    netns.sort();
    let mut links: Vec<String> = list_dir_names("/sys/class/net")
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    links.sort();
    let mut state_dirs: Vec<PathBuf> = list_dir_names(&pods_state_dir().to_string_lossy())
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .map(|n| pods_state_dir().join(n))
        .collect();
    state_dirs.sort();

    let ns_inodes: HashSet<String> = netns
        .iter()
        .filter_map(|n| fs::metadata(Path::new("/run/netns").join(n)).ok())
        .map(|m| format!("net:[{}]", m.ino()))
        .collect();
    let me = std::process::id();
    let mut processes = Vec::new();
    for pid in all_pids() {
        if pid == me {
            continue;
        }
        let argv0 = cmdline(pid)
            .and_then(|c| {
                let first = c.split(|&b| b == 0).next()?.to_vec();
                let s = String::from_utf8_lossy(&first).into_owned();
                Some(s.rsplit('/').next().unwrap_or("").to_string())
            })
            .unwrap_or_default();
        let named =
            (!prefix.is_empty()) && (comm(pid).starts_with(prefix) || argv0.starts_with(prefix));
        let in_ns = ns_id(pid, "net").is_some_and(|n| ns_inodes.contains(&n));
        if named || in_ns {
            processes.push((pid, describe_process(pid)));
        }
    }
    let (containers, nft_tables) = if prefix.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        (
            crate::images::working_containers(prefix),
            crate::netpol::tables(prefix),
        )
    };
    Leftovers {
        netns,
        links,
        processes,
        state_dirs,
        containers,
        nft_tables,
    }
}

/// Removes what [`leftovers`] finds (for instance after a test run that was killed): kills the
/// processes, deletes links and network namespaces, removes state directories (and what is
/// mounted in them). Returns what was found. Only prefixes starting with `pk8s` are accepted.
pub fn cleanup_leftovers(prefix: &str) -> Result<Leftovers> {
    if !prefix.starts_with(NAME_PREFIX) {
        bail!("refusing to clean up names starting with {prefix:?} (not {NAME_PREFIX}...)");
    }
    require_root()?;
    let found = leftovers(prefix);
    for (pid, _) in &found.processes {
        let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
    let mut errors = Vec::new();
    // Veths first (their peers go with them), bridges last.
    let mut links = found.links.clone();
    links.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for l in &links {
        if let Err(e) = delete_link(l) {
            errors.push(format!("{e:#}"));
        }
    }
    for n in &found.netns {
        if let Err(e) = delete_netns(n) {
            errors.push(format!("{e:#}"));
        }
    }
    for d in &found.state_dirs {
        // The pods' UTS and IPC namespace files and memory volumes are mounted there.
        if let Err(e) = unmount_below(d) {
            errors.push(format!("{e:#}"));
        }
        if let Err(e) = fs::remove_dir_all(d) {
            errors.push(format!("removing {}: {e}", d.display()));
        }
    }
    for c in &found.containers {
        if let Err(e) = crate::images::remove_working_container(c) {
            errors.push(format!("{e:#}"));
        }
    }
    for t in &found.nft_tables {
        if let Err(e) = crate::netpol::delete_table(t) {
            errors.push(format!("{e:#}"));
        }
    }
    if errors.is_empty() {
        Ok(found)
    } else {
        bail!("cleaning up {prefix}: {}", errors.join("; "))
    }
}

/// The network prefixes (`pk8s` and 6 hex digits) that names on the host carry: namespaces,
/// links, pod state directories, nftables tables and owner locks.
fn network_prefixes() -> Vec<String> {
    let mut names: Vec<String> = list_dir_names("/run/netns");
    names.extend(list_dir_names("/sys/class/net"));
    names.extend(list_dir_names(&pods_state_dir().to_string_lossy()));
    names.extend(crate::netpol::tables(NAME_PREFIX));
    names.extend(list_dir_names(&owner_lock_dir().to_string_lossy()));
    let mut prefixes: Vec<String> = names
        .iter()
        .filter_map(|n| network_prefix_of(n))
        .map(str::to_string)
        .collect();
    prefixes.sort();
    prefixes.dedup();
    prefixes
}

/// `pk8s` and the 6 hex digits of a network id at the start of `name`, if it has them.
fn network_prefix_of(name: &str) -> Option<&str> {
    let len = NAME_PREFIX.len() + 6;
    let p = name.get(..len)?;
    (p.starts_with(NAME_PREFIX)
        && p[NAME_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit()))
    .then_some(p)
}

/// Removes what networks whose owner is gone left on the host (a test run or sandbox that was
/// killed before it could tear down): for every network prefix found on the host whose owner
/// lock no live process holds, [`cleanup_leftovers`] and the lock file. Networks of live
/// processes (another test run, a running sandbox) are left alone. Returns what was removed,
/// per prefix.
pub fn cleanup_dead_networks() -> Result<Vec<(String, Leftovers)>> {
    require_root()?;
    // No network is being created meanwhile (creation takes its owner lock under this lock).
    let _guard = host_lock()?;
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for prefix in network_prefixes() {
        if owner_alive(&prefix) {
            continue;
        }
        match cleanup_leftovers(&prefix) {
            Ok(found) => {
                let _ = fs::remove_file(owner_lock_path(&prefix));
                if !found.is_empty() {
                    removed.push((prefix, found));
                }
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if errors.is_empty() {
        Ok(removed)
    } else {
        bail!("{}", errors.join("; "))
    }
}
