//! The controller benchmark (`--controller-only`): mpi-operator's pi MPIJob of N pods (a
//! launcher and N-1 workers, its image `sandbox::app_images`' trixie Open MPI one, the same as
//! `mpioperator/mpi-pi:openmpi`, the runtime injected) applied to a sandbox cluster where `prrte-k8s
//! controller` runs as a process, until the MPIJob's `Succeeded` condition; beside it, in the
//! same cluster and alternating with it, the same MPIJob through `prrte-k8s manifest
//! --from-mpijob` applied as it renders, until its Job is Complete. The difference of the
//! medians is what the controller adds. Then a burst of MPIJobs of 2 pods applied at once,
//! with the controller's CPU time (user + system, from /proc) and its peak RSS over the burst.

use crate::batch::{await_until, has_condition, job_pods, secs};
use crate::run::INTERRUPTED;
use crate::stats::{cell, median, stats};
use anyhow::{bail, Context, Result};
use sandbox::api::resources::JOBS;
use sandbox::api::store::DeleteOptions;
use sandbox::app_images::{app_image, AppImage, INJECT_IMAGE};
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::controller::{usage, Usage};
use sandbox::harness::{self, TestDir};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

const NS: &str = "default";
const MANAGED_BY: &str = "prrte-k8s.io/controller";

/// One pod count: seconds from apply to done, through the controller and through the manifest.
pub struct ControllerRow {
    pub pods: usize,
    pub controller: Vec<f64>,
    pub manifest: Vec<f64>,
}

/// The burst: how many MPIJobs, how long until all Succeeded, the controller's cost.
pub struct Burst {
    pub jobs: usize,
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss_kib: u64,
    pub rss_kib: u64,
}

/// mpi-operator's pi MPIJob of `pods` pods in `image`, managed by the controller.
fn mpijob(name: &str, image: &str, pods: usize) -> String {
    let workers = pods - 1;
    format!(
        r#"apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: {name}
  namespace: {NS}
spec:
  slotsPerWorker: 1
  mpiImplementation: OpenMPI
  runPolicy:
    managedBy: {MANAGED_BY}
    backoffLimit: 0
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
            - name: mpi-launcher
              image: {image}
              command: [mpirun]
              args: [-n, "{workers}", /home/mpiuser/pi]
              securityContext: {{runAsUser: 1000}}
    Worker:
      replicas: {workers}
      template:
        spec:
          containers:
            - name: mpi-worker
              image: {image}
              command: [/usr/sbin/sshd]
              args: [-De, -f, /home/mpiuser/.sshd_config]
              securityContext: {{runAsUser: 1000}}
"#
    )
}

