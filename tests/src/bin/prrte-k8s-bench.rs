//! prrte-k8s-bench: how long PRRTE takes to bring up a DVM across N sandbox pods, with the
//! daemons started through the agents (`plm k8s`) and, side by side on the same pods, through a
//! real sshd in every pod (`plm ssh`, the mpi-operator way). Prints a table; not part of
//! `make test` (run `make bench`). Needs root, like the sandbox.
#![forbid(unsafe_code)]
use anyhow::{bail, Context, Result};
use clap::Parser;
use sandbox::harness::{self, TestDir};
use sandbox::mpijob::{Job, JobSpec};
use sandbox::sshd::{self, Spawn, SshBaseline};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// DVM-ready time (prte started in pod 0 until it prints "DVM ready", i.e. every prted has
/// reported) for daemons started through the agents vs through an sshd in each pod.
#[derive(Parser, Debug)]
#[command(name = "prrte-k8s-bench")]
struct Args {
    /// Pod counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,16,32")]
    pods: Vec<usize>,
    /// Timed runs per variant and pod count (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Quick check: 4 pods, 3 runs (overrides --pods and --runs).
    #[arg(long)]
    quick: bool,
    /// Leave out the third variant (ssh with plm_ssh_no_tree_spawn).
    #[arg(long)]
    no_no_tree: bool,
    /// Seconds one DVM may take to become ready.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Agent,
    Ssh,
    SshNoTree,
}

impl Variant {
    fn tag(self) -> &'static str {
        match self {
            Variant::Agent => "agent",
            Variant::Ssh => "ssh",
            Variant::SshNoTree => "ssh-notree",
        }
    }
}

/// Peak resident memory (VmHWM, kB) per worker pod (pods 1..N-1), measured while the DVM is up.
#[derive(Default, Clone, Debug)]
struct Rss {
    /// The agent of each worker pod.
    agent: Vec<u64>,
    /// All sshd processes of each worker pod: the listener and the connection's processes.
    sshd: Vec<u64>,
    /// ssh clients in prte's pod, summed.
    clients: u64,
}

