//! `--tasks`: many short tasks through one DVM of 16 pods, side by side in one run: single-rank
//! `/bin/true` tasks and `-n 32` tasks through `prrte-k8s submit` (one PMIx tool connection,
//! many spawns in flight), the same single-rank tasks as one `prrte-k8s prun` per task (one
//! after another, and 16 at once), and as one Kubernetes Job per task in the same sandbox
//! cluster (16 Jobs in flight, each deleted once Complete). For each: tasks/s end to end, the
//! latency of one task (median, p99), and the CPU seconds prte used meanwhile.

use crate::run::INTERRUPTED;
use anyhow::{bail, Context, Result};
use sandbox::api::resources::JOBS;
use sandbox::api::store::DeleteOptions;
use sandbox::harness::{self, mpijob::Job, mpijob::JobSpec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Pods of the DVM (2 slots each).
pub const PODS: usize = 16;
/// Concurrent `prun`s and Kubernetes Jobs in flight.
const CONCURRENT: usize = 16;
const NS: &str = "default";

/// How many tasks each method runs.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// Single-rank `/bin/true` through submit.
    pub single: usize,
    /// `-n 32 /bin/true` through submit.
    pub wide: usize,
    /// Single-rank tasks as one prun each (sequential, and again 16 at once).
    pub pruns: usize,
    /// Kubernetes Jobs, one per task.
    pub jobs: usize,
    /// submit's --max-in-flight.
    pub in_flight: usize,
}

/// One method's numbers.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub method: String,
    pub tasks: usize,
    pub failed: usize,
    pub secs: f64,
    pub median_ms: f64,
    pub p99_ms: f64,
    /// CPU seconds of prte during the method (None for the Kubernetes Jobs: no DVM in the path).
    pub prte_cpu: Option<f64>,
    /// submit's own breakdown of a task's time, when it printed one.
    pub phases: Option<String>,
}

impl TaskRow {
    pub fn rate(&self) -> f64 {
        self.tasks as f64 / self.secs.max(1e-9)
    }
}

fn quantile_ms(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1] * 1e3
}

/// prte's CPU seconds so far (user + system), from /proc (pod 0 runs it).
fn prte_cpu(job: &Job) -> Option<f64> {
    let pid = *job.pids_in_pod(0, "prte").ok()?.first()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // Clock ticks: 100 a second on Linux (USER_HZ).
    Some(ticks / 100.0)
}

fn cli() -> Result<String> {
    Ok(harness::workspace_bin("prrte-k8s")?.display().to_string())
}

/// `prrte-k8s submit` of `n` copies of `line` from pod 1.
fn submit(job: &Job, tag: &str, line: &str, n: usize, in_flight: usize) -> Result<TaskRow> {
    let dir = job.dir.path();
    let tasks = dir.join(format!("{tag}.tasks"));
    let res = dir.join(format!("{tag}.json"));
    std::fs::write(&tasks, format!("{line}\n").repeat(n))?;
    let (tasks_s, res_s) = (tasks.display().to_string(), res.display().to_string());
    let exe = cli()?;
    let cpu0 = prte_cpu(job);
    let t = Instant::now();
    let out = job.exec_in_pod(
        1,
        &[
            &exe,
            "submit",
            "--tasks",
            &tasks_s,
            "--results",
            &res_s,
            "--max-in-flight",
            &in_flight.to_string(),
        ],
        Duration::from_secs(3600),
    )?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = prte_cpu(job).zip(cpu0).map(|(b, a)| b - a);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (lat, failed) = latencies(&res)?;
    if lat.len() + failed != n {
        bail!(
            "{tag}: {} results for {n} tasks (lost or hung tasks)\n{err}",
            lat.len() + failed
        );
    }
    let mut lat = lat;
    Ok(TaskRow {
        method: tag.into(),
        tasks: n,
        failed,
        secs,
        median_ms: quantile_ms(&mut lat, 0.5),
        p99_ms: quantile_ms(&mut lat, 0.99),
        prte_cpu: cpu,
        phases: err
            .lines()
            .find_map(|l| l.strip_prefix("prrte-k8s submit: per task "))
            .map(str::to_string),
    })
}

