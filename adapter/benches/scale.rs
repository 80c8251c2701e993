//! prrte-k8s scale benchmarks, without a thousand real daemons (`make bench-scale`, or
//! `cargo bench -p prrte-k8s --bench scale -- --help`; release profile):
//!
//! * `discovery`: `ras k8s` discovery (the code `prrte-k8s pods` and the RAS component run) of N
//!   Running+Ready pods of an Indexed Job in the sandbox API server: time, API requests (lists,
//!   pages, gets, watches, bytes), and the peak RSS of a `prrte-k8s pods` process.
//! * `fanout`: the launcher (`prrte_k8s::launch`, what the PLM runs) sends authenticated launch
//!   requests to N real agent processes, each on its own loopback address with a stub prted
//!   that exits at once, and collects every `started` and `exited`: wall time and the launcher's
//!   CPU time per daemon.
//! * `footprint`: RSS of one release agent, idle and while a launch runs.
//!
//! Prints medians with [min-max]; `--json FILE` writes the numbers too. Not a timed test.
#![forbid(unsafe_code)]

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use prrte_k8s::discovery::client::Environment;
use prrte_k8s::discovery::{self, DiscoveryConfig};
use prrte_k8s::launch::{LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher};
use sandbox::api::{resources, ApiOptions, ApiServer, RequestRecord};
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(
    name = "scale",
    about = "prrte-k8s scale benchmarks (discovery, fan-out, agent footprint)"
)]
struct Cli {
    #[command(subcommand)]
    what: Option<What>,
    /// Write the results as JSON to this file too.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Timed runs per size (the median is reported).
    #[arg(long, global = true, default_value_t = 5)]
    runs: usize,
    /// Cargo passes --bench to bench targets; ignored.
    #[arg(long, hide = true, global = true)]
    bench: bool,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Discovery of N ready pods through the sandbox API server.
    Discovery {
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        pods: Vec<usize>,
    },
    /// The launcher against N agents on loopback addresses.
    Fanout {
        #[arg(long, value_delimiter = ',', default_value = "256,1024")]
        agents: Vec<usize>,
        /// After the timed runs, profile one more round of the largest size with `perf record
        /// -a` and print where the CPU went (by process, then the top symbols).
        #[arg(long)]
        perf: bool,
    },
    /// RSS of one agent, idle and during a launch.
    Footprint,
    /// All of the above with their defaults.
    All,
    /// (internal) where a list's time goes.
    #[command(hide = true)]
    Breakdown {
        #[arg(long, default_value_t = 10000)]
        pods: usize,
    },
    /// (internal) run COMMAND, print its exit status and peak RSS in KiB.
    #[command(hide = true)]
    MaxRss {
        #[arg(last = true)]
        command: Vec<String>,
    },
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn range(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// "median [min-max]" with `prec` decimals.
fn stat(v: &[f64], prec: usize) -> String {
    let (lo, hi) = range(v);
    format!("{:.prec$} [{lo:.prec$}-{hi:.prec$}]", median(v))
}

fn stat_json(v: &[f64]) -> Value {
    let (lo, hi) = range(v);
    json!({"median": median(v), "min": lo, "max": hi, "samples": v})
}

/// A binary of this package, built next to the bench (cargo builds them for benches).
fn bin(name: &str) -> PathBuf {
    match name {
        "prrte-k8s" => PathBuf::from(env!("CARGO_BIN_EXE_prrte-k8s")),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_prrte-k8s-agent")),
    }
}

fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// discovery

const NS: &str = "scale";
const JOB: &str = "mpi";

/// The pod of index `i` of an Indexed Job of `n` pods, Running and Ready, as a kubelet and the
/// Job controller leave it (labels, owner, two containers' worth of spec, conditions).
fn ready_pod(i: usize, job_uid: &str) -> Value {
    let name = format!("{JOB}-{i}-x{:05}", i % 100_000);
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 0)) + i as u32 + 1);
    json!({
        "metadata": {
            "name": name,
            "labels": {
                "batch.kubernetes.io/controller-uid": job_uid,
                "batch.kubernetes.io/job-name": JOB,
                "controller-uid": job_uid,
                "job-name": JOB,
                "batch.kubernetes.io/job-completion-index": i.to_string(),
                "app": "mpi-demo",
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": i.to_string()},
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": job_uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "hostname": format!("{JOB}-{i}"),
            "subdomain": JOB,
            "restartPolicy": "Never",
            "containers": [{
                "name": "mpi",
                "image": "localhost/prrte-k8s:latest",
                "args": ["--prted", "/opt/prrte/bin/prted"],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "PRTE_MCA_oob_tcp_static_ipv4_ports", "value": "7121"},
                ],
                "ports": [{"containerPort": 7117, "name": "agent"}],
                "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 7118}},
                "volumeMounts": [
                    {"name": "secret", "mountPath": "/etc/prrte-k8s/secret", "readOnly": true},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }],
            "volumes": [
                {"name": "secret", "secret": {"secretName": "mpi-demo-prrte"}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": ip.to_string(),
            "podIPs": [{"ip": ip.to_string()}],
            "hostIP": "192.168.0.1",
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
            "containerStatuses": [{
                "name": "mpi", "ready": true, "restartCount": 0, "started": true,
                "image": "localhost/prrte-k8s:latest", "imageID": "sha256:0", "containerID": "sandbox://0",
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }],
        },
    })
}

/// Fills the store with an Indexed Job of `n` Running+Ready pods; returns pod 0's name.
fn populate(server: &ApiServer, n: usize) -> Result<String> {
    let store = server.store();
    store
        .create(
            &resources::NAMESPACES,
            "",
            json!({"metadata": {"name": NS}}),
            false,
        )
        .map_err(|e| anyhow::anyhow!("namespace: {e}"))?;
    let job = store
        .create(
            &resources::JOBS,
            NS,
            json!({
                "metadata": {"name": JOB},
                "spec": {
                    "parallelism": n, "completions": n, "completionMode": "Indexed",
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "mpi", "image": "x"}]}},
                },
            }),
            false,
        )
        .map_err(|e| anyhow::anyhow!("job: {e}"))?;
    let uid = job["metadata"]["uid"].as_str().unwrap_or("uid").to_string();
    let mut first = String::new();
    for i in 0..n {
        let p = store
            .create(&resources::PODS, NS, ready_pod(i, &uid), false)
            .map_err(|e| anyhow::anyhow!("pod {i}: {e}"))?;
        if i == 0 {
            first = p["metadata"]["name"].as_str().unwrap_or_default().into();
        }
    }
    Ok(first)
}

