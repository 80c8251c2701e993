//! The controller and an MPIJob's `runPolicy` end to end, against mpi-operator v0.8's own
//! expectations: `suspend` of a running MPIJob and its resume (its integration test
//! `TestMPIJobResumingAndSuspending`), the status after the end (`TestMPIJobSuccess`,
//! `TestMPIJobFailure`, its e2e case "has malformed command", a deadline), and
//! `cleanPodPolicy` (`TestShutdownWorker`: `Running`, the default; `All`). The controller
//! runs as a process of this build (`prrte-k8s controller`, the cluster's kubeconfig) against
//! a sandbox of its own, the MPIJobs are mpi-operator's `pi.yaml` with `managedBy` added and
//! its image the tests' trixie Open MPI image; `kubectl` is the real one.
#![forbid(unsafe_code)]
use anyhow::{bail, Context, Result};
use sandbox::api::resources::PODS;
use sandbox::app_images::{app_image, AppImage, INJECT_IMAGE};
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::{self, TestDir};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NS: &str = "default";
/// The image mpi-operator's pi.yaml names.
const PI_IMAGE: &str = "docker.io/mpioperator/mpi-pi:openmpi";
const PI: &str = include_str!("../../adapter/src/manifest/mpijob/examples/pi.yaml");
const MANAGED_BY: &str = "prrte-k8s.io/controller";

fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// mpi-operator's pi.yaml named `name`, managed by the controller, changed by `edit`.
fn pi(name: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_yaml::from_str(PI).unwrap();
    v["metadata"]["name"] = name.into();
    v["spec"]["runPolicy"]["managedBy"] = MANAGED_BY.into();
    edit(&mut v);
    serde_yaml::to_string(&v).unwrap()
}

