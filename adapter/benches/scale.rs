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
//! * `channel`: the CPU the agent channel's cryptography takes per connection (the HMAC
//!   challenge-response, the Noise handshake on each side, a launch's sealed frames), and what
//!   the encryption adds to a DVM's start.
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
    about = "prrte-k8s scale benchmarks (discovery, fan-out, agent footprint, channel cost)"
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
    /// The agent whose footprint is measured (default: the one built with this bench, of its
    /// profile); `make bench-scale` gives the build of the `agent` profile, which the runtime
    /// image carries.
    #[arg(long, global = true, value_name = "PATH")]
    footprint_agent: Option<PathBuf>,
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
    /// CPU per connection of the agent channel's cryptography.
    Channel {
        /// Connections per timed run.
        #[arg(long, default_value_t = 2000)]
        connections: usize,
    },
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

/// On-CPU seconds of this process's threads named `name` (from /proc schedstat, ns precision).
fn threads_cpu(name: &str) -> f64 {
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
fn thread_sched() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s
        .split_whitespace()
        .map(|v| v.parse::<f64>().unwrap_or(0.0) / 1e9);
    (f.next().unwrap_or(0.0), f.next().unwrap_or(0.0))
}

/// Name of the threads that run the sandbox API server in the discovery benchmark.
const SERVER_THREADS: &str = "sandbox-api";

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
    /// Time the API server spent on these requests (until each response was ready to send).
    server_ms: f64,
}

fn summarize(recs: &[RequestRecord]) -> Requests {
    let mut r = Requests {
        total: recs.len(),
        ..Default::default()
    };
    for q in recs {
        r.bytes += q.body_bytes;
        r.server_ms += q.server_us as f64 / 1e3;
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
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    let kib = usage.max_rss();
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e3 + t.tv_usec() as f64 / 1e3;
    let cpu_ms = tv(usage.user_time()) + tv(usage.system_time());
    std::io::stdout().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    if !out.status.success() {
        bail!("{prog} exited with {}", out.status);
    }
    println!("\ncpu-ms {cpu_ms:.1}\nmax-rss-kib {kib}");
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
    println!("Wall times depend on the machine's load (stated above and below); CPU times do much");
    println!("less: client CPU = discovery's own (all its threads: TLS, decoding, ordering), API");
    println!(
        "server CPU = the sandbox server's threads, server wall = its handlers' time until each"
    );
    println!(
        "response was ready; run-queue wait = time discovery's thread was runnable but had no"
    );
    println!("CPU (the machine's load). `prrte-k8s pods` = a fresh process (start-up included).\n");
    println!("| pods | in-process discovery (wall), ms | client CPU, ms | API server CPU, ms | API server handlers (wall), ms | discovery thread run-queue wait, ms | `prrte-k8s pods` (wall), ms | `prrte-k8s pods` CPU, ms | requests (lists/pages, gets, watches) | response bytes | `prrte-k8s pods` peak RSS |");
    println!("| ---: | --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: |");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SERVER_THREADS)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    let mut all_phases = Vec::new();
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
        let mut server_ms = Vec::new();
        let mut client_cpu = Vec::new();
        let mut runq_ms = Vec::new();
        let mut server_cpu = Vec::new();
        let mut requests = None;
        let mut selector = String::new();
        for run in 0..=runs {
            server.take_requests();
            let (s0, p0) = (threads_cpu(SERVER_THREADS), self_cpu());
            let t0 = Instant::now();
            let alloc = std::thread::scope(|s| {
                s.spawn(|| {
                    let (_, w0) = thread_sched();
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    let r = rt.block_on(discovery::discover_with(
                        &cfg,
                        &Environment::default(),
                        &mut |_| {},
                    ));
                    r.map(|a| (a, (thread_sched().1 - w0) * 1e3))
                })
                .join()
                .expect("discovery thread")
            })?;
            let (alloc, runq) = alloc;
            let dt = t0.elapsed().as_secs_f64() * 1e3;
            let scpu = (threads_cpu(SERVER_THREADS) - s0) * 1e3;
            let ccpu = (self_cpu() - p0) * 1e3 - scpu;
            if alloc.nodes.len() != n || alloc.nodes[n - 1].ip.octets()[0] != 10 {
                bail!("discovery found {} of {n} pods", alloc.nodes.len());
            }
            let r = summarize(&server.take_requests());
            if run > 0 {
                // run 0 warms up (TLS session setup paths, allocator)
                times.push(dt);
                server_ms.push(r.server_ms);
                client_cpu.push(ccpu);
                runq_ms.push(runq);
                server_cpu.push(scpu);
            }
            selector = alloc.selector;
            requests = Some(r);
        }
        let requests = requests.expect("at least one run");
        // The command line, a process per run.
        let mut cli_times = Vec::new();
        let mut cli_cpu = Vec::new();
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
            let cpu_ms = out
                .lines()
                .find_map(|l| l.strip_prefix("cpu-ms "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(f64::NAN);
            let lines = out.lines().filter(|l| l.contains("slots=")).count();
            if lines != n {
                bail!("prrte-k8s pods printed {lines} hostfile lines for {n} pods");
            }
            if run > 0 {
                cli_times.push(wall * 1e3);
                cli_cpu.push(cpu_ms);
                rss.push(kib as f64 / 1024.0);
            }
        }
        let cli_requests = summarize(&server.take_requests());
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} ({}/{} of ≤{}), {} ({} pod), {} | {:.1} MiB | {} MiB |",
            stat(&times, 1),
            stat(&client_cpu, 1),
            stat(&server_cpu, 1),
            stat(&server_ms, 1),
            stat(&runq_ms, 1),
            stat(&cli_times, 1),
            stat(&cli_cpu, 1),
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
            "api_server_handlers_ms": stat_json(&server_ms),
            "client_cpu_ms": stat_json(&client_cpu),
            "api_server_cpu_ms": stat_json(&server_cpu),
            "cli_cpu_ms": stat_json(&cli_cpu),
            "run_queue_wait_ms": stat_json(&runq_ms),
            "cli_ms": stat_json(&cli_times),
            "cli_peak_rss_mib": stat_json(&rss),
            "requests": {
                "total": requests.total, "lists": requests.lists, "paged_lists": requests.paged,
                "page_limit": requests.largest_page_items, "gets": requests.gets,
                "pod_gets": requests.pod_gets, "watches": requests.watches, "bytes": requests.bytes,
            },
            "cli_requests_all_runs": cli_requests.total,
        }));
        let ph = rt.block_on(phases(&server, &cfg, &selector, runs))?;
        let target = target_ms(n);
        let missed = target.is_some_and(|t| median(&times) > t);
        let profile = if missed { perf_top(&cmd, n) } else { None };
        let cpu = [median(&client_cpu), median(&server_cpu), median(&runq_ms)];
        all_phases.push((n, median(&times), target, ph, profile, cpu));
        drop(server);
    }
    println!("\nload after: {}", load());
    let mut phase_rows = Vec::new();
    for (n, total, target, ph, profile, cpu) in &all_phases {
        phase_rows.push(print_phases(
            *n,
            *total,
            *target,
            ph,
            profile.as_deref(),
            *cpu,
        ));
    }
    let tracking = bench_tracking(sizes)?;
    Ok(
        json!({"profile": profile(), "rows": rows, "phases": phase_rows, "readiness_tracking": tracking}),
    )
}

