//! What the figures were measured on and with (profile, machine, executables), and the CPU
//! time of a process tree, from /proc.

use sandbox::harness;

/// The build profile of this executable, hence of the agent and components it runs (both are
/// taken from its own target directory).
pub const PROFILE: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// The 1-minute load average (/proc/loadavg), NaN when unreadable.
pub fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// What the figures were measured on: cores, CPU model, kernel.
pub fn machine() -> serde_json::Value {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    serde_json::json!({"cores": cores, "cpu": cpu, "kernel": kernel})
}

/// The executables and library this run measures (all of the profile `PROFILE`).
pub fn artifacts() -> serde_json::Value {
    let dir = harness::target_dir();
    serde_json::json!({
        "bench": std::env::current_exe().ok(),
        "agent": dir.join("prrte-k8s-agent"),
        "components": dir.join("libprrte_k8s_cabi.so"),
    })
}

/// utime, stime, cutime, cstime (seconds) and ppid of a process.
fn cpu_and_parent(pid: u32) -> Option<(f64, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let cpu: f64 = f
        .get(11..15)?
        .iter()
        .filter_map(|x| x.parse::<f64>().ok())
        .sum();
    Some((cpu / tick, f.get(1)?.parse().ok()?))
}

/// CPU seconds a process used itself (and what it reaped).
pub fn own_cpu(pid: u32) -> Option<f64> {
    cpu_and_parent(pid).map(|c| c.0)
}

/// CPU seconds of `root` and its live descendants (with what they reaped), leaving out prted
/// and everything under it (the daemons' own work is not the launcher's).
pub fn tree_cpu(root: u32) -> f64 {
    let mut procs: Vec<(u32, u32, f64, bool)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some((cpu, ppid)) = cpu_and_parent(pid) {
                let prted = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim_end() == "prted");
                procs.push((pid, ppid, cpu, prted));
            }
        }
    }
    let mut total = procs.iter().find(|p| p.0 == root).map_or(0.0, |p| p.2);
    let mut todo = vec![root];
    while let Some(parent) = todo.pop() {
        for &(pid, ppid, cpu, prted) in &procs {
            if ppid == parent && !prted {
                total += cpu;
                todo.push(pid);
            }
        }
    }
    total
}
