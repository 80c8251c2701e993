//! The grow benchmark: a small elastic DVM (an Indexed Job of [`START`] agent pods, 2 slots
//! each, whose pod-0 agent runs the DVM, as `prrte-k8s manifest --elastic` renders it) gets N
//! more pods through `prrte-k8s grow N` run in pod 1; where the seconds go from the request to
//! the new daemons in the DVM. Each run starts from a fresh DVM of [`START`] pods (its own
//! sandbox cluster), so every size grows the same DVM. Beside it, in the same run, the plain
//! DVM start through the agents at the grown size (START + N pods: what restarting the DVM at
//! the new size would cost instead).
//!
//! In the same run, the same growth through a PMIx allocation request (`PMIX_ALLOC_EXTEND` of
//! N nodes from a tool in pod 1, answered by `ras k8s`'s `modify`), and its `PMIX_ALLOC_RELEASE`
//! afterwards, each timed request to answer.
//!
//! The phases come from one clock, this program's: the request (the grow command spawned), the
//! Job's `parallelism` seen raised in the cluster's store, every pod of the Job seen Ready
//! there, and the grow command's exit (it exits once `prun --add-host` returns, i.e. the new
//! prteds have reported to the DVM). The store is polled every few milliseconds.

use crate::results::Variant;
use crate::run::{bench_pods, register_dir, INTERRUPTED};
use crate::stats::col;
use anyhow::{bail, Context, Result};
use sandbox::api::resources::{JOBS, PODS};
use sandbox::cluster::pod_ready;
use sandbox::harness;
use sandbox::harness::mpijob::{wait_for_text, ElasticJob, Job, JobSpec, NS};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The pods of the DVM every grow starts from.
pub const START: usize = 2;
/// How often the store is read while the grow runs.
const POLL: Duration = Duration::from_millis(5);
/// The Job's name (each run has its own cluster).
const NAME: &str = "grow";

/// Where the seconds of one grow went.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrowSample {
    /// The grow command spawned until the Job's parallelism is raised in the store.
    pub to_patch: f64,
    /// Workload patched until every pod of the Job is Ready.
    pub to_ready: f64,
    /// Every pod Ready until the grow command exits (the add-host round: the new prteds
    /// started by the k8s PLM and reported to the DVM).
    pub to_dvm: f64,
    /// The request until the grow command exits.
    pub total: f64,
    /// Pods running the DVM's daemon afterwards (prte in pod 0, one prted in each other pod).
    pub daemons: usize,
}

/// One allocation request pair through `ras k8s`'s `modify`: `PMIX_ALLOC_EXTEND` of N nodes,
/// then `PMIX_ALLOC_RELEASE` of the same N, each request to answer as the requesting tool
/// measures it (tests/programs/alloc_request.c, run in pod 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocSample {
    /// `EXTEND` sent until answered: the workload raised, the pods Ready, their daemons in the
    /// DVM.
    pub extend: f64,
    /// `RELEASE` sent until answered: the daemons ended, the workload lowered, the pods gone.
    pub release: f64,
}

/// One grow size: the grows, the allocation requests of the same size, and the plain DVM start
/// of the grown size (DVM-ready seconds).
pub struct GrowRow {
    pub new_pods: usize,
    pub grows: Vec<GrowSample>,
    pub allocs: Vec<AllocSample>,
    pub plain: Vec<f64>,
    pub load: f64,
}

fn spec(pods: usize) -> JobSpec<'static> {
    let mut spec = JobSpec::persistent_dvm(NAME, pods);
    spec.cpus = vec!["2"];
    spec.agent_args = vec![vec!["--dvm-head".into(), "auto".into()]];
    spec
}

fn parallelism(job: &Job) -> usize {
    job.cluster
        .store()
        .get(&JOBS, NS, &job.name)
        .ok()
        .and_then(|j| j["spec"]["parallelism"].as_u64())
        .unwrap_or(0) as usize
}

fn ready_pods(job: &Job) -> usize {
    job.cluster
        .store()
        .list(&PODS, Some(NS), &Default::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|p| p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == job.name.as_str())
        .filter(|p| pod_ready(p))
        .count()
}

/// Pods running one PRRTE daemon: prte in pod 0 (the DVM head), a prted in each other.
fn daemons(job: &Job) -> Result<usize> {
    let mut n = 0;
    for i in 0..job.pods.len() {
        let comm = if i == 0 { "prte" } else { "prted" };
        n += usize::from(job.pids_in_pod(i, comm)?.len() == 1);
    }
    Ok(n)
}

/// `prrte-k8s ARGS` in pod `i`, bounded; fails with its output unless it succeeds.
fn prrte_k8s(job: &Job, i: usize, args: &[&str], limit: Duration) -> Result<String> {
    let exe = harness::workspace_bin("prrte-k8s")?;
    let mut argv = vec![exe.to_str().context("the tool's path")?];
    argv.extend(args);
    let out = job.exec_in_pod(i, &argv, limit)?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("prrte-k8s {} in pod {i} failed: {text}", args.join(" "));
    }
    Ok(text)
}

