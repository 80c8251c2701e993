//! `discovery`: `ras k8s` discovery of N Running+Ready pods of an Indexed Job in the sandbox
//! API server: time, API requests, and the peak RSS of a `prrte-k8s pods` process (`max-rss`).

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::breakdown::{bench_tracking, perf_top, phases, print_phases};
use crate::host::{bin, load, profile, thread_sched, threads_cpu, SERVER_THREADS};
use crate::stats::{median, stat, stat_json};
use crate::support::self_cpu;
use anyhow::{bail, Result};
use prrte_k8s::discovery::client::Environment;
use prrte_k8s::discovery::{self, DiscoveryConfig};
use sandbox::api::{resources, ApiOptions, ApiServer, RequestRecord};
use serde_json::{json, Value};

pub(crate) const NS: &str = "scale";
pub(crate) const JOB: &str = "mpi";

/// The pod of index `i` of an Indexed Job of `n` pods, Running and Ready, as a kubelet and the
/// Job controller leave it (labels, owner, two containers' worth of spec, conditions).
pub(crate) fn ready_pod(i: usize, job_uid: &str) -> Value {
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
pub(crate) fn populate(server: &ApiServer, n: usize) -> Result<String> {
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

pub(crate) fn max_rss(command: &[String]) -> Result<()> {
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

pub(crate) fn bench_discovery(sizes: &[usize], runs: usize) -> Result<Value> {
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