/// `prrte-k8s manifest --from-mpijob` of `yaml` (what a user pipes into `kubectl apply`).
fn rendered(dir: &TestDir, name: &str, yaml: &str) -> Result<String> {
    let file = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&file, yaml)?;
    let mut c = Command::new(harness::workspace_bin("prrte-k8s")?);
    c.arg("manifest")
        .arg("--from-mpijob")
        .arg(&file)
        .args(["--image-pull-policy", "Never"]);
    let out = harness::run_with_timeout(c, Duration::from_secs(30))?;
    if !out.status.success() {
        bail!(
            "prrte-k8s manifest --from-mpijob failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The MPIJob `name` as stored, if the CRD is registered and it exists.
fn stored_mpijob(cluster: &Cluster, name: &str) -> Option<Value> {
    let rt = cluster.store().kind_of("kubeflow.org/v2beta1", "MPIJob")?;
    cluster.store().get(rt, NS, name).ok().map(|o| (*o).clone())
}

/// Waits until the pods of job `name` are gone (the next sample runs on a quiet cluster).
fn await_gone(cluster: &Cluster, name: &str, limit: Duration) -> Result<()> {
    await_until(limit, &format!("the pods of {name} gone"), || {
        job_pods(cluster, name).is_empty().then_some(())
    })
}

/// One MPIJob through the controller: seconds from apply to `Succeeded`.
fn through_controller(
    cluster: &Cluster,
    image: &str,
    name: &str,
    pods: usize,
    limit: Duration,
) -> Result<f64> {
    let yaml = mpijob(name, image, pods);
    let applied = SystemTime::now();
    cluster.apply_yaml(&yaml)?;
    let (done, ok) = await_until(limit, &format!("MPIJob {name} finished"), || {
        let m = stored_mpijob(cluster, name)?;
        let ok = has_condition(&m, "Succeeded");
        (ok || has_condition(&m, "Failed")).then(|| (SystemTime::now(), ok))
    })?;
    if !ok {
        let m = stored_mpijob(cluster, name).unwrap_or_default();
        bail!("MPIJob {name} failed: {}", m["status"]);
    }
    let rt = cluster
        .store()
        .kind_of("kubeflow.org/v2beta1", "MPIJob")
        .context("the MPIJob CRD is gone")?;
    cluster
        .store()
        .delete(rt, NS, name, &DeleteOptions::default())
        .with_context(|| format!("deleting MPIJob {name}"))?;
    await_gone(cluster, name, limit)?;
    Ok(secs(applied, done))
}

/// The same MPIJob through `prrte-k8s manifest --from-mpijob`: seconds from rendering to the
/// Job's `Complete`.
fn through_manifest(
    cluster: &Cluster,
    dir: &TestDir,
    image: &str,
    name: &str,
    pods: usize,
    limit: Duration,
) -> Result<f64> {
    let yaml = mpijob(name, image, pods);
    let applied = SystemTime::now();
    cluster.apply_yaml(&rendered(dir, name, &yaml)?)?;
    let (done, ok) = await_until(limit, &format!("Job {name} finished"), || {
        let job = cluster.store().get(&JOBS, NS, name).ok()?;
        let ok = has_condition(&job, "Complete");
        (ok || has_condition(&job, "Failed")).then(|| (SystemTime::now(), ok))
    })?;
    if !ok {
        bail!("Job {name} (from the manifest) failed");
    }
    cluster
        .store()
        .delete(&JOBS, NS, name, &DeleteOptions::default())
        .with_context(|| format!("deleting Job {name}"))?;
    await_gone(cluster, name, limit)?;
    Ok(secs(applied, done))
}

/// `jobs` MPIJobs of 2 pods applied at once, until all have Succeeded.
fn burst(cluster: &Cluster, image: &str, pid: u32, jobs: usize, limit: Duration) -> Result<Burst> {
    let names: Vec<String> = (0..jobs)
        .map(|i| harness::unique(&format!("b{i}")))
        .collect();
    let cpu0 = usage(pid)?.cpu_seconds;
    let t0 = SystemTime::now();
    for n in &names {
        cluster.apply_yaml(&mpijob(n, image, 2))?;
    }
    let done = await_until(limit * 4, &format!("{jobs} MPIJobs Succeeded"), || {
        let finished: Vec<(bool, bool)> = names
            .iter()
            .filter_map(|n| stored_mpijob(cluster, n))
            .map(|m| (has_condition(&m, "Succeeded"), has_condition(&m, "Failed")))
            .filter(|(s, f)| *s || *f)
            .collect();
        (finished.len() == names.len()).then(|| (SystemTime::now(), finished))
    })?;
    let Usage {
        cpu_seconds: cpu1,
        rss_kib: rss,
        peak_rss_kib: peak,
    } = usage(pid)?;
    let failed = done.1.iter().filter(|(s, _)| !s).count();
    if failed > 0 {
        bail!("{failed} of the {jobs} MPIJobs of the burst failed");
    }
    let rt = cluster.store().kind_of("kubeflow.org/v2beta1", "MPIJob");
    for n in &names {
        if let Some(rt) = rt {
            let _ = cluster.store().delete(rt, NS, n, &DeleteOptions::default());
        }
    }
    for n in &names {
        await_gone(cluster, n, limit)?;
    }
    Ok(Burst {
        jobs,
        seconds: secs(t0, done.0),
        cpu_seconds: cpu1 - cpu0,
        peak_rss_kib: peak,
        rss_kib: rss,
    })
}

/// The controller as a process against the cluster; killed when dropped.
struct ControllerProc(Child);

impl Drop for ControllerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_controller(cluster: &Cluster, dir: &TestDir) -> Result<ControllerProc> {
    let bin = harness::workspace_bin("prrte-k8s")?;
    let crd = harness::run_with_timeout(
        {
            let mut c = Command::new(&bin);
            c.arg("crd");
            c
        },
        Duration::from_secs(30),
    )?;
    if !crd.status.success() {
        bail!("prrte-k8s crd failed");
    }
    cluster.apply_yaml(&String::from_utf8(crd.stdout)?)?;
    let log = std::fs::File::create(dir.path().join("controller.log"))?;
    let child = Command::new(&bin)
        .args(["controller", "--lease-namespace", NS, "--identity", "bench"])
        .args([
            "--metrics-address",
            "127.0.0.1:0",
            "--health-address",
            "127.0.0.1:0",
        ])
        .args(["--image-pull-policy", "Never"])
        // The one Indexed Job, as the manifest it is compared with (the sandbox serves
        // JobSets, which the default `--launcher-pod auto` would choose).
        .args(["--launcher-pod", "shared"])
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting prrte-k8s controller")?;
    Ok(ControllerProc(child))
}

/// Every pod count (`runs` MPIJobs through each way, alternating), then the burst, in one
/// sandbox cluster with one controller process.
pub async fn bench_controller(
    counts: &[usize],
    runs: usize,
    jobs: usize,
    limit: Duration,
) -> Result<(Vec<ControllerRow>, Option<Burst>)> {
    if sandbox::images::inspect(INJECT_IMAGE)?.is_none() {
        bail!("the image {INJECT_IMAGE} is not in the local store; run `make image`");
    }
    let image = app_image(AppImage::TrixieOpenmpi)?;
    let dir = TestDir::new("bench-controller")?;
    let cluster = Cluster::start(ClusterOptions {
        dir: Some(dir.path().join("cluster")),
        ..Default::default()
    })
    .await?;
    let result = tokio::task::block_in_place(|| -> Result<_> {
        let controller = start_controller(&cluster, &dir)?;
        let pid = controller.0.id();
        let mut rows = Vec::new();
        for &pods in counts {
            eprintln!("controller: {pods} pods, {runs} runs each way");
            let mut row = ControllerRow {
                pods,
                controller: Vec::new(),
                manifest: Vec::new(),
            };
            for r in 0..runs {
                if INTERRUPTED.load(Ordering::SeqCst) {
                    bail!("interrupted");
                }
                let name = harness::unique(&format!("c{pods}r{r}"));
                let c = through_controller(&cluster, &image, &name, pods, limit)
                    .with_context(|| format!("{pods} pods, run {r}, through the controller"))?;
                let name = harness::unique(&format!("m{pods}r{r}"));
                let m = through_manifest(&cluster, &dir, &image, &name, pods, limit)
                    .with_context(|| format!("{pods} pods, run {r}, through the manifest"))?;
                row.controller.push(c);
                row.manifest.push(m);
            }
            rows.push(row);
        }
        let b = (jobs > 0)
            .then(|| {
                eprintln!("controller: a burst of {jobs} MPIJobs of 2 pods");
                burst(&cluster, &image, pid, jobs, limit)
            })
            .transpose()
            .context("the burst")?;
        Ok((rows, b))
    });
    if result.is_err() {
        let log = std::fs::read_to_string(dir.path().join("controller.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        eprintln!(
            "the controller's log (last lines):\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let down = cluster.shutdown();
    let out = result?;
    down?;
    Ok(out)
}

pub fn print_controller(rows: &[ControllerRow], burst: Option<&Burst>, runs: usize) {
    if rows.is_empty() && burst.is_none() {
        return;
    }
    println!();
    println!("MPIJob applied until done, {runs} runs each, median [min-max] s: through `prrte-k8s controller` (until Succeeded) and through `prrte-k8s manifest --from-mpijob` applied (until the Job is Complete)");
    println!(
        "{:>5}  {:>22}  {:>22}  {:>16}",
        "pods", "controller", "manifest", "controller adds"
    );
    for r in rows {
        println!(
            "{:>5}  {:>22}  {:>22}  {:>16.2}",
            r.pods,
            cell(&r.controller, 2),
            cell(&r.manifest, 2),
            median(&r.controller) - median(&r.manifest)
        );
    }
    if let Some(b) = burst {
        println!(
            "burst: {} MPIJobs of 2 pods applied at once, all Succeeded in {:.1} s; the controller used {:.2} s of CPU, RSS {} KiB at the end, {} KiB at its peak",
            b.jobs, b.seconds, b.cpu_seconds, b.rss_kib, b.peak_rss_kib
        );
    }
}

pub fn controller_json(rows: &[ControllerRow], burst: Option<&Burst>) -> Value {
    json!({
        "rows": rows.iter().map(|r| json!({
            "pods": r.pods,
            "controller_s": stats(&r.controller),
            "manifest_s": stats(&r.manifest),
            "controller_adds_s": median(&r.controller) - median(&r.manifest),
        })).collect::<Vec<_>>(),
        "burst": burst.map(|b| json!({
            "mpijobs": b.jobs,
            "pods_each": 2,
            "all_succeeded_s": b.seconds,
            "controller_cpu_s": b.cpu_seconds,
            "controller_rss_kib": b.rss_kib,
            "controller_peak_rss_kib": b.peak_rss_kib,
        })),
    })
}
