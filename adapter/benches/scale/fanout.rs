//! `fanout`: the launcher against N real agents on loopback addresses, each with a stub prted:
//! wall time and the launcher's CPU time per daemon, and where the CPU went (`--perf`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::host::{load, profile};
use crate::stats::{median, stat, stat_json};
use crate::support::{self, fanout_round, secret_file, start_agents, Agents};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// (busy, total) jiffies of all CPUs, from /proc/stat.
fn machine_jiffies() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = f.iter().take(8).sum();
    // idle + iowait
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The fan-out's target: every answer within 1 s at 1,024 agents.
const FANOUT_TARGET_MS: f64 = 1000.0;

/// Runs `perf record -a` around one fan-out round; returns (lines by process, top symbols).
fn perf_round(agents: &Agents, secret: &[u8], dir: &Path) -> Result<(Vec<String>, Vec<String>)> {
    use nix::sys::signal::{kill, Signal};
    let data = dir.join("perf.data");
    let mut perf = Command::new("perf")
        .args(["record", "-a", "-F", "999", "-o"])
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("running perf (install linux-perf)")?;
    std::thread::sleep(Duration::from_millis(500));
    let round = support::fanout_round(agents, secret, Duration::from_secs(60));
    let _ = kill(nix::unistd::Pid::from_raw(perf.id() as i32), Signal::SIGINT);
    perf.wait()?;
    round?;
    let report = |sort: &str, n: usize| -> Result<Vec<String>> {
        let out = Command::new("perf")
            .args([
                "report",
                "--stdio",
                "--no-children",
                "-g",
                "none",
                "--sort",
                sort,
                "-i",
            ])
            .arg(&data)
            .stderr(Stdio::null())
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .take(n)
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect())
    };
    Ok((report("comm", 8)?, report("comm,sym", 15)?))
}

