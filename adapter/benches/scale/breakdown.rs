//! Where discovery's time goes (`breakdown`, and beside `discovery`'s timed runs): each phase
//! timed alone, perf's top symbols, and the readiness wait's bookkeeping per watch event.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::discovery::{populate, ready_pod, JOB, NS};
use crate::stats::{median, stat, stat_json};
use anyhow::Result;
use prrte_k8s::discovery::client::Environment;
use prrte_k8s::discovery::{self, DiscoveryConfig};
use sandbox::api::{ApiOptions, ApiServer};
use serde_json::{json, Value};

/// Where one discovery's time goes, each phase timed alone (medians over runs, ms).
#[derive(Debug, Default, Clone)]
pub(crate) struct Phases {
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
pub(crate) async fn phases(
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
pub(crate) fn print_phases(
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
pub(crate) fn perf_top(cmd: &[String], n: usize) -> Option<String> {
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
pub(crate) fn bench_tracking(sizes: &[usize]) -> Result<Value> {
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

pub(crate) fn breakdown(n: usize) -> Result<()> {
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
