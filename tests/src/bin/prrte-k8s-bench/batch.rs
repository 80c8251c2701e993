//! The batch-Job benchmark: a Job rendered by `prrte-k8s manifest --pods N ... -- mpirun -n N
//! true`, applied to a sandbox cluster and followed until it is Complete, split where the
//! seconds go; beside it, in the same cluster, the same command run in an already running DVM
//! of N pods (`prrte-k8s prun -n N true`).
//!
//! The times come from one clock: the wall clock of this machine, read by this program (apply,
//! every pod Ready, Job Complete, polled every few milliseconds in the cluster's store) and by
//! the launcher pod's agent (its log's timestamps of "running the job's command" and "the job's
//! command ended").

use crate::run::INTERRUPTED;
use anyhow::{bail, Context, Result};
use k8s_openapi::jiff::Timestamp;
use sandbox::api::resources::{JOBS, PODS};
use sandbox::api::store::DeleteOptions;
use sandbox::cluster::{pod_ready, Cluster, ClusterOptions};
use sandbox::harness::{self, TestDir};
use serde_json::Value;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

const NS: &str = "default";
/// The example application image `make image` builds (the agent as entrypoint, Open MPI on
/// PRRTE with the k8s components).
pub const APP: &str = "localhost/prrte-k8s-allreduce:latest";
/// How often the store is read while a phase is awaited.
const POLL: Duration = Duration::from_millis(5);
/// The launcher's log lines that open and close the command's run.
const STARTED: &str = "batch launcher: running the job's command";
const ENDED: &str = "batch launcher: the job's command ended";
/// The launcher's log line once the API shows every worker's pod finished (it then exits).
const WORKERS_DONE: &str = "batch launcher: every worker pod is finished";

/// Where the seconds of one batch Job went, from `kubectl apply` on.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchSample {
    /// Apply until every pod of the Job is Ready.
    pub pods_ready: f64,
    /// Every pod Ready until the launcher starts the command.
    pub to_command: f64,
    /// The command's run in the launcher (`mpirun`: DVM start, the ranks, the DVM's end).
    pub command: f64,
    /// The command ended until the launcher sees every worker's pod finished in the API (the
    /// workers' agents exit, their kubelet reports it); 0 without that log line.
    pub to_workers_done: f64,
    /// Then until the Job is Complete (the launcher exits, its pod succeeds, the Job
    /// controller marks the Job).
    pub to_complete: f64,
    /// Apply until Complete.
    pub total: f64,
}

impl BatchSample {
    /// What the Job costs beyond its pods' start-up and the command's run in a running DVM.
    pub fn overhead(&self, in_dvm: f64) -> f64 {
        self.total - self.pods_ready - in_dvm
    }
}

/// One pod count: the batch Jobs, and the same command in a running DVM (seconds per run).
pub struct BatchRow {
    pub pods: usize,
    pub jobs: Vec<BatchSample>,
    pub in_dvm: Vec<f64>,
    pub load: f64,
}