pub(crate) fn bench_fanout(sizes: &[usize], runs: usize, perf: bool) -> Result<Value> {
    prrte_k8s::agent::limits::raise_nofile_limit();
    println!(
        "## Fan-out: launcher -> N agents (loopback addresses), {} build; load before: {}",
        profile(),
        load()
    );
    println!(
        "Each agent: a real prrte-k8s-agent process (--cgroup off), HMAC-authenticated launch,"
    );
    println!("stub prted = /bin/true (exits at once). Launcher = prrte_k8s::launch::Launcher (what plm k8s runs).\n");
    println!("| agents | all started, ms | all exited, ms | launcher CPU, ms | launcher CPU per daemon, µs | agents' CPU per daemon, µs |");
    println!("| ---: | --- | --- | --- | --- | --- |");
    let mut rows = Vec::new();
    let mut bounds = Vec::new();
    let mut profile_lines = None;
    for &n in sizes {
        let dir = tempfile::Builder::new()
            .prefix("prrte-k8s-fanout-")
            .tempdir()?;
        let (secret_path, secret) = secret_file(dir.path())?;
        let agents = start_agents(n, dir.path(), &secret_path, Path::new("/bin/true"))?;
        // The harness must be able to fail: with another secret, every agent refuses.
        let mut wrong = secret.clone();
        wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
        let o = support::run_round(&agents, &wrong, Duration::from_secs(60));
        let refused = o
            .failed
            .iter()
            .filter(|r| r.contains("authentication failed"))
            .count();
        if refused != n || o.started != 0 {
            bail!(
                "authentication check: with a wrong secret {refused} of {n} agents refused and {} started; first: {:?}",
                o.started,
                o.failed.first()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
        let mut started = Vec::new();
        let mut exited = Vec::new();
        let mut cpu = Vec::new();
        let mut acpu = Vec::new();
        let mut machine = Vec::new();
        for run in 0..=runs {
            let m0 = machine_jiffies();
            let r = fanout_round(&agents, &secret, Duration::from_secs(60))?;
            let m1 = machine_jiffies();
            if run > 0 {
                machine.push(100.0 * (m1.0 - m0.0) as f64 / ((m1.1 - m0.1).max(1)) as f64);
                started.push(r.all_started * 1e3);
                exited.push(r.all_exited * 1e3);
                cpu.push(r.cpu * 1e3);
                acpu.push(r.agents_cpu * 1e6 / n as f64);
            }
            // The agents free their slot when the launcher's connection ends.
            std::thread::sleep(Duration::from_millis(200));
        }
        let per: Vec<f64> = cpu.iter().map(|c| c * 1e3 / n as f64).collect();
        println!(
            "| {n} | {} | {} | {} | {} | {} |",
            stat(&started, 1),
            stat(&exited, 1),
            stat(&cpu, 1),
            stat(&per, 0),
            stat(&acpu, 0),
        );
        // What bounds it: the CPU the round needs against the cores it has.
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
        let need_ms: Vec<f64> = cpu
            .iter()
            .zip(&acpu)
            .map(|(c, a)| c + a * n as f64 / 1e3)
            .collect();
        let busy: Vec<f64> = need_ms
            .iter()
            .zip(&exited)
            .map(|(need, wall)| 100.0 * need / (wall * cores))
            .collect();
        let bound = format!(
            "{n} agents: the round needs {} ms of CPU (launcher + agents + stub prteds) = {:.0} ms on {cores} cores at best; ours kept {}% of the cores busy, the whole machine {}%",
            stat(&need_ms, 0),
            median(&need_ms) / cores,
            stat(&busy, 0),
            stat(&machine, 0),
        );
        bounds.push(bound);
        rows.push(json!({
            "agents": n,
            "cpu_needed_ms": stat_json(&need_ms),
            "cores_busy_pct": stat_json(&busy),
            "machine_busy_pct": stat_json(&machine),
            "all_started_ms": stat_json(&started),
            "all_exited_ms": stat_json(&exited),
            "launcher_cpu_ms": stat_json(&cpu),
            "launcher_cpu_per_daemon_us": stat_json(&per),
            "agents_cpu_per_daemon_us": stat_json(&acpu),
            "wrong_secret_refused": refused,
        }));
        if perf && Some(&n) == sizes.iter().max() {
            std::thread::sleep(Duration::from_millis(200));
            profile_lines = Some(perf_round(&agents, &secret, dir.path())?);
        }
    }
    println!("\nAuthentication check: before the timed runs, a round with another secret was refused by every agent (`wrong_secret_refused`).");
    println!("\nWhat bounds it (CPU needed vs. cores; the machine's other load competes for the same cores):");
    for b in &bounds {
        println!("- {b}");
    }
    for r in &rows {
        let wall = r["all_exited_ms"]["median"].as_f64().unwrap_or(0.0);
        let busy = r["machine_busy_pct"]["median"].as_f64().unwrap_or(0.0);
        if r["agents"].as_u64() == Some(1024) && wall > FANOUT_TARGET_MS {
            let why = if busy >= 80.0 {
                "CPU-bound (the cores are busy throughout: our processes plus the machine's other load)"
            } else {
                "not CPU-bound by our processes: the rest is waiting (other load on the cores, latency)"
            };
            println!("- target ({FANOUT_TARGET_MS:.0} ms at 1024) missed ({wall:.0} ms): {why}; `fanout --perf` shows where the CPU goes");
        }
    }
    if let Some((by_comm, by_sym)) = &profile_lines {
        println!("\nperf record -a over one round of {} agents (whole machine, other load included), by process:", sizes.iter().max().unwrap_or(&0));
        for l in by_comm {
            println!("    {l}");
        }
        println!("top symbols (process, symbol):");
        for l in by_sym {
            println!("    {l}");
        }
    }
    println!("\nload after: {}", load());
    Ok(json!({
        "profile": profile(),
        "rows": rows,
        "bounds": bounds,
        "perf_by_process": profile_lines.as_ref().map(|p| p.0.clone()),
        "perf_top_symbols": profile_lines.as_ref().map(|p| p.1.clone()),
    }))
}
