//! prrte-k8s-bench: how long PRRTE takes to bring up a DVM across N sandbox pods, with the
//! daemons started through the agents (`plm k8s`) and, side by side on the same pods, through a
//! real sshd in every pod (`plm ssh`, the mpi-operator way) and through the lower bound (`plm
//! ssh` with an agent that execs the command straight into the pod's namespaces); then the
//! first job into the fresh DVM and the launcher's CPU time per daemon. Prints tables (medians
//! and ranges), writes JSON (`--json`) and a PNG plot of DVM-ready time against pods (`--plot`,
//! by default next to the JSON); not part of `make test` (run `make bench`, which builds and
//! runs the release profile). Needs root, like the sandbox. The agent and the components it
//! measures are the ones next to this executable, so they share its profile.
#![forbid(unsafe_code)]
mod plot;

use anyhow::{bail, Context, Result};
use clap::Parser;
use sandbox::harness::{self, TestDir};
use sandbox::mpijob::{Job, JobSpec};
use sandbox::nsexec::NsPins;
use sandbox::sshd::{self, Spawn, SshBaseline};
use std::path::{Path, PathBuf};
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
    /// Leave out the lower bound (plm ssh with a namespace-exec agent).
    #[arg(long)]
    no_lower_bound: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw DVM-ready time against pods as a PNG to this file (default: the --json file with
    /// the extension .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run nothing: redraw the plot from a JSON report this program wrote (to --plot, default
    /// that file with the extension .png).
    #[arg(long, value_name = "JSON")]
    plot_from: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Agent,
    Ssh,
    SshNoTree,
    LowerBound,
}

impl Variant {
    fn tag(self) -> &'static str {
        match self {
            Variant::Agent => "agent",
            Variant::Ssh => "ssh",
            Variant::SshNoTree => "ssh-notree",
            Variant::LowerBound => "lower-bound",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Variant::Agent => "agent (plm k8s)",
            Variant::Ssh => "ssh (plm ssh, tree)",
            Variant::SshNoTree => "ssh (plm ssh, no tree)",
            Variant::LowerBound => "lower bound (ns exec)",
        }
    }
}

/// What one DVM start measured.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// prte started until "DVM ready", seconds.
    ready: f64,
    /// `prun -n <2 per pod> hostname` into the fresh DVM, seconds.
    first_job: f64,
    /// user+system CPU seconds of prte and everything it started (prteds excluded) at "DVM
    /// ready".
    cpu: f64,
    /// The machine's 1-minute load average when this run started.
    load: f64,
}

/// The build profile of this executable, hence of the agent and components it runs (both are
/// taken from its own target directory).
const PROFILE: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// The 1-minute load average (/proc/loadavg), NaN when unreadable.
fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// What the figures were measured on: cores, CPU model, kernel.
fn machine() -> serde_json::Value {
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
fn artifacts() -> serde_json::Value {
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

/// CPU seconds of `root` and its live descendants (with what they reaped), leaving out prted
/// and everything under it (the daemons' own work is not the launcher's).
fn tree_cpu(root: u32) -> f64 {
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
    times: Vec<(Variant, Vec<Sample>)>,
    rss: Rss,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The directories of this run's jobs: every prted it started has its TMPDIR under one.
fn own_dirs() -> std::sync::MutexGuard<'static, Vec<String>> {
    static DIRS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    DIRS.lock().unwrap_or_else(|e| e.into_inner())
}

/// prted processes this run started that are still alive (others' prteds on the same machine,
/// e.g. of tests running side by side, are not ours to report).
fn own_prteds() -> Vec<u32> {
    let dirs = own_dirs().clone();
    harness::pids_named("prted")
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                let env = String::from_utf8_lossy(&env);
                dirs.iter().any(|d| env.contains(d.as_str()))
            })
        })
        .collect()
}

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

/// Per worker pod (1..), the summed peak RSS (VmHWM, KiB) of its processes named like `comm`.
fn peak_per_worker(job: &Job, comm: &str) -> Result<Vec<u64>> {
    (1..job.pods.len())
        .map(|i| {
            Ok(sshd::pids_like(job, i, comm)?
                .iter()
                .filter_map(|p| sshd::status_kb(*p, "VmHWM"))
                .sum())
        })
        .collect()
}

