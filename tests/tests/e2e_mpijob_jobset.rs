//! An MPIJob whose launcher has a pod of its own: `prrte-k8s manifest --from-mpijob FILE
//! --kind jobset` applied with `kubectl apply -f -` in the sandbox cluster (its JobSet
//! controller). A GPU-style MPIJob, a small launcher (`limits.cpu: 1`, its image named
//! otherwise) and workers with more CPU: the launcher's pod gets the Launcher's template and
//! the workers' the Worker's, the JobSet completes with every rank's output in the launcher's
//! log and no rank on the launcher's pod. With `launcherCreationPolicy: WaitForWorkersReady`
//! the launcher's pod is made only once every worker is ready. A worker evicted while the ranks
//! run fails the whole JobSet at once, its worker Job naming the pod. Created suspended
//! (`runPolicy.suspend`, as Kueue holds it), no pod runs until the JobSet is resumed.
#![forbid(unsafe_code)]
mod common;

use anyhow::{bail, Result};
use common::jobset::{hostname, pod_name, text, JobSetSandbox};
use sandbox::api::resources::{JOBS, JOBSETS};
use sandbox::app_images::{app_image, check_pi, AppImage};
use sandbox::harness;
use serde_json::Value;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NS: &str = "default";

/// The GPU-style MPIJob `name`: a launcher of `launcher_image` limited to 1 CPU running
/// `mpirun -n 4 pi`, 2 workers of `image` with 2 CPUs and 2 slots each.
fn mpijob(name: &str, launcher_image: &str, image: &str, policy: &str) -> String {
    mpijob_running(
        name,
        launcher_image,
        image,
        policy,
        "/home/mpiuser/pi",
        false,
    )
}

/// [`mpijob`] whose ranks run `program` (its words in a YAML flow list), created suspended or
/// not.
fn mpijob_running(
    name: &str,
    launcher_image: &str,
    image: &str,
    policy: &str,
    program: &str,
    suspend: bool,
) -> String {
    format!(
        r#"apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: {name}
spec:
  slotsPerWorker: 2
  launcherCreationPolicy: {policy}
  runPolicy:
    cleanPodPolicy: Running
    suspend: {suspend}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
            - name: mpi-launcher
              image: {launcher_image}
              command: [mpirun, -n, "4", {program}]
              securityContext: {{runAsUser: 1000}}
              resources:
                limits: {{cpu: 1, memory: 512Mi}}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: mpi-worker
              image: {image}
              command: [/usr/sbin/sshd]
              args: [-De, -f, /home/mpiuser/.sshd_config]
              securityContext: {{runAsUser: 1000}}
              resources:
                limits: {{cpu: 2, memory: 1Gi}}
"#
    )
}

/// A JobSet sandbox ([`JobSetSandbox`]) that applies MPIJobs converted by `prrte-k8s manifest`.
struct Sandbox(JobSetSandbox);

impl std::ops::Deref for Sandbox {
    type Target = JobSetSandbox;
    fn deref(&self) -> &JobSetSandbox {
        &self.0
    }
}

impl Sandbox {
    async fn start(test: &str) -> Result<Sandbox> {
        JobSetSandbox::start(test, NS, &["launcher", "worker"], "mpi")
            .await
            .map(Sandbox)
    }

    /// `prrte-k8s manifest --from-mpijob FILE --kind jobset` of `yaml`, then `kubectl apply`.
    fn apply(&self, name: &str, yaml: &str) -> Result<String> {
        let file = self.dir.path().join(format!("{name}.mpijob.yaml"));
        std::fs::write(&file, yaml)?;
        let mut c = Command::new(harness::workspace_bin("prrte-k8s")?);
        c.arg("manifest")
            .arg("--from-mpijob")
            .arg(&file)
            .args(["--kind", "jobset"]);
        let out = harness::run_with_timeout(c, Duration::from_secs(30))?;
        if !out.status.success() {
            bail!("prrte-k8s manifest --from-mpijob failed: {}", text(&out));
        }
        let rendered = String::from_utf8(out.stdout)?;
        let out = self.kubectl(&["apply", "-f", "-"], Some(&rendered))?;
        if !out.status.success() {
            bail!("kubectl apply -f - failed: {}\n{rendered}", text(&out));
        }
        Ok(rendered)
    }
}

