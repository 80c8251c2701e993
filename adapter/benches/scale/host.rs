//! The machine and this process as the benchmarks see them: the built binaries, the build
//! profile, the load, threads' CPU and scheduling delay.

use std::path::PathBuf;

/// A binary of this package, built next to the bench (cargo builds them for benches).
pub(crate) fn bin(name: &str) -> PathBuf {
    match name {
        "prrte-k8s" => PathBuf::from(env!("CARGO_BIN_EXE_prrte-k8s")),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_prrte-k8s-agent")),
    }
}

pub(crate) fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// On-CPU seconds of this process's threads named `name` (from /proc schedstat, ns precision).
pub(crate) fn threads_cpu(name: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .sum::<f64>()
        / 1e9
}

/// (on-CPU, waiting-for-a-CPU) seconds of the calling thread so far (/proc schedstat).
pub(crate) fn thread_sched() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s
        .split_whitespace()
        .map(|v| v.parse::<f64>().unwrap_or(0.0) / 1e9);
    (f.next().unwrap_or(0.0), f.next().unwrap_or(0.0))
}

/// Name of the threads that run the sandbox API server in the discovery benchmark.
pub(crate) const SERVER_THREADS: &str = "sandbox-api";
