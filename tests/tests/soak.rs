//! Soak: DVM start (prte with ras k8s + plm k8s), `prun` (in prte's pod: prte's tool listener
//! is on 127.0.0.1), `pterm`, in a loop on 16 pods. Every
//! cycle must succeed and leave no prted behind, and neither the agents nor prte may grow:
//! from the first measured cycle (after one warm-up) to the last, per process,
//!
//! * open file descriptors: at most +[`FD_SLACK`],
//! * threads: at most +[`THREAD_SLACK`],
//! * resident memory: at most +[`RSS_SLACK_KIB`] KiB.
//!
//! The test command runs 20 cycles; the long soak (200 cycles) is
//!
//! ```sh
//! PRRTE_K8S_SOAK_CYCLES=200 cargo test -p prrte-k8s-sandbox --test soak -- --nocapture
//! ```
//!
//! (`PRRTE_K8S_SOAK_PODS` changes the pod count.)
#![forbid(unsafe_code)]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const FD_SLACK: i64 = 2;
const THREAD_SLACK: i64 = 2;
const RSS_SLACK_KIB: i64 = 4096;

#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    fds: i64,
    threads: i64,
    rss_kib: i64,
}

fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| -> Option<i64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some(Usage {
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as i64,
        threads: field("Threads:")?,
        rss_kib: field("VmRSS:")?,
    })
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dvm_start_prun_pterm_cycles_do_not_leak() {
    let cycles = env_or("PRRTE_K8S_SOAK_CYCLES", 20).max(3);
    let pods = env_or("PRRTE_K8S_SOAK_PODS", 16).max(2);
    let job = Job::start(JobSpec::new("soak", pods)).await.unwrap();
    let args: Vec<String> = k8s_args(&["--prtemca", "odls_base_max_threads", "0"])
        .iter()
        .map(|s| s.to_string())
        .collect();
    let agents: Vec<u32> = (0..pods)
        .map(|i| {
            let a = job.pids_in_pod(i, "prrte-k8s-agent").unwrap();
            assert_eq!(a.len(), 1, "pod {i}");
            a[0]
        })
        .collect();
    // Per cycle: the agents after it, prte during it.
    let mut agent_usage: Vec<Vec<Usage>> = Vec::new();
    let mut prte_usage: Vec<Usage> = Vec::new();
    let t0 = Instant::now();
    for c in 0..cycles {
        let tag = format!("soak-{c}");
        let uri = job.dir.path().join(format!("{tag}.uri"));
        let mut during = None;
        job.dvm_cycle(&tag, &args, Duration::from_secs(60), None, |job| {
            let dvm = format!("file:{}", uri.display());
            let n = pods.to_string();
            let o = job.run_in_pod(
                0,
                "prun",
                &["--allow-run-as-root", "--dvm-uri", &dvm, "-n", &n, "true"],
                Duration::from_secs(60),
            )?;
            if !o.status.success() {
                anyhow::bail!("prun failed in cycle {c}: {}", text(&o));
            }
            let prte = job.pids_in_pod(0, "prte")?;
            during = prte.first().and_then(|p| usage(*p));
            Ok(String::new())
        })
        .unwrap_or_else(|e| panic!("cycle {c} of {cycles}: {e:#}"));
        prte_usage.push(during.expect("prte's usage measured"));
        agent_usage.push(
            agents
                .iter()
                .map(|p| usage(*p).expect("the agent runs"))
                .collect(),
        );
    }
    eprintln!("soak: {cycles} cycles on {pods} pods in {:?}", t0.elapsed());
    let first = 1; // after one warm-up cycle
    let last = cycles - 1;
    let mut report = BTreeMap::new();
    let mut check = |what: String, a: Usage, b: Usage| {
        report.insert(
            what.clone(),
            format!(
                "fds {}->{} threads {}->{} rss {}->{} KiB",
                a.fds, b.fds, a.threads, b.threads, a.rss_kib, b.rss_kib
            ),
        );
        (b.fds - a.fds > FD_SLACK
            || b.threads - a.threads > THREAD_SLACK
            || b.rss_kib - a.rss_kib > RSS_SLACK_KIB)
            .then_some(what)
    };
    let mut grew: Vec<String> = (0..pods)
        .filter_map(|i| {
            check(
                format!("agent of pod {i}"),
                agent_usage[first][i],
                agent_usage[last][i],
            )
        })
        .collect();
    grew.extend(check("prte".into(), prte_usage[first], prte_usage[last]));
    for (k, v) in &report {
        eprintln!("soak: {k}: {v}");
    }
    assert!(grew.is_empty(), "grew beyond the bounds (fds +{FD_SLACK}, threads +{THREAD_SLACK}, RSS +{RSS_SLACK_KIB} KiB): {grew:?}\n{report:#?}");
}
