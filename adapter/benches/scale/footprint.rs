//! `footprint`: the RSS of one agent, idle and while a launch runs.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::host::profile;
use crate::support::{agent_bin, secret_file, start_agents_of, stub_prted};
use anyhow::{bail, Result};
use prrte_k8s::launch::{LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher};
use serde_json::{json, Value};

fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// `/proc/PID/smaps_rollup` in KiB: Rss, Pss, Private (clean + dirty), Anonymous.
#[derive(Debug, Clone, Copy, Default)]
struct Mem {
    rss: u64,
    pss: u64,
    private: u64,
    anon: u64,
}

fn smaps_rollup(pid: u32) -> Mem {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let get = |key: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Mem {
        rss: get("Rss"),
        pss: get("Pss"),
        private: get("Private_Clean") + get("Private_Dirty"),
        anon: get("Anonymous"),
    }
}

fn mem_json(m: Mem) -> Value {
    json!({"rss_kib": m.rss, "pss_kib": m.pss, "private_kib": m.private, "anonymous_kib": m.anon})
}

/// Where a process's RSS is, in KiB, by mapping: the executable by permission (`r-xp` = code,
/// `r--p` = read-only data, relocation tables and the relocated RELRO data, `rw-p` = data), the
/// shared libraries, the heap, and other anonymous memory (thread stacks, the allocator's
/// arenas).
fn rss_by_mapping(pid: u32) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first().is_some_and(|a| {
            a.contains('-') && a.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        }) {
            let perm = f.get(1).copied().unwrap_or("");
            let path = f.get(5).copied().unwrap_or("");
            current = if path == exe {
                format!("agent binary {perm}")
            } else if path.starts_with('/') {
                let name = path.rsplit('/').next().unwrap_or(path);
                format!("{} {perm}", name.split(".so").next().unwrap_or(name))
            } else if path.is_empty() {
                "anonymous (stacks, allocator arenas)".into()
            } else {
                path.to_string()
            };
        } else if let (Some(&"Rss:"), Some(kib)) = (f.first(), f.get(1)) {
            let kib: u64 = kib.parse().unwrap_or(0);
            match out.iter_mut().find(|(k, _)| *k == current) {
                Some(e) => e.1 += kib,
                None => out.push((current.clone(), kib)),
            }
        }
    }
    out.retain(|(_, k)| *k > 0);
    out.sort_by_key(|e| std::cmp::Reverse(e.1));
    out
}

pub(crate) fn bench_footprint(agent: Option<&Path>) -> Result<Value> {
    let bin = agent.map_or_else(agent_bin, Path::to_path_buf);
    let build = match agent {
        None => format!("{} build of prrte-k8s-agent", profile()),
        Some(p) => format!("prrte-k8s-agent {}", p.display()),
    };
    println!("## Agent footprint ({build})\n");
    let dir = tempfile::Builder::new()
        .prefix("prrte-k8s-footprint-")
        .tempdir()?;
    let (secret_path, secret) = secret_file(dir.path())?;
    let prted = stub_prted(dir.path(), "exec sleep 1")?;
    let agents = start_agents_of(&bin, 1, dir.path(), &secret_path, &prted)?;
    let pid = agents.pids[0];
    std::thread::sleep(Duration::from_millis(300));
    let idle_rss = status_kib(pid, "VmRSS").unwrap_or(0);
    let idle_hwm = status_kib(pid, "VmHWM").unwrap_or(0);
    let idle = smaps_rollup(pid);
    let idle_threads = status_kib(pid, "Threads").unwrap_or(0);
    let idle_parts = rss_by_mapping(pid);
    // A launch whose prted lives 1 s: RSS while it runs, then the peak.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let launcher = Launcher::start(
        vec![(
            LaunchTarget {
                id: 1,
                pod: "pod-0".into(),
                addr: agents.addrs[0],
            },
            LaunchRequest::default(),
        )],
        LaunchOptions {
            secret: Some(secret),
            ..Default::default()
        },
        Box::new(move |e| s2.lock().unwrap().push(e)),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, LaunchEvent::Started { .. }))
    {
        if Instant::now() > deadline {
            bail!("the launch did not start: {:?}", seen.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let during_rss = status_kib(pid, "VmRSS").unwrap_or(0);
    let during = smaps_rollup(pid);
    while !seen
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, LaunchEvent::Exited { .. }))
    {
        if Instant::now() > deadline {
            bail!("the launch did not end: {:?}", seen.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let hwm = status_kib(pid, "VmHWM").unwrap_or(0);
    drop(launcher);
    std::thread::sleep(Duration::from_millis(300));
    let after_rss = status_kib(pid, "VmRSS").unwrap_or(0);
    let after = smaps_rollup(pid);
    let mib = |k: u64| k as f64 / 1024.0;
    let m = |k: u64| format!("{:.2} MiB", mib(k));
    println!("| state | RSS | PSS | private | anonymous |\n| --- | ---: | ---: | ---: | ---: |");
    for (state, v) in [
        ("idle", idle),
        ("prted running", during),
        ("after the launch", after),
    ] {
        println!(
            "| {state} | {} | {} | {} | {} |",
            m(v.rss),
            m(v.pss),
            m(v.private),
            m(v.anon)
        );
    }
    println!(
        "\nVmHWM: idle {}, through the launch {}; threads when idle: {idle_threads}.",
        m(idle_hwm),
        m(hwm)
    );
    println!("Idle RSS by mapping (the binary's pages are shared with every process running it;");
    println!("its relocated RELRO data and all anonymous memory are private):\n");
    println!("| mapping | RSS |\n| --- | ---: |");
    for (k, v) in &idle_parts {
        println!("| {k} | {v} KiB |");
    }
    Ok(json!({
        "profile": profile(),
        "agent": bin.display().to_string(),
        "idle_rss_kib": idle_rss, "idle_hwm_kib": idle_hwm,
        "during_launch_rss_kib": during_rss, "launch_hwm_kib": hwm, "after_rss_kib": after_rss,
        "idle": mem_json(idle), "during_launch": mem_json(during), "after_launch": mem_json(after),
        "idle_threads": idle_threads,
        "idle_rss_by_mapping_kib": idle_parts.iter().map(|(k, v)| json!({"mapping": k, "kib": v})).collect::<Vec<_>>(),
    }))
}
