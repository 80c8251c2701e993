//! The process table as `/proc` shows it: a process's parent, group, session and state, its
//! start time (against pid reuse), and the descendants of a process.

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