/// Seconds from `a` to `b`.
pub(crate) fn secs(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// `prrte-k8s manifest --name NAME --pods N --image APP ... [-- COMMAND]`.
fn manifest(name: &str, pods: usize, command: &[String]) -> Result<String> {
    let mut c = Command::new(harness::workspace_bin("prrte-k8s")?);
    c.args(["manifest", "--name", name, "--pods", &pods.to_string()])
        .args(["--image", APP, "--image-pull-policy", "Never"]);
    if !command.is_empty() {
        c.arg("--").args(command);
    }
    let out = harness::run_with_timeout(c, Duration::from_secs(30))?;
    if !out.status.success() {
        bail!(
            "prrte-k8s manifest failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The pods of Job `name`, by completion index.
pub(crate) fn job_pods(cluster: &Cluster, name: &str) -> Vec<std::sync::Arc<Value>> {
    let mut pods: Vec<_> = cluster
        .store()
        .list(&PODS, Some(NS), &Default::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == name)
        .collect();
    pods.sort_by_key(|p| {
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .and_then(|s| s.parse::<u32>().ok())
            .unwrap_or(u32::MAX)
    });
    pods
}

pub(crate) fn has_condition(job: &Value, ty: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == ty && c["status"] == "True"))
}

/// The wall-clock time of the first line of `log` that contains `what`.
fn logged_at(log: &str, what: &str) -> Option<SystemTime> {
    let line = log.lines().find(|l| l.contains(what))?;
    let stamp: Timestamp = line.split_whitespace().next()?.parse().ok()?;
    let ns = u64::try_from(stamp.as_nanosecond()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
}

/// Polls until `done` answers, or fails after `limit` (or on Ctrl-C) with `what`.
pub(crate) fn await_until<T>(
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(t) = done() {
            return Ok(t);
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted while waiting for {what}");
        }
        if Instant::now() >= deadline {
            bail!("{what} not within {limit:?}");
        }
        std::thread::sleep(POLL);
    }
}

/// One batch Job of `pods` pods running `mpirun -n <pods> true`, applied and followed.
fn one_job(cluster: &Cluster, name: &str, pods: usize, limit: Duration) -> Result<BatchSample> {
    let command: Vec<String> = ["mpirun", "-n", &pods.to_string(), "true"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let yaml = manifest(name, pods, &command)?;
    let applied = SystemTime::now();
    cluster.apply_yaml(&yaml)?;
    let ready = await_until(
        limit,
        &format!("the {pods} pods of Job {name} Ready"),
        || {
            let p = job_pods(cluster, name);
            (p.len() == pods && p.iter().all(|p| pod_ready(p))).then(SystemTime::now)
        },
    )?;
    let complete = await_until(limit, &format!("Job {name} Complete"), || {
        let job = cluster.store().get(&JOBS, NS, name).ok()?;
        (has_condition(&job, "Complete") || has_condition(&job, "Failed"))
            .then(|| (SystemTime::now(), has_condition(&job, "Complete")))
    })?;
    let launcher = job_pods(cluster, name)
        .first()
        .and_then(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .context("the Job has no pod 0")?;
    let log = cluster
        .pod_log(NS, &launcher)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    if !complete.1 {
        bail!("Job {name} failed; its launcher's log:\n{log}");
    }
    let (Some(started), Some(ended)) = (logged_at(&log, STARTED), logged_at(&log, ENDED)) else {
        bail!("the launcher's log of Job {name} lacks {STARTED:?} or {ENDED:?}:\n{log}");
    };
    // Without workers (or when they were not seen finished) the launcher exits at once.
    let workers_done = logged_at(&log, WORKERS_DONE).unwrap_or(ended);
    let complete = complete.0;
    Ok(BatchSample {
        pods_ready: secs(applied, ready),
        to_command: secs(ready, started),
        command: secs(started, ended),
        to_workers_done: secs(ended, workers_done),
        to_complete: secs(workers_done, complete),
        total: secs(applied, complete),
    })
}

/// An interactive job of `pods` pods, its DVM up; `prrte-k8s prun -n <pods> true` from pod 0,
/// `runs` times (seconds each).
async fn in_running_dvm(
    cluster: &Cluster,
    name: &str,
    pods: usize,
    runs: usize,
    limit: Duration,
) -> Result<Vec<f64>> {
    cluster.apply_yaml(&manifest(name, pods, &[])?)?;
    let sel = format!("batch.kubernetes.io/job-name={name}");
    cluster.wait_ready(NS, &sel, pods, limit).await?;
    let pod0 = job_pods(cluster, name)
        .first()
        .and_then(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .context("the interactive job has no pod 0")?;
    tokio::task::block_in_place(|| prun_times(cluster, name, &pod0, pods, runs, limit))
}

/// `prrte-k8s prun -n <pods> true` from pod 0 into the DVM of job `name`, after a warm-up that
/// waits for the DVM; `runs` times, then the job is deleted (seconds each). Blocks.
fn prun_times(
    cluster: &Cluster,
    name: &str,
    pod0: &str,
    pods: usize,
    runs: usize,
    limit: Duration,
) -> Result<Vec<f64>> {
    let n = pods.to_string();
    let prun = || -> Result<(bool, f64, String)> {
        let t = Instant::now();
        let out = harness::run_with_timeout(
            cluster.pod_exec(pod0, &["prrte-k8s", "prun", "-n", &n, "true"])?,
            limit,
        )?;
        let took = t.elapsed().as_secs_f64();
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        Ok((out.status.success(), took, text))
    };
    // The DVM comes up after the pods are Ready: the first prun that succeeds is the warm-up.
    let deadline = Instant::now() + limit;
    loop {
        let (ok, _, err) = prun()?;
        if ok {
            break;
        }
        if Instant::now() >= deadline || INTERRUPTED.load(Ordering::SeqCst) {
            bail!("no prun into the DVM of {name} succeeded within {limit:?}: {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let times = (0..runs)
        .map(|_| {
            let (ok, took, err) = prun()?;
            if !ok {
                bail!("prun -n {n} true into the running DVM of {name} failed: {err}");
            }
            Ok(took)
        })
        .collect();
    // The job's end: its pods go with it, so the next pod count runs on a quiet cluster.
    cluster
        .store()
        .delete(&JOBS, NS, name, &DeleteOptions::default())
        .with_context(|| format!("deleting Job {name}"))?;
    await_until(
        limit,
        &format!("the pods of the deleted Job {name} gone"),
        || job_pods(cluster, name).is_empty().then_some(()),
    )?;
    times
}

/// Every pod count: `runs` batch Jobs each, and the same command in a running DVM, in one
/// sandbox cluster.
pub async fn bench_batch(counts: &[usize], runs: usize, limit: Duration) -> Result<Vec<BatchRow>> {
    if sandbox::images::inspect(APP)?.is_none() {
        bail!("the image {APP} is not in the local store; run `make image`");
    }
    let dir = TestDir::new("bench-batch")?;
    // The node takes the largest Job (a kubelet's --max-pods raised as far as needed).
    let most = counts.iter().copied().max().unwrap_or(0);
    let cluster = Cluster::start(ClusterOptions {
        dir: Some(dir.path().join("cluster")),
        max_pods: most.max(sandbox::cluster::kubelet::MAX_PODS),
        ..Default::default()
    })
    .await?;
    let result = run_counts(&cluster, counts, runs, limit).await;
    let down = cluster.shutdown();
    let rows = result?;
    down?;
    Ok(rows)
}

async fn run_counts(
    cluster: &Cluster,
    counts: &[usize],
    runs: usize,
    limit: Duration,
) -> Result<Vec<BatchRow>> {
    let mut rows = Vec::new();
    for &pods in counts {
        let load = crate::host::load_avg();
        eprintln!("batch Jobs: {pods} pods, {runs} runs");
        let mut jobs = Vec::new();
        for r in 0..runs {
            let name = harness::unique(&format!("bj{pods}r{r}"));
            // The Job is followed by polling on this thread: off the runtime's workers, which
            // serve the sandbox's API server to the pods (a blocked worker delays its answers).
            let sample = tokio::task::block_in_place(|| one_job(cluster, &name, pods, limit));
            jobs.push(sample.with_context(|| format!("{pods} pods, run {r}"))?);
        }
        let name = harness::unique(&format!("dvm{pods}"));
        let in_dvm = in_running_dvm(cluster, &name, pods, runs, limit)
            .await
            .with_context(|| format!("{pods} pods, the running DVM"))?;
        rows.push(BatchRow {
            pods,
            jobs,
            in_dvm,
            load,
        });
    }
    Ok(rows)
}