/// One fresh DVM of [`START`] pods grown by `n`, timed; the DVM ended afterwards.
async fn one_grow(n: usize, limit: Duration) -> Result<GrowSample> {
    let mut job = ElasticJob::start(spec(START), START + n).await?;
    register_dir(&job.dir);
    for i in 0..START {
        let uri = job.pod_tmp(i).join("dvm/dvm.uri");
        wait_for_text(&uri, "tcp4://", limit).context("the DVM of the first pods")?;
    }
    let exe = harness::workspace_bin("prrte-k8s")?;
    let exe = exe.to_str().context("the tool's path")?;
    let mut cmd = job
        .cluster
        .pod_exec(&job.pods[1], &[exe, "grow", &n.to_string()])?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let asked = Instant::now();
    let mut child = cmd.spawn().context("spawning prrte-k8s grow")?;
    let (mut patched, mut ready) = (None, None);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        let now = Instant::now();
        if patched.is_none() && parallelism(&job) >= START + n {
            patched = Some(now);
        }
        if patched.is_some() && ready.is_none() && ready_pods(&job) >= START + n {
            ready = Some(now);
        }
        if now > asked + limit || INTERRUPTED.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("prrte-k8s grow {n} did not end within {limit:?}");
        }
        tokio::time::sleep(POLL).await;
    };
    let done = Instant::now();
    let out = child.wait_with_output()?;
    if !status.success() {
        bail!(
            "prrte-k8s grow {n} failed ({status}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let patched =
        patched.context("the grow ended but its Job's parallelism was not seen raised")?;
    // The grow waits for its pods to be Ready before adding them; within one poll of its end.
    let ready = ready.unwrap_or(done);
    job.refresh(START + n).await?;
    let daemons = daemons(&job)?;
    prrte_k8s(&job, 0, &["pterm"], limit)?;
    job.wait_no_prteds(Duration::from_secs(30))?;
    let s = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64();
    Ok(GrowSample {
        to_patch: s(asked, patched),
        to_ready: s(patched, ready),
        to_dvm: s(ready, done),
        total: s(asked, done),
        daemons,
    })
}

/// The answer's `ELAPSED_MS` of one request through the tool, in seconds; fails unless it
/// succeeded.
fn request(
    job: &Job,
    tool: &std::path::Path,
    uri: &str,
    args: &[&str],
    limit: Duration,
) -> Result<f64> {
    let mut argv = vec![tool.to_str().context("the tool's path")?, uri];
    argv.extend(args);
    let out = job.exec_in_pod(1, &argv, limit)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "allocation request {} failed: {text}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ms: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("ELAPSED_MS="))
        .context("the tool printed no ELAPSED_MS")?
        .trim()
        .parse()?;
    Ok(ms / 1e3)
}

/// One fresh DVM of [`START`] pods extended by `n` nodes and released by the same `n` through
/// PMIx allocation requests; the DVM ended afterwards.
async fn one_alloc(n: usize, tool: &std::path::Path, limit: Duration) -> Result<AllocSample> {
    let job = ElasticJob::start(spec(START), START + n).await?;
    register_dir(&job.dir);
    for i in 0..START {
        let uri = job.pod_tmp(i).join("dvm/dvm.uri");
        wait_for_text(&uri, "tcp4://", limit).context("the DVM of the first pods")?;
    }
    let uri = std::fs::read_to_string(job.pod_tmp(0).join("dvm/dvm.uri"))?;
    let uri = uri.trim();
    let nodes = format!("nodes={n}");
    let extend = request(&job, tool, uri, &["extend", &nodes], limit)?;
    if parallelism(&job) != START + n {
        bail!(
            "the extension answered but the Job has {} pods",
            parallelism(&job)
        );
    }
    let release = request(&job, tool, uri, &["release", &nodes], limit)?;
    if parallelism(&job) != START {
        bail!(
            "the release answered but the Job has {} pods",
            parallelism(&job)
        );
    }
    prrte_k8s(&job, 0, &["pterm"], limit)?;
    job.wait_no_prteds(Duration::from_secs(30))?;
    Ok(AllocSample { extend, release })
}

/// Every grow size: `runs` grows from a fresh DVM, then the plain DVM start through the
/// agents at the grown size, `runs` times.
pub async fn bench_grow(sizes: &[usize], runs: usize, limit: Duration) -> Result<Vec<GrowRow>> {
    let mut rows = Vec::new();
    for &n in sizes {
        let load = crate::host::load_avg();
        let mut grows = Vec::new();
        for r in 0..runs {
            if INTERRUPTED.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            eprintln!("[grow {START} -> {}] run {r}", START + n);
            grows.push(
                one_grow(n, limit)
                    .await
                    .with_context(|| format!("grow by {n}, run {r}"))?,
            );
        }
        let mut allocs = Vec::new();
        let dir = harness::TestDir::new("bench-alloc")?;
        let tool =
            harness::pmix_program(dir.path(), "alloc_request", &["-O1", "-Wall", "-Werror"])?;
        for r in 0..runs {
            if INTERRUPTED.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            eprintln!("[allocation request +{n} / -{n}] run {r}");
            allocs.push(
                one_alloc(n, &tool, limit)
                    .await
                    .with_context(|| format!("allocation requests of {n}, run {r}"))?,
            );
        }
        let row = bench_pods(START + n, runs, 0, &[Variant::Agent], limit)
            .await
            .with_context(|| format!("the plain DVM start of {} pods", START + n))?;
        let plain = col(&row, Variant::Agent, |s| s.ready).unwrap_or_default();
        rows.push(GrowRow {
            new_pods: n,
            grows,
            allocs,
            plain,
            load,
        });
    }
    Ok(rows)
}