/// Seconds from start to end of each successful task in a results file, and how many failed.
fn latencies(res: &Path) -> Result<(Vec<f64>, usize)> {
    let text = std::fs::read_to_string(res).with_context(|| format!("{}", res.display()))?;
    let mut ok = Vec::new();
    let mut failed = 0;
    let mut seen = BTreeMap::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(l)?;
        let i = v["index"].as_u64().context("index")?;
        if seen.insert(i, ()).is_some() {
            bail!("task {i} has two results in {}", res.display());
        }
        let ts = |k: &str| -> Option<k8s_openapi::jiff::Timestamp> { v[k].as_str()?.parse().ok() };
        match (v["exit"].as_i64(), ts("start"), ts("end")) {
            (Some(0), Some(a), Some(b)) => {
                ok.push(b.duration_since(a).as_secs_f64());
            }
            _ => failed += 1,
        }
    }
    Ok((ok, failed))
}

/// `n` single-rank `prrte-k8s prun -n 1 /bin/true`, `concurrent` at a time, from pods 1...
fn pruns(job: &Job, tag: &str, n: usize, concurrent: usize) -> Result<TaskRow> {
    let exe = cli()?;
    let cpu0 = prte_cpu(job);
    let t = Instant::now();
    let per: Vec<usize> = (0..concurrent)
        .map(|k| n / concurrent + usize::from(k < n % concurrent))
        .collect();
    let results: Vec<Result<(Vec<f64>, usize)>> = std::thread::scope(|s| {
        let handles: Vec<_> = per
            .iter()
            .enumerate()
            .map(|(k, &m)| {
                let exe = exe.clone();
                s.spawn(move || -> Result<(Vec<f64>, usize)> {
                    let mut lat = Vec::new();
                    let mut failed = 0;
                    for _ in 0..m {
                        if INTERRUPTED.load(Ordering::SeqCst) {
                            bail!("interrupted");
                        }
                        let a = Instant::now();
                        let out = job.exec_in_pod(
                            1 + k % (PODS - 1),
                            &[&exe, "prun", "-n", "1", "/bin/true"],
                            Duration::from_secs(120),
                        )?;
                        if out.status.success() {
                            lat.push(a.elapsed().as_secs_f64());
                        } else {
                            failed += 1;
                        }
                    }
                    Ok((lat, failed))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a prun thread panicked")))
            })
            .collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let cpu = prte_cpu(job).zip(cpu0).map(|(b, a)| b - a);
    let (mut lat, mut failed) = (Vec::new(), 0);
    for r in results {
        let (l, f) = r?;
        lat.extend(l);
        failed += f;
    }
    Ok(TaskRow {
        method: tag.into(),
        tasks: n,
        failed,
        secs,
        median_ms: quantile_ms(&mut lat, 0.5),
        p99_ms: quantile_ms(&mut lat, 0.99),
        prte_cpu: cpu,
        phases: None,
    })
}

fn k8s_job(name: &str) -> String {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "task", "command": ["/bin/true"]}],
        }}},
    })
    .to_string()
}