/// Peak RSS of processes in worker pods while the DVM of `variant` is up.
fn measure_rss(job: &Job, variant: Variant, rss: &mut Rss) -> Result<()> {
    match variant {
        Variant::Agent => {
            // comm is cut to 15 characters: "prrte-k8s-agen"
            rss.agent = peak_per_worker(job, "prrte-k8s-agen")?;
        }
        Variant::Ssh => {
            rss.sshd = peak_per_worker(job, "sshd")?;
            rss.clients = job
                .pids_in_pod(0, "ssh")?
                .iter()
                .filter_map(|p| sshd::status_kb(*p, "VmHWM"))
                .sum();
        }
        Variant::SshNoTree | Variant::LowerBound => {}
    }
    Ok(())
}

/// One DVM start/stop of `variant`: DVM-ready time, first job, launcher CPU.
fn one(
    job: &Job,
    ssh: &SshBaseline,
    lower: Option<&Path>,
    variant: Variant,
    tag: &str,
    limit: Duration,
    rss: Option<&mut Rss>,
) -> Result<Sample> {
    let args: Vec<String> = match variant {
        Variant::Agent => sandbox::mpijob::K8S.iter().map(|s| s.to_string()).collect(),
        Variant::Ssh => ssh.prte_args(Spawn::Tree),
        Variant::SshNoTree => ssh.prte_args(Spawn::NoTree),
        Variant::LowerBound => {
            let script = lower.context("the lower bound's agent script is missing")?;
            let mut a = ssh.prte_args(Spawn::NoTree);
            let i = a
                .iter()
                .position(|x| x == "plm_ssh_agent")
                .context("no plm_ssh_agent")?;
            a[i + 1] = script.to_string_lossy().into_owned();
            a
        }
    };
    let n = job.pods.len();
    let uri = job.dir.path().join(format!("{tag}.uri"));
    let mut sample = Sample {
        load: load_avg(),
        ..Sample::default()
    };
    let cycle = job.dvm_cycle(tag, &args, limit, Some(&INTERRUPTED), |job| {
        // The launcher's CPU first, before anything else runs in pod 0.
        let prte = job.pids_in_pod(0, "prte")?;
        let [prte] = prte[..] else {
            bail!("expected one prte in pod 0, found {prte:?}");
        };
        sample.cpu = tree_cpu(prte);
        if variant == Variant::LowerBound {
            // The daemons live in pod 0's PID namespace (see sandbox::nsexec).
            if job.pids_in_pod(0, "prted")?.len() < n - 1 {
                bail!("DVM ready but fewer than {} prteds run", n - 1);
            }
        } else {
            for i in 1..n {
                if job.pids_in_pod(i, "prted")?.is_empty() {
                    bail!("DVM ready but pod {i} runs no prted");
                }
            }
        }
        if let Some(r) = rss {
            measure_rss(job, variant, r)?;
        }
        let dvm = format!("file:{}", uri.display());
        let np = (2 * n).to_string();
        let t0 = std::time::Instant::now();
        let o = job.run_in_pod(
            0,
            "prun",
            &[
                "--allow-run-as-root",
                "--dvm-uri",
                &dvm,
                "-n",
                &np,
                "hostname",
            ],
            Duration::from_secs(60),
        )?;
        sample.first_job = t0.elapsed().as_secs_f64();
        let lines = String::from_utf8_lossy(&o.stdout).lines().count();
        if !o.status.success() || lines != 2 * n {
            bail!(
                "first job ({tag}): {lines} lines of {} expected, {}",
                2 * n,
                sandbox::mpijob::text(&o)
            );
        }
        Ok(String::new())
    })?;
    if matches!(variant, Variant::Ssh | Variant::SshNoTree) {
        sshd::wait_sessions_closed(job, Duration::from_secs(15))
            .with_context(|| format!("{tag}: ssh sessions left"))?;
    }
    sample.ready = cycle.ready.as_secs_f64();
    Ok(sample)
}

