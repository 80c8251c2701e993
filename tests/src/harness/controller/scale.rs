//! MPIJobs in bulk through the controller: `mpijobs` created at once, suspended (no pod is
//! needed: each gets its objects, its Job suspended, and its status), half the controller's and
//! half another controller's (`managedBy: example.com/other`, each with a Job of its name that
//! the other made); optionally the controller killed with SIGKILL once half of its own are done,
//! and started again. Until each of its own has its objects and status: how long, what the
//! controller cost (CPU, RSS, API requests by verb), and whether it made each object and status
//! once and left the other controller's MPIJobs and objects alone.

use super::process::{
    controller_kubeconfig, controller_requests, create_mpijob, mpijob, register_crd, verb,
    ControllerProcess, Usage, CONTROLLER_USER, MANAGED_BY,
};
use crate::api::resources::JOBS;
use crate::api::store::Store;
use crate::api::{ApiOptions, ApiServer, ListQuery, RequestRecord};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The namespace of the MPIJobs.
const NS: &str = "default";
/// The other controller's `managedBy`.
pub const OTHER: &str = "example.com/other";
const IDENTITY: &str = "scale";

/// What to run.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// MPIJobs in all (half the controller's, the odd ones the other's).
    pub mpijobs: usize,
    /// Kill the controller (SIGKILL) once half of its own are done, and start it again.
    pub kill_midway: bool,
    /// How long all of its own may take.
    pub limit: Duration,
    /// Where the API server's files and the controller's logs go.
    pub dir: PathBuf,
}

/// What a run measured and found.
#[derive(Debug, Clone, Default)]
pub struct ScaleReport {
    /// The controller's MPIJobs and the other's.
    pub managed: usize,
    pub foreign: usize,
    /// Seconds from the MPIJobs' creation until every one of the controller's had its Job and
    /// its status.
    pub seconds: f64,
    /// When the controller was killed: how many of its own were done, and the seconds since
    /// the MPIJobs' creation.
    pub killed_after: Option<(usize, f64)>,
    /// The controller's CPU seconds (both processes when it was killed), its RSS at the end and
    /// its peak RSS (the larger of both processes'), KiB.
    pub cpu_seconds: f64,
    /// Its RSS once it led, before the MPIJobs were created, KiB.
    pub idle_rss_kib: u64,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    /// The controller's API requests from its start to the end, by verb.
    pub requests: BTreeMap<String, usize>,
    /// The controller's MPIJobs without their Job or status at the end.
    pub incomplete: Vec<String>,
    /// Kinds of which an MPIJob of the controller owns more than one object.
    pub duplicates: Vec<String>,
    /// Objects (and statuses) the controller wrote more than once.
    pub written_twice: Vec<String>,
    /// What the controller did to the other controller's MPIJobs and objects.
    pub foreign_touched: Vec<String>,
}

impl ScaleReport {
    pub fn total_requests(&self) -> usize {
        self.requests.values().sum()
    }

    /// API requests per MPIJob of the controller (all of its requests, the watches, lists and
    /// Lease renewals included).
    pub fn requests_per_managed(&self) -> f64 {
        self.total_requests() as f64 / self.managed.max(1) as f64
    }
}

/// The name of MPIJob `i` and whether it is the controller's.
fn name(i: usize) -> (String, bool) {
    if i.is_multiple_of(2) {
        (format!("m-{i:05}"), true)
    } else {
        (format!("f-{i:05}"), false)
    }
}

/// The Job the other controller made for its MPIJob `mpijob`.
fn others_job(mpijob: &Value) -> Value {
    let name = mpijob["metadata"]["name"].clone();
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app.kubernetes.io/name": "prrte-k8s", "example.com/made-by": "other"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                "name": name, "uid": mpijob["metadata"]["uid"], "controller": true}],
        },
        "spec": {
            "suspend": true,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "example.com/other:1"}]}},
        },
    })
}

/// The controller's arguments: each MPIJob the one Indexed Job, whose Jobs the runs count (the
/// API server serves JobSets, for which the default `--launcher-pod auto` would make JobSets).
const SHARED: &[&str] = &["--launcher-pod", "shared"];

/// The MPIJobs by name: uid, resourceVersion, whether its status has `Created`.
fn mpijobs(store: &Store) -> Result<HashMap<String, (String, String, bool)>> {
    let rt = store
        .kind_of("kubeflow.org/v2beta1", "MPIJob")
        .context("the MPIJob CRD is gone")?;
    let list = store
        .list(rt, Some(NS), &ListQuery::default())
        .map_err(|e| anyhow::anyhow!("listing MPIJobs: {e}"))?;
    Ok(list
        .items
        .iter()
        .map(|m| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            let created = m["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Created" && c["status"] == "True")
            });
            (
                s(&m["metadata"]["name"]),
                (
                    s(&m["metadata"]["uid"]),
                    s(&m["metadata"]["resourceVersion"]),
                    created,
                ),
            )
        })
        .collect())
}