fn job_done(job: &Value) -> Option<bool> {
    let conds = job["status"]["conditions"].as_array()?;
    let has = |t: &str| {
        conds
            .iter()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    if has("Complete") {
        Some(true)
    } else if has("Failed") {
        Some(false)
    } else {
        None
    }
}

/// `n` Kubernetes Jobs of one `/bin/true` pod in the DVM's sandbox cluster, 16 in flight; each
/// deleted (with its pod) once it ended.
fn k8s_jobs(job: &Job, n: usize, limit: Duration) -> Result<TaskRow> {
    let store = job.cluster.store();
    let t = Instant::now();
    let deadline = t + limit;
    let mut next = 0;
    let mut flying: BTreeMap<String, Instant> = BTreeMap::new();
    let (mut lat, mut failed) = (Vec::new(), 0);
    while next < n || !flying.is_empty() {
        while next < n && flying.len() < CONCURRENT {
            let name = format!("task-{next}");
            job.cluster.apply_yaml(&k8s_job(&name))?;
            flying.insert(name, Instant::now());
            next += 1;
        }
        let mut ended = Vec::new();
        for (name, at) in &flying {
            if let Some(ok) = store.get(&JOBS, NS, name).ok().and_then(|j| job_done(&j)) {
                if ok {
                    lat.push(at.elapsed().as_secs_f64());
                } else {
                    failed += 1;
                }
                ended.push(name.clone());
            }
        }
        for name in ended {
            flying.remove(&name);
            store
                .delete(&JOBS, NS, &name, &DeleteOptions::default())
                .map_err(|e| anyhow::anyhow!("deleting Job {name}: {e:?}"))?;
        }
        if Instant::now() > deadline || INTERRUPTED.load(Ordering::SeqCst) {
            bail!(
                "Kubernetes Jobs: {} of {n} ended within {limit:?}",
                lat.len() + failed
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(TaskRow {
        method: "Kubernetes Job per task".into(),
        tasks: n,
        failed,
        secs: t.elapsed().as_secs_f64(),
        median_ms: quantile_ms(&mut lat, 0.5),
        p99_ms: quantile_ms(&mut lat, 0.99),
        prte_cpu: None,
        phases: None,
    })
}

/// Runs every method on one DVM of 16 pods.
pub async fn bench_tasks(c: Counts, limit: Duration) -> Result<Vec<TaskRow>> {
    let job = Job::start(JobSpec::dvm_head("tasks", PODS)).await?;
    tokio::task::block_in_place(|| {
        for i in 0..job.pods.len() {
            let f = job.pod_tmp(i).join("dvm.uri");
            sandbox::harness::mpijob::wait_for_text(&f, "tcp4://", limit)
                .with_context(|| format!("the DVM's URI in pod {i}"))?;
        }
        let mut rows = Vec::new();
        let mut step = |r: Result<TaskRow>| -> Result<()> {
            let r = r?;
            eprintln!(
                "prrte-k8s-bench: {}: {} tasks in {:.1} s ({:.1}/s)",
                r.method,
                r.tasks,
                r.secs,
                r.rate()
            );
            rows.push(r);
            Ok(())
        };
        if c.single > 0 {
            step(submit(
                &job,
                "submit, 1 rank",
                "/bin/true",
                c.single,
                c.in_flight,
            ))?;
        }
        if c.wide > 0 {
            step(submit(
                &job,
                "submit, -n 32",
                "-n 32 /bin/true",
                c.wide,
                c.in_flight,
            ))?;
        }
        if c.pruns > 0 {
            step(pruns(&job, "prun per task, sequential", c.pruns, 1))?;
            step(pruns(
                &job,
                "prun per task, 16 at once",
                c.pruns,
                CONCURRENT,
            ))?;
        }
        if c.jobs > 0 {
            step(k8s_jobs(&job, c.jobs, limit.max(Duration::from_secs(3600))))?;
        }
        Ok(rows)
    })
}

/// The table: one line per method.
pub fn print_tasks(rows: &[TaskRow]) {
    println!();
    println!(
        "{:<28} {:>7} {:>6} {:>9} {:>9} {:>12} {:>10} {:>11}",
        "method", "tasks", "failed", "seconds", "tasks/s", "median ms", "p99 ms", "prte CPU s"
    );
    for r in rows {
        println!(
            "{:<28} {:>7} {:>6} {:>9.1} {:>9.1} {:>12.1} {:>10.1} {:>11}",
            r.method,
            r.tasks,
            r.failed,
            r.secs,
            r.rate(),
            r.median_ms,
            r.p99_ms,
            r.prte_cpu.map_or("-".into(), |c| format!("{c:.1}"))
        );
    }
    for r in rows {
        if let Some(p) = &r.phases {
            println!("{}: per task {p}", r.method);
        }
    }
}

pub fn tasks_json(rows: &[TaskRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "method": r.method, "tasks": r.tasks, "failed": r.failed,
                    "seconds": r.secs, "tasks_per_s": r.rate(),
                    "median_ms": r.median_ms, "p99_ms": r.p99_ms,
                    "prte_cpu_s": r.prte_cpu, "phases": r.phases,
                })
            })
            .collect(),
    )
}
