//! The tables printed at the end: DVM-ready time, first job, launcher CPU, peak memory.

use crate::host::{machine, PROFILE};
use crate::results::{Row, Sample, Variant};
use crate::stats::{cell, col, loads, median, median_u, min_max};
use sandbox::harness;

/// Every table: the setting, DVM-ready time, first job and launcher CPU, peak memory.
pub fn print_tables(rows: &[Row], runs: usize) {
    let Some(first) = rows.first() else { return };
    let variants: Vec<Variant> = first.times.iter().map(|t| t.0).collect();
    print_setting(rows);
    print_ready(rows, &variants, runs);
    print_phases(rows, &variants);
    print_launcher(rows);
    print_per_run(rows, &variants);
    if variants.contains(&Variant::Ssh) {
        print_rss(rows);
    }
}

/// What every figure was measured with and on, and the load.
fn print_setting(rows: &[Row]) {
    let m = machine();
    let load = loads(rows);
    let (lo, hi) = min_max(&load);
    println!();
    println!(
        "Every figure below: {PROFILE} build of the bench, the agent and the components ({}); {} cores ({}), kernel {}; 1-minute load average at the start of the timed runs {lo:.2}-{hi:.2} (median {:.2}; the benchmark itself adds about 1)",
        harness::target_dir().display(),
        m["cores"],
        m["cpu"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?"),
        median(&load)
    );
}

/// DVM-ready time per method, with the ratios.
fn print_ready(rows: &[Row], variants: &[Variant], runs: usize) {
    println!();
    println!(
        "DVM-ready time [{PROFILE}]: prte started in pod 0 until it prints \"DVM ready\" (all prteds reported)"
    );
    println!("median of {runs} runs in seconds, [min-max]; ssh/agent and agent/lower bound are ratios of medians");
    let mut head = format!("{:>5}", "pods");
    for v in variants {
        head += &format!(" | {:<24}", v.label());
    }
    let has = |v| variants.contains(&v);
    if has(Variant::Ssh) {
        head += " | ssh/agent";
    }
    if has(Variant::SshNoTree) {
        head += " | ssh no tree/agent";
    }
    if has(Variant::LowerBound) {
        head += " | agent/lower bound";
    }
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for row in rows {
        let ready = |v| col(row, v, |s| s.ready).map(|t| median(&t));
        let agent = ready(Variant::Agent).unwrap_or(f64::NAN);
        let mut line = format!("{:>5}", row.pods);
        for (_, t) in &row.times {
            let r: Vec<f64> = t.iter().map(|s| s.ready).collect();
            line += &format!(" | {:<24}", cell(&r, 3));
        }
        if let Some(m) = ready(Variant::Ssh) {
            line += &format!(" | {:>9.2}", m / agent);
        }
        if let Some(m) = ready(Variant::SshNoTree) {
            line += &format!(" | {:>18.2}", m / agent);
        }
        if let Some(m) = ready(Variant::LowerBound) {
            line += &format!(" | {:>17.2}", agent / m);
        }
        println!("{line}");
    }
}

/// First job and launcher CPU per daemon per method.
fn print_per_run(rows: &[Row], variants: &[Variant]) {
    for (title, unit, f) in [
        (
            "First job: `prun -n <2 per pod> hostname` into the fresh DVM, seconds, median [min-max]",
            1.0,
            (|s: &Sample| s.first_job) as fn(&Sample) -> f64,
        ),
        (
            "Job of `true`, 1 rank per pod (`prun -n <pods> true`, after the first job), seconds, median [min-max]",
            1.0,
            |s: &Sample| s.job_one,
        ),
        (
            "Job of `true`, --ranks-per-pod ranks per pod (`prun --map-by ppr:R:node:OVERSUBSCRIBE true`; 0: left out), seconds, median [min-max]",
            1.0,
            |s: &Sample| s.job_many,
        ),
        (
            "Launcher CPU per daemon: user+system of prte and all it started (prteds excluded) at DVM ready, ms, median [min-max]",
            1e3,
            |s: &Sample| s.cpu,
        ),
        (
            "Agents' own CPU while the DVM is up and idle (1 s before the first job), ms per second per worker agent, median [min-max]",
            1.0,
            |s: &Sample| s.agents_idle,
        ),
    ] {
        println!();
        println!("{title} [{PROFILE}]");
        let mut head = format!("{:>5}", "pods");
        for v in variants {
            head += &format!(" | {:<24}", v.label());
        }
        println!("{head}");
        println!("{}", "-".repeat(head.len()));
        for row in rows {
            let per = if unit > 1.0 {
                (row.pods - 1) as f64
            } else {
                1.0
            };
            let mut line = format!("{:>5}", row.pods);
            for (_, t) in &row.times {
                let r: Vec<f64> = t.iter().map(|s| f(s) * unit / per).collect();
                // seconds to the ms; CPU per daemon in ms to 0.1 ms (ticks are 10 ms)
                line += &format!(" | {:<24}", cell(&r, if unit > 1.0 { 1 } else { 3 }));
            }
            println!("{line}");
        }
    }
}

/// Where the DVM-ready time went, per method: prte until the first prted started, the first
/// until the last, the last until "DVM ready" (medians), and the slowest of the three.
fn print_phases(rows: &[Row], variants: &[Variant]) {
    println!();
    println!("DVM-ready time by phase [{PROFILE}]: prte start -> first prted started (prte's start-up, discovery, first connection) + first -> last prted started (fan-out: connections, handshakes, daemon starts) + last prted -> DVM ready (PRRTE's wire-up); seconds, medians, from /proc start times (10 ms ticks)");
    let mut head = format!("{:>5}", "pods");
    for v in variants {
        head += &format!(" | {:<30}", v.label());
    }
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for row in rows {
        let mut line = format!("{:>5}", row.pods);
        for (_, t) in &row.times {
            let m = |f: fn(&Sample) -> f64| median(&t.iter().map(f).collect::<Vec<_>>());
            let p = [
                m(|s| s.phases.to_first),
                m(|s| s.phases.spread),
                m(|s| s.phases.wire_up),
            ];
            let slowest = PHASES[(0..3).max_by(|a, b| p[*a].total_cmp(&p[*b])).unwrap_or(0)];
            line += &format!(
                " | {:<30}",
                format!("{:.2}+{:.2}+{:.2} ({slowest})", p[0], p[1], p[2])
            );
        }
        println!("{line}");
    }
}

/// The agents' fan-out as the launcher saw it (plm k8s's summary of its round).
fn print_launcher(rows: &[Row]) {
    println!();
    println!("The launcher's round (agent method) [{PROFILE}]: until every prted started, and per pod the connection with its handshake and the launch request until the agent's `started` (prted exec'd); seconds, medians over runs of the round's median / max over pods");
    let head = format!(
        "{:>5} | {:>11} | {:>21} | {:>21}",
        "pods", "all started", "connect+handshake", "request -> started"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for row in rows {
        let Some((_, t)) = row.times.iter().find(|(v, _)| *v == Variant::Agent) else {
            continue;
        };
        let m = |f: fn(&Sample) -> f64| median(&t.iter().map(f).collect::<Vec<_>>());
        println!(
            "{:>5} | {:>11.3} | {:>21} | {:>21}",
            row.pods,
            m(|s| s.launch.total),
            format!(
                "{:.3} / {:.3}",
                m(|s| s.launch.connect_median),
                m(|s| s.launch.connect_max)
            ),
            format!(
                "{:.3} / {:.3}",
                m(|s| s.launch.start_median),
                m(|s| s.launch.start_max)
            ),
        );
    }
}

/// The phases' short names, in order.
const PHASES: [&str; 3] = ["start", "fan-out", "wire-up"];

/// The agent's own resident memory target, MiB.
const AGENT_RSS_TARGET_MIB: f64 = 6.0;

/// Peak RSS of the agent, sshd and ssh clients.
fn print_rss(rows: &[Row]) {
    println!();
    println!("Peak RSS (VmHWM, MiB) while the DVM is up, in the last timed run; per worker pod: median over pods 1..N-1 [{PROFILE}]");
    println!("(agent: the prrte-k8s-agent process, plm k8s run; sshd: the listener plus the connection's sshd");
    println!(" processes, plm ssh tree run; ssh clients: all ssh processes prte keeps in pod 0 then, summed)");
    let head = format!(
        "{:>5} | {:>8} | {:>8} | {:>16}",
        "pods", "agent", "sshd", "ssh clients pod0"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    let mib = |kb: u64| kb as f64 / 1024.0;
    for row in rows {
        println!(
            "{:>5} | {:>8.1} | {:>8.1} | {:>16.1}",
            row.pods,
            mib(median_u(&row.rss.agent)),
            mib(median_u(&row.rss.sshd)),
            mib(row.rss.clients)
        );
    }
    println!();
    println!("Memory per worker pod at DVM ready, MiB, median over pods 1..N-1 [{PROFILE}]: the agent's VmRSS and Pss, its prted's Pss, their sum (plm k8s run), and the sshd processes' Pss (plm ssh tree run)");
    let head = format!(
        "{:>5} | {:>11} | {:>9} | {:>9} | {:>15} | {:>8} | agent RSS <= {AGENT_RSS_TARGET_MIB} MiB",
        "pods", "agent VmRSS", "agent Pss", "prted Pss", "agent+prted Pss", "sshd Pss"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for row in rows {
        let r = &row.rss;
        let sum: Vec<u64> = r
            .agent_pss
            .iter()
            .zip(&r.prted_pss)
            .map(|(a, p)| a + p)
            .collect();
        let now = mib(median_u(&r.agent_now));
        println!(
            "{:>5} | {:>11.2} | {:>9.2} | {:>9.2} | {:>15.2} | {:>8.2} | {}",
            row.pods,
            now,
            mib(median_u(&r.agent_pss)),
            mib(median_u(&r.prted_pss)),
            mib(median_u(&sum)),
            mib(median_u(&r.sshd_pss)),
            if now <= AGENT_RSS_TARGET_MIB {
                "yes"
            } else {
                "no"
            }
        );
    }
}
