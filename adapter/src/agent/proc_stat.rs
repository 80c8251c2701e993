//! The process table as `/proc` shows it: a process's parent, group, session and state, its
//! start time (against pid reuse), and the descendants of a process.
//!
//! A process's children are read from its threads' `/proc/PID/task/TID/children` (the kernel's
//! inverse of the parent links), so following a launch's tree costs a few reads per process of
//! the tree, not one per process of the machine: the agent follows its launch every 100 ms, and
//! where pods share a PID namespace (or on a kernel without that file) a whole-table scan would
//! read every process's stat line each time. Without the file the table is scanned.

use std::collections::HashMap;

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
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
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

/// Every process's stat line, from /proc.
pub(crate) fn all_stats() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// The children of `pid` (of all its threads), or None when the kernel has no `children` file
/// (or `pid` is gone).
pub(crate) fn children_of(pid: i32) -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = Vec::new();
    let mut any = false;
    for t in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(t.path().join("children")) else {
            continue;
        };
        any = true;
        out.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok()),
        );
    }
    any.then_some(out)
}

/// Whether this kernel has `/proc/PID/task/TID/children` (checked once, on this process).
fn have_children_files() -> bool {
    static HAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAVE.get_or_init(|| {
        let me = std::process::id();
        std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// All descendants of `root` now (not `root` itself): through the children files where the
/// kernel has them, else by a scan of the whole table.
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    if !have_children_files() {
        return descendants_in(root, &all_stats());
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for k in children_of(p).unwrap_or_default() {
            if k != root && !out.contains(&k) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// The stat lines of this process's children (all its threads'), through the children files
/// where the kernel has them, else by a scan of the whole table.
pub(crate) fn own_children() -> Vec<ProcStat> {
    let me = std::process::id() as i32;
    if !have_children_files() {
        return all_stats().into_iter().filter(|s| s.ppid == me).collect();
    }
    children_of(me)
        .unwrap_or_default()
        .into_iter()
        .filter_map(read_stat)
        .filter(|s| s.ppid == me)
        .collect()
}

/// All descendants of `root` in `stats` (not `root` itself).
pub(crate) fn descendants_in(root: i32, stats: &[ProcStat]) -> Vec<i32> {
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

    /// A tree of real processes: the children files give what the parent links give.
    #[test]
    fn descendants_through_children_files_match_the_table() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "sleep 30 & (sleep 30 & sleep 30; :) & echo ready; wait",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let root = child.id() as i32;
        // the subshell forks its two sleeps after "ready": wait until the tree is complete
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut from_table = descendants_in(root, &all_stats());
        while from_table.len() < 4 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            from_table = descendants_in(root, &all_stats());
        }
        let mut through_files = descendants(root);
        let mine: Vec<i32> = own_children().iter().map(|s| s.pid).collect();
        from_table.sort();
        through_files.sort();
        for p in &from_table {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            from_table.len(),
            4,
            "sleep, subshell and its two sleeps: {from_table:?}"
        );
        assert_eq!(through_files, from_table);
        assert!(mine.contains(&root), "{mine:?} lacks {root}");
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
