//! What /proc tells about processes: namespaces, parents, command lines.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

pub(super) fn ns_id(pid: u32, kind: &str) -> Option<String> {
    fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// A held reference to a PID namespace, named as its `/proc/PID/ns/pid` link reads
/// (`pid:[inode]`). The kernel frees a namespace once no process and no open file refers to it
/// and gives its inode number to the next namespace it creates (of any kind, any pod): only
/// while this is held does the name keep meaning this namespace.
pub(super) struct PidNs {
    id: String,
    _file: File,
}

impl PidNs {
    /// The PID namespace of process `pid` (None when it has gone).
    pub(super) fn of(pid: u32) -> Option<PidNs> {
        use std::os::unix::fs::MetadataExt;
        let file = File::open(format!("/proc/{pid}/ns/pid")).ok()?;
        let ino = file.metadata().ok()?.ino();
        Some(PidNs {
            id: format!("pid:[{ino}]"),
            _file: file,
        })
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }
}

pub(super) fn all_pids() -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Children of `pid`: from /proc/PID/task/PID/children, or by scanning every process's ppid.
pub(super) fn children_of(pid: u32) -> Vec<u32> {
    if let Ok(s) = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        return s
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
    }
    all_pids()
        .into_iter()
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

pub(super) fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

pub(super) fn cmdline(pid: u32) -> Option<Vec<u8>> {
    fs::read(format!("/proc/{pid}/cmdline")).ok()
}

pub(super) fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

pub(super) fn describe_process(pid: u32) -> String {
    let args = cmdline(pid)
        .map(|c| {
            c.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    format!("{} [{}]", comm(pid), args)
}

/// Host pids of every process whose PID namespace is `pidns` (a `pid:[inode]` link text).
pub(super) fn pids_in_pidns(pidns: &str) -> Vec<u32> {
    let mut v: Vec<u32> = all_pids()
        .into_iter()
        .filter(|&p| ns_id(p, "pid").as_deref() == Some(pidns))
        .collect();
    v.sort_unstable();
    v
}

/// The outer tools' stderr, as a suffix for error messages.
pub(super) fn runtime_errors(path: &Path) -> String {
    let t = tail_of(path, 4096);
    if t.is_empty() {
        t
    } else {
        format!("\n(runtime) {t}")
    }
}

pub(super) fn tail_of(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).trim().to_string()
}