struct Row {
    pods: usize,
    times: Vec<(Variant, Vec<f64>)>,
    rss: Rss,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn median_u(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

fn min_max(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// Peak RSS of processes in worker pods while the DVM of `variant` is up.
fn measure_rss(job: &Job, variant: Variant, rss: &mut Rss) -> Result<()> {
    match variant {
        Variant::Agent => {
            rss.agent.clear();
            for i in 1..job.pods.len() {
                // comm is cut to 15 characters: "prrte-k8s-agen"
                let pids = sshd::pids_like(job, i, "prrte-k8s-agen")?;
                rss.agent.push(
                    pids.iter()
                        .filter_map(|p| sshd::status_kb(*p, "VmHWM"))
                        .sum(),
                );
            }
        }
        Variant::Ssh => {
            rss.sshd.clear();
            for i in 1..job.pods.len() {
                let pids = sshd::pids_like(job, i, "sshd")?;
                rss.sshd.push(
                    pids.iter()
                        .filter_map(|p| sshd::status_kb(*p, "VmHWM"))
                        .sum(),
                );
            }
            rss.clients = job
                .pids_in_pod(0, "ssh")?
                .iter()
                .filter_map(|p| sshd::status_kb(*p, "VmHWM"))
                .sum();
        }
        Variant::SshNoTree => {}
    }
    Ok(())
}

/// One DVM start/stop of `variant`; returns seconds to "DVM ready".
fn one(
    job: &Job,
    ssh: &SshBaseline,
    variant: Variant,
    tag: &str,
    limit: Duration,
    rss: Option<&mut Rss>,
) -> Result<f64> {
    let args: Vec<String> = match variant {
        Variant::Agent => [
            "--allow-run-as-root",
            "--prtemca",
            "ras",
            "k8s",
            "--prtemca",
            "plm",
            "k8s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        Variant::Ssh => ssh.prte_args(Spawn::Tree),
        Variant::SshNoTree => ssh.prte_args(Spawn::NoTree),
    };
    let n = job.pods.len();
    let cycle = job.dvm_cycle(tag, &args, limit, Some(&INTERRUPTED), |job| {
        for i in 1..n {
            if job.pids_in_pod(i, "prted")?.is_empty() {
                bail!("DVM ready but pod {i} runs no prted");
            }
        }
        if let Some(r) = rss {
            measure_rss(job, variant, r)?;
        }
        Ok(String::new())
    })?;
    if variant != Variant::Agent {
        sshd::wait_sessions_closed(job, Duration::from_secs(15))
            .with_context(|| format!("{tag}: ssh sessions left"))?;
    }
    Ok(cycle.ready.as_secs_f64())
}

async fn bench_pods(n: usize, runs: usize, variants: &[Variant], limit: Duration) -> Result<Row> {
    let keys = TestDir::new("bench-keys")?;
    let ssh = SshBaseline::prepare(keys.path())?;
    let name = format!("bench{n}");
    let mut spec = JobSpec::new(&name, n);
    ssh.apply(&mut spec);
    eprintln!("[{n} pods] starting the sandbox and {n} pods (agent + sshd in each) ...");
    let job = Job::start(spec).await?;
    for i in 0..n {
        if sshd::pids_like(&job, i, "sshd")?.len() != 1 {
            bail!("pod {i} runs no sshd:\n{}", sshd::sshd_log(&job, i));
        }
    }
    // One untimed warm-up of each variant (page cache, first connections).
    for v in variants {
        eprintln!("[{n} pods] warm-up {}", v.tag());
        one(&job, &ssh, *v, &format!("warmup-{}", v.tag()), limit, None)?;
    }
    let mut times: Vec<(Variant, Vec<f64>)> = variants.iter().map(|v| (*v, Vec::new())).collect();
    let mut rss = Rss::default();
    for r in 0..runs {
        // Rotate the order so no variant always runs right after another.
        for k in 0..variants.len() {
            let idx = (k + r) % variants.len();
            let v = variants[idx];
            let last = r + 1 == runs;
            let t = one(
                &job,
                &ssh,
                v,
                &format!("run{r}-{}", v.tag()),
                limit,
                if last { Some(&mut rss) } else { None },
            )?;
            eprintln!("[{n} pods] run {}/{runs} {:<10} {t:.3} s", r + 1, v.tag());
            times[idx].1.push(t);
        }
    }
    job.wait_no_prteds(Duration::from_secs(10))?;
    drop(job);
    drop(keys);
    Ok(Row {
        pods: n,
        times,
        rss,
    })
}

fn print_tables(rows: &[Row], runs: usize) {
    let Some(first) = rows.first() else { return };
    let variants: Vec<Variant> = first.times.iter().map(|t| t.0).collect();
    println!();
    println!(
        "DVM-ready time: prte started in pod 0 until it prints \"DVM ready\" (all prteds reported)"
    );
    println!("median of {runs} runs in seconds, [min-max]; ratio = ssh median / agent median");
    let mut head = format!("{:>5} | {:<24}", "pods", "agent (plm k8s)");
    for v in &variants[1..] {
        let label = match v {
            Variant::Ssh => "ssh (plm ssh, tree)",
            _ => "ssh (plm ssh, no tree)",
        };
        head += &format!(" | {label:<24} | {:>5}", "ratio");
    }
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for row in rows {
        let cell = |v: &[f64]| {
            let (lo, hi) = min_max(v);
            format!("{:.3} [{:.3}-{:.3}]", median(v), lo, hi)
        };
        let agent = median(&row.times[0].1);
        let mut line = format!("{:>5} | {:<24}", row.pods, cell(&row.times[0].1));
        for (_, t) in &row.times[1..] {
            line += &format!(" | {:<24} | {:>5.2}", cell(t), median(t) / agent);
        }
        println!("{line}");
    }
    if variants.contains(&Variant::Ssh) {
        println!();
        println!("Peak RSS (VmHWM, MiB) while the DVM is up, in the last timed run; per worker pod: median over pods 1..N-1");
        println!("(agent: the prrte-k8s-agent process, plm k8s run; sshd: the listener plus the connection's sshd");
        println!(" processes, plm ssh tree run; ssh clients: all ssh processes prte keeps in pod 0 then, summed)");
        let head = format!(
            "{:>5} | {:>8} | {:>8} | {:>16}",
            "pods", "agent", "sshd", "ssh clients pod0"
        );
        println!("{head}");
        println!("{}", "-".repeat(head.len()));
        for row in rows {
            let mib = |kb: u64| kb as f64 / 1024.0;
            println!(
                "{:>5} | {:>8.1} | {:>8.1} | {:>16.1}",
                row.pods,
                mib(median_u(&row.rss.agent)),
                mib(median_u(&row.rss.sshd)),
                mib(row.rss.clients)
            );
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = Args::parse();
    if args.quick {
        args.pods = vec![4];
        args.runs = 3;
    }
    if args.runs == 0 || args.pods.iter().any(|n| *n < 2) {
        eprintln!("prrte-k8s-bench: --runs must be at least 1 and every pod count at least 2");
        std::process::exit(2);
    }
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("prrte-k8s-bench: the sandbox pods need root");
        std::process::exit(2);
    }
    if let Err(e) = harness::require_prrte() {
        eprintln!("prrte-k8s-bench: {e:#}");
        std::process::exit(2);
    }
    // Ctrl-C: stop at the next wait; everything started so far is torn down on the way out.
    let _ = ctrlc::set_handler(|| {
        if !INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("prrte-k8s-bench: interrupted; tearing down the pods (bounded waits)");
        }
    });
    let mut variants = vec![Variant::Agent, Variant::Ssh];
    if !args.no_no_tree {
        variants.push(Variant::SshNoTree);
    }
    let limit = Duration::from_secs(args.timeout);
    let mut rows = Vec::new();
    let mut failed = None;
    for &n in &args.pods {
        if INTERRUPTED.load(Ordering::SeqCst) {
            failed = Some(anyhow::anyhow!("interrupted"));
            break;
        }
        match bench_pods(n, args.runs, &variants, limit).await {
            Ok(r) => rows.push(r),
            Err(e) => {
                failed = Some(e.context(format!("{n} pods")));
                break;
            }
        }
    }
    print_tables(&rows, args.runs);
    let left = harness::pids_named("prted");
    if !left.is_empty() {
        eprintln!("prrte-k8s-bench: prted processes left: {left:?}");
        failed.get_or_insert_with(|| anyhow::anyhow!("prted processes left"));
    }
    if let Some(e) = failed {
        eprintln!("prrte-k8s-bench: {e:#}");
        std::process::exit(if INTERRUPTED.load(Ordering::SeqCst) {
            130
        } else {
            1
        });
    }
}