/// The targets of issue 13: 50 ms at 1,000 pods, 500 ms at 10,000.
fn target_ms(pods: usize) -> Option<f64> {
    match pods {
        1000 => Some(50.0),
        10000 => Some(500.0),
        _ => None,
    }
}

/// Where one discovery's time goes, each phase timed alone (medians over runs, ms).
#[derive(Debug, Default, Clone)]
struct Phases {
    /// Reading the kubeconfig and building the client (rustls config, CA parsing).
    setup: Vec<f64>,
    /// The first request (our own pod): TCP connect + TLS handshake + GET.
    first: Vec<f64>,
    /// Server time of that request.
    first_server: Vec<f64>,
    /// All list pages, from sending each request to holding its body (server + transfer).
    pages_wait: Vec<f64>,
    /// Server time of the pages (store walk, label filter, serialization).
    pages_server: Vec<f64>,
    /// Decoding the pages into pods (ours).
    pages_decode: Vec<f64>,
    /// The owning Job's GET.
    job: Vec<f64>,
    /// Classifying, ordering and building the nodes (ours).
    order: Vec<f64>,
    pages: usize,
    bytes: u64,
}

/// Runs the requests discovery makes one by one, timing each phase (same client, same
/// requests, same decoding as `discover_with`).
async fn phases(
    server: &ApiServer,
    cfg: &DiscoveryConfig,
    selector: &str,
    runs: usize,
) -> Result<Phases> {
    use prrte_k8s::discovery::{client, list, tracker::PodTracker, SlotsPolicy};
    let mut ph = Phases::default();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let srv = |server: &ApiServer| -> (f64, u64, usize) {
        let recs = server.take_requests();
        (
            recs.iter().map(|r| r.server_us as f64 / 1e3).sum(),
            recs.iter().map(|r| r.body_bytes).sum(),
            recs.len(),
        )
    };
    let self_pod = cfg.self_pod.clone().unwrap_or_default();
    for run in 0..=runs {
        server.take_requests();
        let t = Instant::now();
        let resolved =
            client::resolve_config(cfg.kubeconfig.as_deref(), &Environment::default()).await?;
        let api = client::client_from_config(resolved, Duration::from_secs(30))?;
        let setup = ms(t);
        let t = Instant::now();
        let req = http::Request::get(format!("/api/v1/namespaces/{NS}/pods/{self_pod}"))
            .body(Vec::new())?;
        let own: k8s_openapi::api::core::v1::Pod = api.client.request(req).await?;
        let first = ms(t);
        let (first_server, _, _) = srv(server);
        anyhow::ensure!(own.metadata.name.as_deref() == Some(self_pod.as_str()));
        let (mut wait, mut decode) = (0.0, 0.0);
        let mut pods = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut lp = kube::api::ListParams::default()
                .labels(selector)
                .limit(list::PAGE_SIZE);
            if let Some(c) = &token {
                lp = lp.continue_token(c);
            }
            let req =
                kube::core::Request::new(format!("/api/v1/namespaces/{NS}/pods")).list(&lp)?;
            let t = Instant::now();
            let text = api.client.request_text(req).await?;
            wait += ms(t);
            let t = Instant::now();
            let (meta, items) = list::decode_page(text.as_bytes())?;
            decode += ms(t);
            pods.extend(items);
            token = meta.continue_.filter(|c| !c.is_empty());
            if token.is_none() {
                break;
            }
        }
        let (pages_server, bytes, pages) = srv(server);
        let t = Instant::now();
        let req = http::Request::get(format!("/apis/batch/v1/namespaces/{NS}/jobs/{JOB}"))
            .body(Vec::new())?;
        let _job: k8s_openapi::api::batch::v1::Job = api.client.request(req).await?;
        let job = ms(t);
        server.take_requests();
        let t = Instant::now();
        let n = pods.len();
        let mut tracker = PodTracker::new(pods);
        let chosen = tracker.first_ready(n);
        let chosen = tracker.take(&chosen);
        let nodes = discovery::build_nodes(&chosen, NS, SlotsPolicy::Auto, |_| false)?;
        let order = ms(t);
        anyhow::ensure!(nodes.len() == n);
        if run == 0 {
            continue;
        }
        ph.setup.push(setup);
        ph.first.push(first);
        ph.first_server.push(first_server);
        ph.pages_wait.push(wait);
        ph.pages_server.push(pages_server);
        ph.pages_decode.push(decode);
        ph.job.push(job);
        ph.order.push(order);
        ph.pages = pages;
        ph.bytes = bytes;
    }
    Ok(ph)
}