/// The Jobs by name: the uid of their controlling owner, and their resourceVersion.
fn jobs(store: &Store) -> Result<HashMap<String, (String, String)>> {
    let list = store
        .list(&JOBS, Some(NS), &ListQuery::default())
        .map_err(|e| anyhow::anyhow!("listing Jobs: {e}"))?;
    Ok(list
        .items
        .iter()
        .map(|j| {
            let owner = j["metadata"]["ownerReferences"]
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["controller"] == true))
                .and_then(|r| r["uid"].as_str())
                .unwrap_or("")
                .to_string();
            let rv = j["metadata"]["resourceVersion"].as_str().unwrap_or("");
            (
                j["metadata"]["name"].as_str().unwrap_or("").to_string(),
                (owner, rv.to_string()),
            )
        })
        .collect())
}

/// How many of `managed` have their Job (controlled by them) and their `Created` status.
fn done(store: &Store, managed: &[String]) -> Result<usize> {
    let ms = mpijobs(store)?;
    let js = jobs(store)?;
    Ok(managed
        .iter()
        .filter(|n| {
            ms.get(*n).is_some_and(|(uid, _, created)| {
                *created && js.get(*n).is_some_and(|(owner, _)| owner == uid)
            })
        })
        .count())
}

/// The name a request's path targets in `collection` (`.../mpijobs/NAME[/status]`).
fn target<'a>(r: &'a RequestRecord, collection: &str) -> Option<&'a str> {
    let mut segs = r.path.split('/');
    segs.by_ref().find(|s| *s == collection)?;
    segs.next().filter(|s| !s.is_empty())
}

/// Runs the MPIJobs through the controller (see the module's documentation).
pub async fn run(opts: &ScaleOptions) -> Result<ScaleReport> {
    let api = ApiServer::start(ApiOptions {
        dir: Some(opts.dir.join("api")),
        ..Default::default()
    })
    .await?;
    let store = api.store();
    register_crd(&store)?;
    let kubeconfig = controller_kubeconfig(&api, &opts.dir)?;
    let logs = opts.dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut proc = ControllerProcess::start(&logs, &kubeconfig, IDENTITY, SHARED)?;
    proc.await_leading(&store, IDENTITY, Duration::from_secs(60))?;
    let result = measure(opts, &api, &store, &mut proc).await;
    if result.is_err() {
        eprintln!("the controller's log (last lines):\n{}", proc.log_tail(30));
    }
    result
}