/// What one discovery asked of the API server.
#[derive(Debug, Default, Clone, PartialEq)]
struct Requests {
    total: usize,
    lists: usize,
    /// Lists that passed `limit` (pages of a paginated list).
    paged: usize,
    gets: usize,
    watches: usize,
    /// GETs of single pods (must stay at most 1: our own pod).
    pod_gets: usize,
    bytes: u64,
    largest_page_items: Option<u64>,
}

fn summarize(recs: &[RequestRecord]) -> Requests {
    let mut r = Requests {
        total: recs.len(),
        ..Default::default()
    };
    for q in recs {
        r.bytes += q.body_bytes;
        if q.is_watch() {
            r.watches += 1;
        } else if q.is_list() {
            r.lists += 1;
            if let Some(l) = q.param("limit").and_then(|l| l.parse::<u64>().ok()) {
                r.paged += 1;
                r.largest_page_items = Some(r.largest_page_items.unwrap_or(0).max(l));
            }
        } else if q.method == "GET" {
            r.gets += 1;
            if q.path.contains("/pods/") {
                r.pod_gets += 1;
            }
        }
    }
    r
}

/// Runs a command, returns (wall seconds, peak RSS KiB) through `scale max-rss` (a fresh
/// process, so the peak is that command's alone).
fn run_max_rss(cmd: &[String], env: &[(&str, &str)]) -> Result<(f64, u64, String)> {
    let me = std::env::current_exe()?;
    let t0 = Instant::now();
    let out = Command::new(me)
        .arg("max-rss")
        .arg("--")
        .args(cmd)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()?;
    let wall = t0.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let last = text.lines().last().unwrap_or("");
    let kib = last
        .strip_prefix("max-rss-kib ")
        .and_then(|s| s.trim().parse::<u64>().ok());
    match kib {
        Some(k) if out.status.success() => Ok((wall, k, text)),
        _ => bail!(
            "{cmd:?} failed: {}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

fn max_rss(command: &[String]) -> Result<()> {
    use nix::sys::resource::{getrusage, UsageWho};
    let Some((prog, args)) = command.split_first() else {
        bail!("max-rss needs a command");
    };
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    let kib = getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss();
    std::io::stdout().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    if !out.status.success() {
        bail!("{prog} exited with {}", out.status);
    }
    println!("\nmax-rss-kib {kib}");
    Ok(())
}

fn bench_discovery(sizes: &[usize], runs: usize) -> Result<Value> {
    println!(
        "## Discovery (ras k8s / prrte-k8s pods), {} build; load before: {}",
        profile(),
        load()
    );
    println!("Indexed Job of N Running+Ready pods in the sandbox API server (TLS, same machine);");
    println!("discovery infers the selector from its own pod and the count from the Job.\n");
    println!("| pods | in-process discovery, ms | `prrte-k8s pods`, ms | requests (lists/pages, gets, watches) | response bytes | `prrte-k8s pods` peak RSS |");
    println!("| ---: | --- | --- | --- | ---: | ---: |");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for &n in sizes {
        let server = rt.block_on(ApiServer::start(ApiOptions::default()))?;
        let self_pod = populate(&server, n)?;
        let cfg = DiscoveryConfig {
            namespace: Some(NS.into()),
            kubeconfig: Some(server.admin_kubeconfig().to_path_buf()),
            self_pod: Some(self_pod.clone()),
            timeout: Duration::from_secs(120),
            ..Default::default()
        };
        // In process, on a plain thread with its own runtime: what the RAS component does.
        let mut times = Vec::new();
        let mut requests = None;
        for run in 0..=runs {
            server.take_requests();
            let t0 = Instant::now();
            let alloc = std::thread::scope(|s| {
                s.spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    rt.block_on(discovery::discover_with(
                        &cfg,
                        &Environment::default(),
                        &mut |_| {},
                    ))
                })
                .join()
                .expect("discovery thread")
            })?;
            let dt = t0.elapsed().as_secs_f64() * 1e3;
            if alloc.nodes.len() != n || alloc.nodes[n - 1].ip.octets()[0] != 10 {
                bail!("discovery found {} of {n} pods", alloc.nodes.len());
            }
            let r = summarize(&server.take_requests());
            if run > 0 {
                // run 0 warms up (TLS session setup paths, allocator)
                times.push(dt);
            }
            requests = Some(r);
        }
        let requests = requests.expect("at least one run");
        // The command line, a process per run.
        let mut cli_times = Vec::new();
        let mut rss = Vec::new();
        let kc = server.admin_kubeconfig().to_string_lossy().to_string();
        let cmd: Vec<String> = vec![
            bin("prrte-k8s").to_string_lossy().into(),
            "pods".into(),
            "--namespace".into(),
            NS.into(),
            "--kubeconfig".into(),
            kc,
            "--self-pod".into(),
            self_pod.clone(),
            "--hostfile".into(),
        ];
        for run in 0..=runs {
            let (wall, kib, out) = run_max_rss(&cmd, &[])?;
            let lines = out.lines().filter(|l| l.contains("slots=")).count();
            if lines != n {
                bail!("prrte-k8s pods printed {lines} hostfile lines for {n} pods");
            }
            if run > 0 {
                cli_times.push(wall * 1e3);
                rss.push(kib as f64 / 1024.0);
            }
        }
        let cli_requests = summarize(&server.take_requests());
        println!(
            "| {n} | {} | {} | {} ({}/{} of ≤{}), {} ({} pod), {} | {:.1} MiB | {} MiB |",
            stat(&times, 1),
            stat(&cli_times, 1),
            requests.total,
            requests.lists,
            requests.paged,
            requests.largest_page_items.unwrap_or(0),
            requests.gets,
            requests.pod_gets,
            requests.watches,
            requests.bytes as f64 / (1 << 20) as f64,
            stat(&rss, 1),
        );
        rows.push(json!({
            "pods": n,
            "in_process_ms": stat_json(&times),
            "cli_ms": stat_json(&cli_times),
            "cli_peak_rss_mib": stat_json(&rss),
            "requests": {
                "total": requests.total, "lists": requests.lists, "paged_lists": requests.paged,
                "page_limit": requests.largest_page_items, "gets": requests.gets,
                "pod_gets": requests.pod_gets, "watches": requests.watches, "bytes": requests.bytes,
            },
            "cli_requests_all_runs": cli_requests.total,
        }));
        drop(server);
    }
    println!("\nload after: {}", load());
    Ok(json!({"profile": profile(), "rows": rows}))
}

fn breakdown(n: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let server = rt.block_on(ApiServer::start(ApiOptions::default()))?;
    populate(&server, n)?;
    let crt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    crt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(server.admin_kubeconfig())?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        let client = kube::Client::try_from(cfg)?;
        for limit in [None, Some(500u32)] {
            for _ in 0..3 {
                let t0 = Instant::now();
                let mut bytes = Vec::new();
                let mut cont: Option<String> = None;
                loop {
                    let mut q = String::new();
                    if let Some(l) = limit { q.push_str(&format!("limit={l}&")); }
                    if let Some(c) = &cont { q.push_str(&format!("continue={c}&")); }
                    let req = http::Request::get(format!("/api/v1/namespaces/{NS}/pods?{q}")).body(Vec::new())?;
                    let text = client.request_text(req).await?;
                    let v: serde_json::Value = serde_json::from_str(&text)?;
                    cont = v["metadata"]["continue"].as_str().map(String::from);
                    bytes.push(text);
                    if cont.is_none() { break; }
                }
                let t1 = Instant::now();
                let mut pods = 0;
                for b in &bytes {
                    let l: kube::core::ObjectList<k8s_openapi::api::core::v1::Pod> = serde_json::from_str(b)?;
                    pods += l.items.len();
                }
                let t2 = Instant::now();
                let mut v2 = 0;
                for b in &bytes {
                    let l: serde_json::Value = serde_json::from_str(b)?;
                    v2 += l["items"].as_array().map_or(0, |a| a.len());
                }
                let t3 = Instant::now();
                println!("limit {limit:?}: fetch {:.1} ms ({} pages), parse Pod {:.1} ms ({pods}), parse Value {:.1} ms ({v2})",
                    (t1 - t0).as_secs_f64() * 1e3, bytes.len(), (t2 - t1).as_secs_f64() * 1e3, (t3 - t2).as_secs_f64() * 1e3);
            }
        }
        anyhow::Ok(())
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// fan-out

#[path = "support/fanout.rs"]
#[allow(dead_code)] // shared with tests/fanout_auth.rs, which reads more of it
mod fanout;
use fanout::{fanout_round, secret_file, start_agents, stub_prted, Agents};

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
    let round = fanout::fanout_round(agents, secret, Duration::from_secs(60));
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

fn bench_fanout(sizes: &[usize], runs: usize, perf: bool) -> Result<Value> {
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
        let o = fanout::run_round(&agents, &wrong, Duration::from_secs(60));
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

// ---------------------------------------------------------------------------------------------
// footprint

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

fn bench_footprint() -> Result<Value> {
    println!(
        "## Agent footprint ({} build of prrte-k8s-agent)\n",
        profile()
    );
    let dir = tempfile::Builder::new()
        .prefix("prrte-k8s-footprint-")
        .tempdir()?;
    let (secret_path, secret) = secret_file(dir.path())?;
    let prted = stub_prted(dir.path(), "exec sleep 1")?;
    let agents = start_agents(1, dir.path(), &secret_path, &prted)?;
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
        "idle_rss_kib": idle_rss, "idle_hwm_kib": idle_hwm,
        "during_launch_rss_kib": during_rss, "launch_hwm_kib": hwm, "after_rss_kib": after_rss,
        "idle": mem_json(idle), "during_launch": mem_json(during), "after_launch": mem_json(after),
        "idle_threads": idle_threads,
        "idle_rss_by_mapping_kib": idle_parts.iter().map(|(k, v)| json!({"mapping": k, "kib": v})).collect::<Vec<_>>(),
    }))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let what = cli.what.unwrap_or(What::All);
    if let What::MaxRss { command } = &what {
        return max_rss(command);
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "# prrte-k8s scale benchmarks ({cores} cores, {} build)\n",
        profile()
    );
    let mut out = json!({"cores": cores, "profile": profile(), "load_before": load()});
    match what {
        What::Discovery { pods } => out["discovery"] = bench_discovery(&pods, cli.runs)?,
        What::Fanout { agents, perf } => out["fanout"] = bench_fanout(&agents, cli.runs, perf)?,
        What::Footprint => out["footprint"] = bench_footprint()?,
        What::All => {
            out["discovery"] = bench_discovery(&[1000, 10000], cli.runs)?;
            println!();
            out["fanout"] = bench_fanout(&[256, 1024], cli.runs, false)?;
            println!();
            out["footprint"] = bench_footprint()?;
        }
        What::Breakdown { pods } => breakdown(pods)?,
        What::MaxRss { .. } => unreachable!(),
    }
    out["load_after"] = json!(load());
    if let Some(p) = cli.json {
        std::fs::write(&p, serde_json::to_string_pretty(&out)? + "\n")
            .with_context(|| format!("writing {}", p.display()))?;
        println!("\nwrote {}", p.display());
    }
    Ok(())
}