/// Prints one size's phases and, if its target was missed, what bounds it; returns the JSON.
fn print_phases(
    n: usize,
    total: f64,
    target: Option<f64>,
    ph: &Phases,
    perf: Option<&str>,
    [client_cpu, server_cpu, runq]: [f64; 3],
) -> Value {
    let transfer: Vec<f64> = ph
        .pages_wait
        .iter()
        .zip(&ph.pages_server)
        .map(|(w, s)| w - s)
        .collect();
    let parts: Vec<(&str, &Vec<f64>)> = vec![
        ("client setup (kubeconfig, rustls config)", &ph.setup),
        (
            "first request: connect + TLS handshake + GET own pod",
            &ph.first,
        ),
        (
            "list pages: API server (store walk, selector, serialization)",
            &ph.pages_server,
        ),
        (
            "list pages: transfer (TLS, HTTP/1.1, body collection)",
            &transfer,
        ),
        ("list pages: decoding (ours)", &ph.pages_decode),
        ("GET the Job", &ph.job),
        ("classify + order + nodes (ours)", &ph.order),
    ];
    println!(
        "\n### Where the time goes at {n} pods ({} pages, {:.1} MiB; each phase timed alone, median [min-max] ms)\n",
        ph.pages,
        ph.bytes as f64 / (1 << 20) as f64
    );
    println!("| phase | ms |\n| --- | --- |");
    for (name, v) in &parts {
        println!("| {name} | {} |", stat(v, 2));
    }
    println!(
        "| (of the first request: API server) | {} |",
        stat(&ph.first_server, 2)
    );
    let mut sorted: Vec<(&str, f64)> = parts.iter().map(|(n, v)| (*n, median(v))).collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let sum: f64 = sorted.iter().map(|(_, v)| v).sum();
    let bound = match target {
        Some(t) if total > t => {
            let top: Vec<String> = sorted
                .iter()
                .take(3)
                .map(|(n, v)| format!("{n} {v:.1} ms ({:.0}%)", v * 100.0 / sum))
                .collect();
            let line = format!(
                "target {t:.0} ms MISSED at {n} pods ({total:.1} ms wall; CPU spent meanwhile: client {client_cpu:.1} ms on up to 2 threads, since the next page is fetched while one decodes, API server {server_cpu:.1} ms; run-queue wait {runq:.1} ms): bound by {}",
                top.join("; ")
            );
            println!("\n{line}");
            if let Some(p) = perf {
                println!("perf profile of `prrte-k8s pods` (client only; self time, top symbols):\n```\n{p}```");
            }
            Some(line)
        }
        Some(t) => {
            println!(
                "\ntarget {t:.0} ms met at {n} pods ({total:.1} ms); largest phase: {} {:.1} ms",
                sorted[0].0, sorted[0].1
            );
            None
        }
        None => None,
    };
    json!({
        "pods": n, "pages": ph.pages, "bytes": ph.bytes,
        "setup_ms": stat_json(&ph.setup), "first_request_ms": stat_json(&ph.first),
        "first_request_server_ms": stat_json(&ph.first_server),
        "pages_server_ms": stat_json(&ph.pages_server), "pages_transfer_ms": stat_json(&transfer),
        "pages_decode_ms": stat_json(&ph.pages_decode), "job_get_ms": stat_json(&ph.job),
        "order_ms": stat_json(&ph.order), "missed": bound, "perf_top": perf,
    })
}