async fn measure(
    opts: &ScaleOptions,
    api: &ApiServer,
    store: &Store,
    proc: &mut ControllerProcess,
) -> Result<ScaleReport> {
    let mut report = ScaleReport {
        idle_rss_kib: proc.usage()?.rss_kib,
        ..Default::default()
    };
    let mut managed = Vec::new();
    let mut foreign = Vec::new();
    let started = Instant::now();
    for i in 0..opts.mpijobs {
        let (n, ours) = name(i);
        let by = if ours { MANAGED_BY } else { OTHER };
        let m = create_mpijob(store, mpijob(NS, &n, Some(by), true, 0))?;
        if ours {
            managed.push(n);
        } else {
            store
                .create(&JOBS, NS, others_job(&m), false)
                .map_err(|e| anyhow::anyhow!("creating the other's Job {n}: {e}"))?;
            foreign.push(n);
        }
    }
    report.managed = managed.len();
    report.foreign = foreign.len();
    let foreign_before: HashMap<String, (String, String, bool)> = mpijobs(store)?
        .into_iter()
        .filter(|(n, _)| n.starts_with("f-"))
        .collect();
    let foreign_jobs_before: HashMap<String, (String, String)> = jobs(store)?
        .into_iter()
        .filter(|(n, _)| n.starts_with("f-"))
        .collect();
    let mut killed = Usage::default();
    let deadline = started + opts.limit;
    loop {
        let n = done(store, &managed)?;
        if n == managed.len() {
            break;
        }
        if opts.kill_midway && report.killed_after.is_none() && n * 2 >= managed.len() {
            report.killed_after = Some((n, started.elapsed().as_secs_f64()));
            let dir = opts.dir.join("logs");
            let kubeconfig = opts.dir.join("controller.kubeconfig");
            killed = proc.kill()?;
            // The new process starts once the old one is gone (a container restarted).
            *proc = ControllerProcess::start(&dir, &kubeconfig, IDENTITY, SHARED)?;
            proc.await_leading(store, IDENTITY, Duration::from_secs(60))?;
            continue;
        }
        if !proc.running() {
            bail!("the controller exited");
        }
        if Instant::now() >= deadline {
            bail!(
                "{n} of the controller's {} MPIJobs done within {:?}",
                managed.len(),
                opts.limit
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.seconds = started.elapsed().as_secs_f64();
    await_quiet(api, Duration::from_secs(1), deadline).await?;
    let end = proc.usage()?;
    report.cpu_seconds = killed.cpu_seconds + end.cpu_seconds;
    report.rss_kib = end.rss_kib;
    report.peak_rss_kib = killed.peak_rss_kib.max(end.peak_rss_kib);
    let requests = api.requests();
    let mine = controller_requests(&requests);
    for r in &mine {
        *report.requests.entry(verb(r).to_string()).or_default() += 1;
    }
    check(store, &managed, &foreign, &mine, &mut report)?;
    for (n, before) in &foreign_before {
        let now = mpijobs(store)?.get(n).cloned();
        if now.as_ref() != Some(before) {
            report
                .foreign_touched
                .push(format!("MPIJob {n}: {before:?} then {now:?}"));
        }
    }
    let jobs_now = jobs(store)?;
    for (n, before) in &foreign_jobs_before {
        if jobs_now.get(n) != Some(before) {
            report.foreign_touched.push(format!(
                "the other's Job {n}: {before:?} then {:?}",
                jobs_now.get(n)
            ));
        }
    }
    Ok(report)
}

/// Waits until the controller wrote nothing for `quiet` (its last reconciles ended), until
/// `deadline`.
async fn await_quiet(api: &ApiServer, quiet: Duration, deadline: Instant) -> Result<()> {
    let mut seen = usize::MAX;
    let mut since = Instant::now();
    loop {
        let writes = api
            .requests()
            .iter()
            .filter(|r| {
                r.user == CONTROLLER_USER && r.method != "GET" && !r.path.contains("/leases/")
            })
            .count();
        if writes != seen {
            seen = writes;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the controller kept writing");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the controller made for its MPIJobs (and for the other's), and what it wrote twice.
fn check(
    store: &Store,
    managed: &[String],
    foreign: &[String],
    mine: &[&RequestRecord],
    report: &mut ScaleReport,
) -> Result<()> {
    let ms = mpijobs(store)?;
    let js = jobs(store)?;
    for n in managed {
        let Some((uid, _, created)) = ms.get(n) else {
            report.incomplete.push(format!("{n}: gone"));
            continue;
        };
        if !created || js.get(n).is_none_or(|(owner, _)| owner != uid) {
            report.incomplete.push(n.clone());
        }
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for o in store.dependents(uid) {
            *kinds
                .entry(o["kind"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
        for (k, count) in kinds.into_iter().filter(|(_, c)| *c > 1) {
            report.duplicates.push(format!("{n}: {count} {k}s"));
        }
    }
    let others: BTreeSet<&str> = foreign.iter().map(String::as_str).collect();
    for (n, (uid, _, _)) in ms.iter().filter(|(n, _)| others.contains(n.as_str())) {
        let made: Vec<String> = store
            .dependents(uid)
            .iter()
            .filter(|o| o["metadata"]["labels"]["example.com/made-by"] != "other")
            .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
            .collect();
        if !made.is_empty() {
            report
                .foreign_touched
                .push(format!("MPIJob {n} owns {made:?}"));
        }
    }
    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    for r in mine {
        if !r.is_list() && !r.is_watch() {
            for collection in ["mpijobs", "jobs"] {
                if let Some(t) = target(r, collection).filter(|t| others.contains(t)) {
                    report.foreign_touched.push(format!(
                        "{} {} by the controller (the other's {t})",
                        r.method, r.path
                    ));
                }
            }
        }
        let write = matches!(r.method.as_str(), "PATCH" | "PUT" | "POST" | "DELETE");
        if write && !r.path.contains("/leases") && !r.path.contains("/events") {
            *writes
                .entry(format!("{} {}", r.method, r.path))
                .or_default() += 1;
        }
    }
    report.written_twice = writes
        .into_iter()
        .filter(|(_, c)| *c > 1)
        .map(|(w, c)| format!("{w} ({c} times)"))
        .collect();
    Ok(())
}