fn container(p: &Value) -> &Value {
    &p["spec"]["containers"][0]
}

/// The time of the pod's `Ready` condition turning true.
fn ready_at(p: &Value) -> Option<String> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
}

/// What a finished run left.
struct Run {
    _sb: Sandbox,
    launcher: Arc<Value>,
    /// The workers' pods as they were when the launcher's pod was first seen.
    workers_at_launch: Vec<Arc<Value>>,
}

/// Runs the GPU-style MPIJob `name` with `policy` to its end.
async fn run(name: &str, policy: &str) -> Run {
    let image = app_image(AppImage::TrixieOpenmpi).unwrap();
    // The same image named otherwise (no tag): the launcher's own image reference.
    let launcher_image = image.trim_end_matches(":latest").to_string();
    assert_ne!(launcher_image, image);
    let sb = Sandbox::start(name).await.unwrap();
    sb.apply(name, &mpijob(name, &launcher_image, &image, policy))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    let workers_at_launch = loop {
        // The workers first: a launcher seen next was made no earlier than this read.
        let workers = sb.pods(name, "worker");
        if !sb.pods(name, "launcher").is_empty() {
            break workers;
        }
        assert!(
            Instant::now() < deadline,
            "no launcher pod: {}",
            sb.describe(name)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let ended = sb.wait_finished(name, 240).unwrap();
    assert_eq!(ended, "Completed", "{}", sb.describe(name));
    let launchers = sb.pods(name, "launcher");
    let workers = sb.pods(name, "worker");
    assert_eq!(
        (launchers.len(), workers.len()),
        (1, 2),
        "{}",
        sb.describe(name)
    );
    let launcher = launchers[0].clone();
    // The Launcher's template on the launcher's pod, the Worker's on the workers'.
    let lc = container(&launcher);
    assert_eq!(lc["image"], launcher_image.as_str());
    assert_eq!(lc["resources"]["limits"]["cpu"], "1");
    for w in &workers {
        assert_eq!(container(w)["image"], image.as_str());
        assert_eq!(container(w)["resources"]["limits"]["cpu"], "2");
    }
    // Every rank's output in the launcher's log, none on the launcher's pod, 2 per worker.
    let log = sb.logs(&pod_name(&launcher));
    let pi = check_pi(&log, 4).unwrap_or_else(|e| panic!("{e:#}\n{}", sb.describe(name)));
    assert!(
        !pi.hosts.contains(&hostname(&launcher)),
        "a rank on the launcher: {:?}",
        pi.hosts
    );
    for w in &workers {
        assert_eq!(
            pi.hosts.iter().filter(|h| **h == hostname(w)).count(),
            2,
            "2 ranks on {}: {:?}",
            hostname(w),
            pi.hosts
        );
    }
    Run {
        _sb: sb,
        launcher,
        workers_at_launch,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_style_mpijob_gives_the_launcher_its_own_template_and_the_ranks_to_the_workers() {
    let r = run("jsgpu", "AtStartup").await;
    let env = container(&r.launcher)["env"].as_array().unwrap().clone();
    assert!(
        env.iter()
            .any(|e| e["name"] == "PRRTE_K8S_BATCH_ROLE" && e["value"] == "launcher"),
        "{env:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_workers_ready_makes_the_launcher_after_every_worker_is_ready() {
    let r = run("jswait", "WaitForWorkersReady").await;
    let created = r.launcher["metadata"]["creationTimestamp"]
        .as_str()
        .expect("a creation time")
        .to_string();
    assert_eq!(
        r.workers_at_launch.len(),
        2,
        "both workers before the launcher"
    );
    for w in &r.workers_at_launch {
        let ready = ready_at(w).unwrap_or_else(|| {
            panic!(
                "{} not Ready when the launcher's pod was made: {w}",
                pod_name(w)
            )
        });
        // RFC 3339 times of one format: their order is their text's.
        assert_eq!(ready.len(), created.len(), "{ready} {created}");
        assert!(
            created >= ready,
            "the launcher's pod made at {created}, before {} was ready at {ready}",
            pod_name(w)
        );
    }
}

/// The JobSet's condition `ty`, once true.
fn condition(sb: &Sandbox, name: &str, ty: &str) -> Value {
    let js = sb.cluster.store().get(&JOBSETS, NS, name).unwrap();
    js["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == ty && c["status"] == "True"))
        .cloned()
        .unwrap_or_else(|| panic!("no {ty} condition: {}", sb.describe(name)))
}

/// Waits until every worker pod runs 2 processes `comm`.
fn wait_for_ranks(sb: &Sandbox, name: &str, comm: &str) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let workers = sb.pods(name, "worker");
        let ranks = |p: &Value| {
            sb.cluster
                .pod_host_pids(&pod_name(p))
                .unwrap_or_default()
                .into_iter()
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim_end() == comm)
                })
                .count()
        };
        if workers.len() == 2 && workers.iter().all(|w| ranks(w) == 2) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no 2 ranks on each worker: {}",
            sb.describe(name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_worker_fails_the_whole_jobset_at_once_naming_the_pod() {
    let name = "jsevict";
    let image = app_image(AppImage::TrixieOpenmpi).unwrap();
    let sb = Sandbox::start(name).await.unwrap();
    let yaml = mpijob_running(name, &image, &image, "AtStartup", r#"sleep, "600""#, false);
    sb.apply(name, &yaml).unwrap();
    wait_for_ranks(&sb, name, "sleep");
    let victim = pod_name(&sb.pods(name, "worker")[1]);
    let evicted = Instant::now();
    sb.cluster.evict(&victim).unwrap();
    let ended = sb.wait_finished(name, 60).unwrap();
    assert_eq!(ended, "Failed", "{}", sb.describe(name));
    // At once: well within the 600 s the ranks would run.
    assert!(evicted.elapsed() < Duration::from_secs(60));
    let failed = condition(&sb, name, "Failed");
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("{name}-worker-0"))),
        "the JobSet names the failed worker Job: {failed}"
    );
    let job = sb
        .cluster
        .store()
        .get(&JOBS, NS, &format!("{name}-worker-0"))
        .unwrap();
    let job_failed = job["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Failed"))
        .cloned()
        .unwrap_or_default();
    let message = job_failed["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&victim) && message.contains("DisruptionTarget"),
        "the worker Job's Failed condition names the evicted pod {victim}: {job_failed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_mpijob_runs_no_pod_until_its_jobset_is_resumed() {
    let name = "jssusp";
    let image = app_image(AppImage::TrixieOpenmpi).unwrap();
    let sb = Sandbox::start(name).await.unwrap();
    let yaml = mpijob_running(name, &image, &image, "AtStartup", "/home/mpiuser/pi", true);
    sb.apply(name, &yaml).unwrap();
    // Both child Jobs made and suspended by their controller: then no pod is expected.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let suspended: Vec<String> = sb
            .cluster
            .store()
            .list(&JOBS, Some(NS), &Default::default())
            .map(|l| l.items)
            .unwrap_or_default()
            .iter()
            .filter(|j| {
                j["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Suspended" && c["status"] == "True")
                })
            })
            .map(|j| pod_name(j))
            .collect();
        if suspended.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Jobs not suspended: {}",
            sb.describe(name)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pods: Vec<Arc<Value>> = ["launcher", "worker"]
        .iter()
        .flat_map(|rj| sb.pods(name, rj))
        .collect();
    assert!(
        pods.is_empty(),
        "a pod while suspended: {}",
        sb.describe(name)
    );
    let out = sb
        .kubectl(
            &[
                "patch",
                "jobset",
                name,
                "--type=merge",
                "-p",
                r#"{"spec":{"suspend":false}}"#,
            ],
            None,
        )
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let ended = sb.wait_finished(name, 240).unwrap();
    assert_eq!(ended, "Completed", "{}", sb.describe(name));
    let launcher = sb.pods(name, "launcher");
    check_pi(&sb.logs(&pod_name(&launcher[0])), 4)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", sb.describe(name)));
}