/// The launcher runs `mpirun -n 2 ARGS...` (pi.yaml's `args` after `mpirun`).
fn launcher_args(v: &mut Value, args: &[&str]) {
    let c = &mut v["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0];
    let mut all = vec!["-n", "2"];
    all.extend_from_slice(args);
    c["args"] = json!(all);
}

/// The controller process; killed when dropped.
struct ControllerProc(Child);

impl Drop for ControllerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A sandbox with the CRD and this build's controller, and kubectl on it.
struct Sandbox {
    // Dropped first: the controller stops before the cluster.
    controller: ControllerProc,
    cluster: Cluster,
    kubectl: PathBuf,
    dir: TestDir,
}

impl Sandbox {
    async fn start(test: &str) -> Sandbox {
        Self::try_start(test)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    async fn try_start(test: &str) -> Result<Sandbox> {
        if sandbox::images::inspect(INJECT_IMAGE)?.is_none() {
            bail!("the image {INJECT_IMAGE} is not in the local store; run `make image`");
        }
        let app = app_image(AppImage::TrixieOpenmpi)?;
        let out = Command::new("buildah")
            .args(["tag", &app, PI_IMAGE])
            .output()?;
        if !out.status.success() {
            bail!("buildah tag {app} {PI_IMAGE}: {}", text(&out));
        }
        let kubectl = harness::kubectl::find().context("no kubectl; run prrte-config/setup.sh")?;
        let bin = harness::workspace_bin("prrte-k8s")?;
        let dir = TestDir::new(test)?;
        let cluster = Cluster::start(ClusterOptions {
            dir: Some(dir.path().join("cluster")),
            ..Default::default()
        })
        .await?;
        let mut crd = Command::new(&bin);
        crd.arg("crd");
        let crd = harness::run_with_timeout(crd, Duration::from_secs(30))?;
        if !crd.status.success() {
            bail!("prrte-k8s crd: {}", text(&crd));
        }
        cluster.apply_yaml(&String::from_utf8(crd.stdout)?)?;
        let log = std::fs::File::create(dir.path().join("controller.log"))?;
        let child = Command::new(&bin)
            .args(["controller", "--lease-namespace", NS, "--identity", test])
            .args(["--metrics-address", "127.0.0.1:0"])
            .args(["--health-address", "127.0.0.1:0"])
            .args(["--image-pull-policy", "Never"])
            .env("KUBECONFIG", cluster.kubeconfig())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting prrte-k8s controller")?;
        Ok(Sandbox {
            controller: ControllerProc(child),
            cluster,
            kubectl,
            dir,
        })
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        harness::kubectl::with_input(&self.kubectl, &self.cluster, args, stdin)
    }

    fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self
            .kubectl(args, stdin)
            .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")));
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn apply(&self, yaml: &str) {
        self.kubectl_ok(&["apply", "-f", "-"], Some(yaml));
    }

    fn patch(&self, name: &str, patch: &str) {
        self.kubectl_ok(
            &["patch", "mpijob", name, "--type=merge", "-p", patch],
            None,
        );
    }

    fn mpijob(&self, name: &str) -> Option<Value> {
        let out = self
            .kubectl(&["get", "mpijob", name, "-o", "json"], None)
            .ok()?;
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    /// The MPIJob's condition `kind`: (status, reason).
    fn condition(job: &Value, kind: &str) -> Option<(String, String)> {
        job["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or("").to_string(),
                    c["reason"].as_str().unwrap_or("").to_string(),
                )
            })
    }

    fn describe(&self, name: &str) -> String {
        let d = self
            .kubectl(&["describe", "mpijob", name], None)
            .map(|o| text(&o))
            .unwrap_or_default();
        let pods = self
            .kubectl(&["get", "pods", "-o", "wide"], None)
            .map(|o| text(&o))
            .unwrap_or_default();
        let log =
            std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        format!(
            "{d}\n{pods}\ncontroller log (last lines, newest first):\n{}",
            tail.join("\n")
        )
    }

    /// Waits up to `secs` until `ok` holds of the MPIJob `name`; returns it then.
    fn wait_for(&self, name: &str, what: &str, secs: u64, ok: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(j) = self.mpijob(name).filter(|j| ok(j)) {
                return j;
            }
            assert!(
                Instant::now() < deadline,
                "MPIJob {name}: not {what} within {secs} s:\n{}",
                self.describe(name)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for the condition `kind` True.
    fn wait(&self, name: &str, kind: &str, secs: u64) -> Value {
        self.wait_for(name, kind, secs, |j| {
            Self::condition(j, kind).is_some_and(|(s, _)| s == "True")
        })
    }

    /// The pods of the MPIJob's Job: (completion index, phase, being deleted).
    fn pods(&self, job: &str) -> Vec<(String, String, bool)> {
        let mut pods: Vec<(String, String, bool)> = self
            .cluster
            .store()
            .list(&PODS, Some(NS), &Default::default())
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == job)
            .map(|p| {
                (
                    p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    p["status"]["phase"].as_str().unwrap_or("").to_string(),
                    p["metadata"]["deletionTimestamp"].is_string(),
                )
            })
            .collect();
        pods.sort();
        pods
    }

    /// Waits until the MPIJob's pods are `want`.
    fn wait_pods(
        &self,
        name: &str,
        what: &str,
        secs: u64,
        want: impl Fn(&[(String, String, bool)]) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !want(&self.pods(name)) {
            assert!(
                Instant::now() < deadline,
                "MPIJob {name}: its pods not {what} within {secs} s: {:?}\n{}",
                self.pods(name),
                self.describe(name)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the MPIJob's replicaStatuses are `want` (each role's active, succeeded,
    /// failed) and stay so for 3 s: they have settled.
    fn wait_counts(&self, name: &str, want: [(i64, i64, i64); 2]) -> Value {
        let counts = |j: &Value| {
            ["Launcher", "Worker"].map(|r| {
                let s = &j["status"]["replicaStatuses"][r];
                let n = |k: &str| s[k].as_i64().unwrap_or(0);
                (n("active"), n("succeeded"), n("failed"))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut since: Option<Instant> = None;
        loop {
            let j = self.mpijob(name).unwrap_or_default();
            if counts(&j) == want {
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() >= Duration::from_secs(3) {
                    return j;
                }
            } else {
                since = None;
            }
            assert!(
                Instant::now() < deadline,
                "MPIJob {name}: replicaStatuses {:?}, not {want:?}:\n{}",
                counts(&j),
                self.describe(name)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn shutdown(self) {
        let Sandbox {
            controller,
            cluster,
            ..
        } = self;
        drop(controller);
        cluster.shutdown().unwrap();
    }
}

/// The conditions and completion time of a finished MPIJob, which must not change after.
fn end_of(job: &Value) -> (Value, Value) {
    (
        job["status"]["conditions"].clone(),
        job["status"]["completionTime"].clone(),
    )
}

/// mpi-operator's `TestMPIJobResumingAndSuspending` (and its e2e "suspended on creation"),
/// with a running MPIJob: suspended, its pods go, `Suspended` True (`MPIJobSuspended`),
/// `Running` False, its replicaStatuses `Launcher {}`, `Worker {}`; resumed, `Suspended`
/// False (`MPIJobResumed`), a new start time, and it runs to `Succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpi_job_test_suspend_resume() {
    let sb = Sandbox::start("ctl-suspend").await;
    sb.apply(&pi("pause", |v| launcher_args(v, &["/bin/sleep", "15"])));
    let running = sb.wait("pause", "Running", 180);
    let started = running["status"]["startTime"].clone();
    sb.wait_pods("pause", "all running", 60, |p| {
        p.len() == 3 && p.iter().all(|(_, phase, _)| phase == "Running")
    });

    sb.patch("pause", r#"{"spec":{"runPolicy":{"suspend":true}}}"#);
    let held = sb.wait("pause", "Suspended", 60);
    assert_eq!(
        Sandbox::condition(&held, "Suspended"),
        Some(("True".into(), "MPIJobSuspended".into()))
    );
    assert_eq!(
        Sandbox::condition(&held, "Running"),
        Some(("False".into(), "MPIJobSuspended".into()))
    );
    sb.wait_pods("pause", "gone", 90, |p| p.is_empty());
    sb.wait_counts("pause", [(0, 0, 0), (0, 0, 0)]);
    let held = sb.mpijob("pause").unwrap();
    assert!(
        Sandbox::condition(&held, "Failed").is_none(),
        "suspending is no failure:\n{}",
        sb.describe("pause")
    );
    let job = sb.kubectl_ok(&["get", "job", "pause", "-o", "json"], None);
    let job: Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["spec"]["suspend"], true);
    assert!(
        job["status"].get("startTime").is_none(),
        "{}",
        job["status"]
    );

    std::thread::sleep(Duration::from_secs(1));
    sb.patch("pause", r#"{"spec":{"runPolicy":{"suspend":false}}}"#);
    let done = sb.wait("pause", "Succeeded", 240);
    assert_eq!(
        Sandbox::condition(&done, "Suspended"),
        Some(("False".into(), "MPIJobResumed".into()))
    );
    assert_ne!(done["status"]["startTime"], started, "a new start time");
    let describe = sb.describe("pause");
    for reason in ["MPIJobSuspended", "MPIJobResumed", "MPIJobSucceeded"] {
        assert!(describe.contains(reason), "no {reason} event:\n{describe}");
    }
    sb.shutdown();
}

/// mpi-operator's `TestShutdownWorker` and `TestMPIJobSuccess`, `cleanPodPolicy: Running`
/// (the default): pi succeeds; no worker is left running or pending; the final replicaStatuses
/// are `Launcher {succeeded: 1}`, `Worker {}`, and stay, as do the conditions and
/// completionTime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_shutdown_worker() {
    let sb = Sandbox::start("ctl-shutdown").await;
    sb.apply(&pi("pi", |v| {
        v["spec"]["runPolicy"]["cleanPodPolicy"] = "Running".into();
    }));
    let done = sb.wait("pi", "Succeeded", 240);
    let settled = sb.wait_counts("pi", [(0, 1, 0), (0, 0, 0)]);
    assert_eq!(end_of(&settled), end_of(&done));
    sb.wait_pods("pi", "finished", 60, |p| {
        p.iter()
            .filter(|(i, _, _)| i != "0")
            .all(|(_, phase, _)| phase != "Running" && phase != "Pending")
    });
    sb.shutdown();
}

/// `cleanPodPolicy: All`: after the end every worker pod is deleted, finished ones too (the
/// launcher's stays, with its log); the counts are mpi-operator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_pod_policy_all() {
    let sb = Sandbox::start("ctl-clean-all").await;
    sb.apply(&pi("all", |v| {
        v["spec"]["runPolicy"]["cleanPodPolicy"] = "All".into();
    }));
    let done = sb.wait("all", "Succeeded", 240);
    sb.wait_pods("all", "only the launcher's", 90, |p| {
        p.len() == 1 && p[0].0 == "0" && p[0].1 == "Succeeded"
    });
    let settled = sb.wait_counts("all", [(0, 1, 0), (0, 0, 0)]);
    assert_eq!(end_of(&settled), end_of(&done));
    sb.shutdown();
}

/// mpi-operator's `TestMPIJobFailure` and its e2e case "has malformed command": a deadline
/// that passes while the job runs, and a command mpirun cannot run. Each fails with its Job's
/// reason; the final replicaStatuses are `Launcher {failed: 1}` (ours runs once), `Worker {}`,
/// whatever became of the pods, and the conditions and completionTime do not change after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_mpi_job_failure() {
    let sb = Sandbox::start("ctl-failure").await;
    sb.apply(&pi("late", |v| {
        launcher_args(v, &["/bin/sleep", "600"]);
        v["spec"]["runPolicy"]["activeDeadlineSeconds"] = 20.into();
    }));
    sb.apply(&pi("malformed", |v| {
        launcher_args(v, &["/home/mpiuser/no-such-program"]);
    }));
    let late = sb.wait("late", "Failed", 240);
    assert_eq!(
        Sandbox::condition(&late, "Failed").map(|c| c.1),
        Some("DeadlineExceeded".into())
    );
    let bad = sb.wait("malformed", "Failed", 240);
    sb.wait_pods("late", "gone", 90, |p| p.is_empty());
    for (name, end) in [("late", &late), ("malformed", &bad)] {
        let settled = sb.wait_counts(name, [(0, 0, 1), (0, 0, 0)]);
        assert_eq!(end_of(&settled), end_of(end), "{name}");
    }
    sb.shutdown();
}

/// `cleanPodPolicy: None`: the launcher succeeds and the MPIJob is `Succeeded` while both
/// workers stay up (their agents told the command ended; the Job does not complete), counted
/// as mpi-operator counts them after the end; the MPIJob deleted, they go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_pod_policy_none() {
    let sb = Sandbox::start("ctl-clean-none").await;
    sb.apply(&pi("none", |v| {
        v["spec"]["runPolicy"]["cleanPodPolicy"] = "None".into();
    }));
    let done = sb.wait("none", "Succeeded", 240);
    let settled = sb.wait_counts("none", [(0, 1, 0), (0, 0, 0)]);
    assert_eq!(end_of(&settled), end_of(&done));
    let up = |p: &[(String, String, bool)]| {
        p.len() == 3
            && p[0].1 == "Succeeded"
            && p[1..]
                .iter()
                .all(|(_, phase, deleting)| phase == "Running" && !deleting)
    };
    // Still up well after the end (longer than a worker's exit delays).
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        assert!(
            up(&sb.pods("none")),
            "{:?}\n{}",
            sb.pods("none"),
            sb.describe("none")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let job = sb.kubectl_ok(&["get", "job", "none", "-o", "json"], None);
    let job: Value = serde_json::from_str(&job).unwrap();
    assert!(job["spec"].get("successPolicy").is_none());
    assert_eq!(job["status"]["active"], 2, "{}", job["status"]);
    sb.kubectl_ok(&["delete", "mpijob", "none", "--wait=false"], None);
    sb.wait_pods("none", "gone", 90, |p| p.is_empty());
    sb.shutdown();
}