async fn bench_pods(n: usize, runs: usize, variants: &[Variant], limit: Duration) -> Result<Row> {
    let keys = TestDir::new("bench-keys")?;
    let ssh = SshBaseline::prepare(keys.path())?;
    let name = format!("bench{n}");
    let mut spec = JobSpec::new(&name, n);
    // 2 slots per pod (ras k8s counts whole CPUs) for the first job's 2 ranks per pod.
    spec.cpus = vec!["2"; n];
    ssh.apply(&mut spec);
    let pins = if variants.contains(&Variant::LowerBound) {
        Some(NsPins::prepare(&keys.path().join("ns"))?)
    } else {
        None
    };
    eprintln!("[{n} pods] starting the sandbox and {n} pods (agent + sshd in each) ...");
    let job = Job::start(spec).await?;
    own_dirs().push(job.dir.path().to_string_lossy().into_owned());
    let lower = match &pins {
        Some(p) => Some(p.write_agent(&job, &keys.path().join("nsexec"))?),
        None => None,
    };
    let lower = lower.as_deref();
    for i in 0..n {
        if sshd::pids_like(&job, i, "sshd")?.len() != 1 {
            bail!("pod {i} runs no sshd:\n{}", sshd::sshd_log(&job, i));
        }
    }
    // One untimed warm-up of each variant (page cache, first connections).
    for v in variants {
        eprintln!("[{n} pods] warm-up {}", v.tag());
        one(
            &job,
            &ssh,
            lower,
            *v,
            &format!("warmup-{}", v.tag()),
            limit,
            None,
        )?;
    }
    let mut times: Vec<(Variant, Vec<Sample>)> =
        variants.iter().map(|v| (*v, Vec::new())).collect();
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
                lower,
                v,
                &format!("run{r}-{}", v.tag()),
                limit,
                if last { Some(&mut rss) } else { None },
            )?;
            eprintln!(
                "[{n} pods, {PROFILE}] run {}/{runs} {:<11} ready {:.3} s, first job {:.3} s, launcher CPU {:.3} s (load {:.2})",
                r + 1,
                v.tag(),
                t.ready,
                t.first_job,
                t.cpu,
                t.load
            );
            times[idx].1.push(t);
        }
    }
    job.wait_no_prteds(Duration::from_secs(10))?;
    drop(job);
    drop(pins);
    drop(keys);
    Ok(Row {
        pods: n,
        times,
        rss,
    })
}

/// "median [min-max]" with `digits` decimals.
fn cell(v: &[f64], digits: usize) -> String {
    let (lo, hi) = min_max(v);
    format!("{:.digits$} [{:.digits$}-{:.digits$}]", median(v), lo, hi)
}

fn col(row: &Row, v: Variant, f: impl Fn(&Sample) -> f64) -> Option<Vec<f64>> {
    row.times
        .iter()
        .find(|t| t.0 == v)
        .map(|t| t.1.iter().map(&f).collect())
}

fn stats(v: &[f64]) -> serde_json::Value {
    let (lo, hi) = min_max(v);
    serde_json::json!({"median": median(v), "min": lo, "max": hi, "samples": v})
}

/// The 1-minute load averages seen at the start of the timed runs of `rows`.
fn loads<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Vec<f64> {
    rows.into_iter()
        .flat_map(|r| r.times.iter().flat_map(|t| t.1.iter().map(|s| s.load)))
        .filter(|l| l.is_finite())
        .collect()
}