/// Top symbols (self time) of a `perf record -g` of the command, if perf is installed.
fn perf_top(cmd: &[String], n: usize) -> Option<String> {
    let dir = tempfile::Builder::new()
        .prefix("prrte-k8s-perf-")
        .tempdir()
        .ok()?;
    let data = dir.path().join("perf.data");
    let rec = Command::new("perf")
        .args(["record", "-g", "-F", "4999", "-q", "-o"])
        .arg(&data)
        .arg("--")
        .args(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    if !rec.success() {
        return None;
    }
    let out = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "dso,symbol",
            "-g",
            "none",
            "--percent-limit",
            "1.5",
            "-i",
        ])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(12)
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let end = words.iter().rposition(|w| *w != "-").map_or(0, |i| i + 1);
            format!("  {}", words[..end].join(" "))
        })
        .collect();
    (!lines.is_empty()).then(|| format!("{n} pods:\n{}\n", lines.join("\n")))
}

/// The readiness wait's bookkeeping per watch event while pods become ready one by one:
/// the incremental tracker against classifying and sorting every pod on each event (the
/// former wait), side by side.
fn bench_tracking(sizes: &[usize]) -> Result<Value> {
    use prrte_k8s::discovery::{
        record::PodRecord,
        tracker::{self, PodTracker},
        wait,
    };
    println!("\n### Readiness wait bookkeeping while N pods become ready one by one (per watch event, µs)\n");
    println!("| pods | incremental tracker, µs/event | full classify + sort per event, µs/event | ratio |");
    println!("| ---: | --- | --- | ---: |");
    let mut rows = Vec::new();
    for &n in sizes {
        let pod = |i: usize, ready: bool| -> Result<PodRecord> {
            let mut v = ready_pod(i, "uid");
            v["metadata"]["name"] = json!(format!("{JOB}-{i}-x{:05}", (i * 7919) % 100_000));
            if !ready {
                v["status"]["conditions"][3]["status"] = json!("False");
            }
            Ok(serde_json::from_value(v)?)
        };
        let unready: Vec<PodRecord> = (0..n).map(|i| pod(i, false)).collect::<Result<_>>()?;
        // Arrival order scrambled (a prime stride), as pods become ready in any order.
        let arrivals: Vec<PodRecord> = (0..n)
            .map(|k| pod((k * 7919) % n, true))
            .collect::<Result<_>>()?;
        let t = Instant::now();
        let mut tracker = PodTracker::new(unready.clone());
        for p in arrivals.iter().cloned() {
            tracker.apply(p);
            std::hint::black_box(tracker.ready_len());
            std::hint::black_box(tracker.first_not_ready(wait::WAITING_FOR_SHOWN));
        }
        anyhow::ensure!(tracker.ready_len() == n);
        let inc = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        // The full re-evaluation over (at most) 200 events (it is O(n log n) each).
        let events = n.min(200);
        let mut map: std::collections::BTreeMap<String, PodRecord> = unready
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        let t = Instant::now();
        for p in arrivals.iter().take(events).cloned() {
            map.insert(p.metadata.name.clone().unwrap_or_default(), p);
            let e = tracker::evaluate(map.values());
            std::hint::black_box(
                e.not_ready
                    .iter()
                    .map(|(n, _)| n.clone())
                    .collect::<Vec<_>>(),
            );
        }
        let full = t.elapsed().as_secs_f64() * 1e6 / events as f64;
        println!(
            "| {n} | {inc:.2} | {full:.0} (over {events} events) | {:.0}x |",
            full / inc
        );
        rows.push(json!({"pods": n, "incremental_us_per_event": inc, "full_sort_us_per_event": full, "full_sort_events_timed": events}));
    }
    Ok(json!(rows))
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
// the agent channel's cryptography

/// The channel's CPU per connection (`sandbox::bench::channel_cost`), and what encryption adds
/// to a DVM's start at a few sizes.
fn bench_channel(runs: usize, connections: usize) -> Value {
    let c = sandbox::bench::channel_cost::measure(runs, connections);
    println!(
        "== agent channel: CPU per connection, µs, median [min-max] of {runs} runs of \
         {connections} connections (launch request sealed: {} bytes)",
        c.request_bytes
    );
    println!("{:<42} | {:<20} | {:<20}", "step", "launcher", "agent");
    for (step, l, a) in [
        (
            "HMAC challenge-response (both sides)",
            stat(&c.hmac_us, 1),
            "(left: both)".to_string(),
        ),
        (
            "Noise handshake (X25519, PSK)",
            stat(&c.noise_launcher_us, 1),
            stat(&c.noise_agent_us, 1),
        ),
        (
            "launch, started, exited sealed/opened",
            stat(&c.frames_launcher_us, 1),
            stat(&c.frames_agent_us, 1),
        ),
    ] {
        println!("{step:<42} | {l:<20} | {a:<20}");
    }
    let (launcher, agent) = (c.launcher_added_us(), c.agent_added_us());
    let mut sizes = vec![];
    for pods in [4u32, 16, 32, 1024] {
        let ms = launcher * f64::from(pods - 1) / 1e3;
        println!(
            "encryption's CPU for a DVM of {pods:>4} pods: launcher {ms:.2} ms for its {} \
             daemons, each agent {:.3} ms",
            pods - 1,
            agent / 1e3
        );
        sizes.push(json!({"pods": pods, "launcher_ms": ms, "agent_ms": agent / 1e3}));
    }
    json!({
        "connections_per_run": connections,
        "launch_request_sealed_bytes": c.request_bytes,
        "hmac_us": stat_json(&c.hmac_us),
        "noise_handshake_launcher_us": stat_json(&c.noise_launcher_us),
        "noise_handshake_agent_us": stat_json(&c.noise_agent_us),
        "frames_launcher_us": stat_json(&c.frames_launcher_us),
        "frames_agent_us": stat_json(&c.frames_agent_us),
        "added_by_encryption": sizes,
    })
}

// ---------------------------------------------------------------------------------------------
// fan-out

#[path = "support/fanout.rs"]
#[allow(dead_code)] // shared with tests/fanout_auth.rs, which reads more of it
mod fanout;
use fanout::{
    agent_bin, fanout_round, secret_file, self_cpu, start_agents, start_agents_of, stub_prted,
    Agents,
};

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

fn bench_footprint(agent: Option<&Path>) -> Result<Value> {
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
        What::Footprint => out["footprint"] = bench_footprint(cli.footprint_agent.as_deref())?,
        What::Channel { connections } => out["channel"] = bench_channel(cli.runs, connections),
        What::All => {
            out["discovery"] = bench_discovery(&[1000, 10000], cli.runs)?;
            println!();
            out["fanout"] = bench_fanout(&[256, 1024], cli.runs, false)?;
            println!();
            out["footprint"] = bench_footprint(cli.footprint_agent.as_deref())?;
            println!();
            out["channel"] = bench_channel(cli.runs, 2000);
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