fn json_report(rows: &[Row], runs: usize) -> serde_json::Value {
    let machine = machine();
    let rows_json: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let mut methods = serde_json::Map::new();
            for (v, t) in &row.times {
                let get = |f: fn(&Sample) -> f64| t.iter().map(f).collect::<Vec<_>>();
                let per: Vec<f64> = t
                    .iter()
                    .map(|s| s.cpu * 1e3 / (row.pods - 1) as f64)
                    .collect();
                methods.insert(
                    v.tag().into(),
                    serde_json::json!({
                        "label": v.label(),
                        "dvm_ready_s": stats(&get(|s| s.ready)),
                        "first_job_s": stats(&get(|s| s.first_job)),
                        "launcher_cpu_per_daemon_ms": stats(&per),
                    }),
                );
            }
            let m = |v: Variant| col(row, v, |s| s.ready).map(|t| median(&t));
            let agent = m(Variant::Agent);
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => serde_json::json!(a / b),
                _ => serde_json::Value::Null,
            };
            serde_json::json!({
                "pods": row.pods,
                "load_avg_1m": stats(&loads([row])),
                "methods": methods,
                "ratio_ssh_over_agent": ratio(m(Variant::Ssh), agent),
                "ratio_ssh_no_tree_over_agent": ratio(m(Variant::SshNoTree), agent),
                "ratio_agent_over_lower_bound": ratio(agent, m(Variant::LowerBound)),
                "peak_rss_kib": {
                    "agent_per_pod": median_u(&row.rss.agent),
                    "sshd_per_pod": median_u(&row.rss.sshd),
                    "ssh_clients_pod0": row.rss.clients,
                },
            })
        })
        .collect();
    serde_json::json!({
        "benchmark": "prrte-k8s-bench",
        "profile": PROFILE,
        "artifacts": artifacts(),
        "cores": machine["cores"],
        "machine": machine,
        "load_avg_1m": stats(&loads(rows)),
        "runs": runs,
        "rows": rows_json,
    })
}

fn print_tables(rows: &[Row], runs: usize) {
    let Some(first) = rows.first() else { return };
    let variants: Vec<Variant> = first.times.iter().map(|t| t.0).collect();
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
    println!();
    println!(
        "DVM-ready time [{PROFILE}]: prte started in pod 0 until it prints \"DVM ready\" (all prteds reported)"
    );
    println!("median of {runs} runs in seconds, [min-max]; ssh/agent and agent/lower bound are ratios of medians");
    let mut head = format!("{:>5}", "pods");
    for v in &variants {
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
    for (title, unit, f) in [
        (
            "First job: `prun -n <2 per pod> hostname` into the fresh DVM, seconds, median [min-max]",
            1.0,
            (|s: &Sample| s.first_job) as fn(&Sample) -> f64,
        ),
        (
            "Launcher CPU per daemon: user+system of prte and all it started (prteds excluded) at DVM ready, ms, median [min-max]",
            1e3,
            |s: &Sample| s.cpu,
        ),
    ] {
        println!();
        println!("{title} [{PROFILE}]");
        let mut head = format!("{:>5}", "pods");
        for v in &variants {
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
    if variants.contains(&Variant::Ssh) {
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

/// `--plot-from`: redraw the plot of a saved JSON report.
fn replot(from: &Path, out: &Path) -> Result<()> {
    let text = std::fs::read_to_string(from).with_context(|| format!("read {}", from.display()))?;
    let report: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON written by prrte-k8s-bench", from.display()))?;
    plot::write_png(&report, out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = Args::parse();
    if let Some(from) = &args.plot_from {
        let out = args
            .plot
            .clone()
            .unwrap_or_else(|| from.with_extension("png"));
        match replot(from, &out) {
            Ok(()) => println!("wrote {}", out.display()),
            Err(e) => {
                eprintln!("prrte-k8s-bench: {e:#}");
                std::process::exit(1);
            }
        }
        return;
    }
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
    if !args.no_lower_bound {
        variants.push(Variant::LowerBound);
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
    if !rows.is_empty() {
        let report = json_report(&rows, args.runs);
        println!();
        if let Some(p) = &args.json {
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            match std::fs::write(p, text + "\n") {
                Ok(()) => println!("wrote {} ({PROFILE} build)", p.display()),
                Err(e) => {
                    failed.get_or_insert_with(|| anyhow::anyhow!("writing {}: {e}", p.display()));
                }
            }
        }
        let png = args
            .plot
            .clone()
            .or_else(|| args.json.as_ref().map(|p| p.with_extension("png")));
        if let Some(p) = png {
            match plot::write_png(&report, &p) {
                Ok(()) => println!("wrote {} ({PROFILE} build)", p.display()),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
    }
    let left = own_prteds();
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
