//! The controller end to end against mpi-operator's own expectations: a sandbox with the MPIJob
//! CRD and this build's controller (`prrte-k8s controller`, the cluster's kubeconfig) as a
//! process, `kubectl` the real one, and mpi-operator's example MPIJobs (`pi.yaml`,
//! `pi-mpich.yaml`) with `managedBy` added, their images the tests' trixie Open MPI and MPICH
//! images tagged under the names the examples give.

use anyhow::{bail, Context, Result};
use sandbox::api::resources::PODS;
use sandbox::app_images::{app_image, check_pi, AppImage, INJECT_IMAGE};
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::{self, TestDir};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const NS: &str = "default";
/// The image mpi-operator's pi.yaml names.
pub const PI_IMAGE: &str = "docker.io/mpioperator/mpi-pi:openmpi";
/// The image mpi-operator's pi-mpich.yaml names.
pub const PI_MPICH_IMAGE: &str = "docker.io/mpioperator/mpi-pi:mpich";
/// mpi-operator's Open MPI example.
pub const PI: &str = include_str!("../../../adapter/src/manifest/mpijob/examples/pi.yaml");
/// mpi-operator's MPICH example.
pub const PI_MPICH: &str =
    include_str!("../../../adapter/src/manifest/mpijob/examples/pi-mpich.yaml");
/// The `managedBy` of the MPIJobs the controller reconciles.
pub const MANAGED_BY: &str = "prrte-k8s.io/controller";

pub fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The MPIJob `example` (YAML) named `name`, managed by the controller, changed by `edit`.
pub fn mpijob_from(example: &str, name: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_yaml::from_str(example).unwrap();
    v["metadata"]["name"] = name.into();
    v["spec"]["runPolicy"]["managedBy"] = MANAGED_BY.into();
    edit(&mut v);
    serde_yaml::to_string(&v).unwrap()
}

/// mpi-operator's pi.yaml named `name`, managed by the controller, changed by `edit`.
pub fn pi(name: &str, edit: impl FnOnce(&mut Value)) -> String {
    mpijob_from(PI, name, edit)
}

/// The replica `role`'s (`Launcher`, `Worker`) first container.
pub fn container<'a>(v: &'a mut Value, role: &str) -> &'a mut Value {
    &mut v["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
}

/// The launcher runs `mpirun -n 2 ARGS...` (pi.yaml's `args` after `mpirun`).
pub fn launcher_args(v: &mut Value, args: &[&str]) {
    let mut all = vec!["-n", "2"];
    all.extend_from_slice(args);
    container(v, "Launcher")["args"] = json!(all);
}

/// Tags the tests' image `app` as `name` in the local store (the name an example gives).
pub fn tag(app: AppImage, name: &str) -> Result<()> {
    let app = app_image(app)?;
    let out = Command::new("buildah").args(["tag", &app, name]).output()?;
    if !out.status.success() {
        bail!("buildah tag {app} {name}: {}", text(&out));
    }
    Ok(())
}

/// A controller process; killed when dropped.
pub struct ControllerProc(pub std::sync::Mutex<Child>);

impl ControllerProc {
    /// How it ended, if it has (a controller that exits, e.g. on a flag it does not know, fails
    /// the test at once instead of leaving it waiting for a status nobody writes).
    pub fn ended(&self) -> Option<std::process::ExitStatus> {
        let mut child = self.0.lock().unwrap_or_else(|e| e.into_inner());
        child.try_wait().ok().flatten()
    }
}

impl Drop for ControllerProc {
    fn drop(&mut self) {
        let child = self.0.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// One pod of an MPIJob's child: (its index in the MPIJob, [`index_of`], phase, being
/// deleted).
pub type PodState = (String, String, bool);

/// The replicated job of a JobSet's pod.
pub const REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// The pod's index in its MPIJob, whichever its child: 0 the launcher, 1.. the workers. In the
/// Indexed Job, its completion index; in a JobSet, 0 for the replicated job `launcher`'s pod,
/// a `worker`'s completion index plus one.
pub fn index_of(p: &Value) -> Option<u32> {
    let labels = &p["metadata"]["labels"];
    let index = labels["batch.kubernetes.io/job-completion-index"]
        .as_str()
        .and_then(|i| i.parse::<u32>().ok());
    match labels[REPLICATED_JOB].as_str() {
        Some("launcher") => Some(0),
        Some(_) => index.map(|i| i + 1),
        None => index,
    }
}

/// A sandbox with the CRD and this build's controller, and kubectl on it.
pub struct Sandbox {
    // Dropped first: the controller stops before the cluster.
    controller: ControllerProc,
    pub cluster: Cluster,
    kubectl: PathBuf,
    dir: TestDir,
}

impl Sandbox {
    /// The sandbox of the test `test`, mpi-operator's Open MPI image tagged.
    /// Its controller runs with the default `--launcher-pod` (`auto`): the sandbox serves
    /// JobSets, so each MPIJob with workers gets a JobSet, the launcher a pod of its own.
    pub async fn start(test: &str) -> Sandbox {
        Self::try_start(test, None)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The sandbox of the test `test` whose controller runs with `--launcher-pod launcher_pod`
    /// (`jobset`, `shared`, `auto`; the sandbox serves JobSets).
    pub async fn start_with(test: &str, launcher_pod: &str) -> Sandbox {
        Self::try_start(test, Some(launcher_pod))
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    async fn try_start(test: &str, launcher_pod: Option<&str>) -> Result<Sandbox> {
        if sandbox::images::inspect(INJECT_IMAGE)?.is_none() {
            bail!("the image {INJECT_IMAGE} is not in the local store; run `make image`");
        }
        tag(AppImage::TrixieOpenmpi, PI_IMAGE)?;
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
            .args(launcher_pod.map_or(vec![], |l| vec!["--launcher-pod", l]))
            .env("KUBECONFIG", cluster.kubeconfig())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting prrte-k8s controller")?;
        Ok(Sandbox {
            controller: ControllerProc(std::sync::Mutex::new(child)),
            cluster,
            kubectl,
            dir,
        })
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        harness::kubectl::with_input(&self.kubectl, &self.cluster, args, stdin)
    }

    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
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

    pub fn apply(&self, yaml: &str) {
        self.kubectl_ok(&["apply", "-f", "-"], Some(yaml));
    }

    pub fn patch(&self, name: &str, patch: &str) {
        self.kubectl_ok(
            &["patch", "mpijob", name, "--type=merge", "-p", patch],
            None,
        );
    }

    /// The object `kind/name` of `NS` as JSON, if there is one.
    pub fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let out = self
            .kubectl(&["get", kind, name, "-o", "json"], None)
            .ok()?;
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    pub fn mpijob(&self, name: &str) -> Option<Value> {
        self.get("mpijob", name)
    }

    /// The MPIJob's condition `kind`: (status, reason).
    pub fn condition(job: &Value, kind: &str) -> Option<(String, String)> {
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

    pub fn describe(&self, name: &str) -> String {
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

    /// Asserts that `kubectl describe` shows an event of each reason on the MPIJob `name`.
    pub fn assert_events(&self, name: &str, reasons: &[&str]) {
        let describe = self.describe(name);
        for reason in reasons {
            assert!(describe.contains(reason), "no {reason} event:\n{describe}");
        }
    }

    /// Waits up to `secs` until `ok` holds of the MPIJob `name`; returns it then.
    pub fn wait_for(
        &self,
        name: &str,
        what: &str,
        secs: u64,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(j) = self.mpijob(name).filter(|j| ok(j)) {
                return j;
            }
            if let Some(status) = self.controller.ended() {
                panic!(
                    "MPIJob {name}: not {what}: the controller exited ({status}):\n{}",
                    self.describe(name)
                );
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
    pub fn wait(&self, name: &str, kind: &str, secs: u64) -> Value {
        self.wait_for(name, kind, secs, |j| {
            Self::condition(j, kind).is_some_and(|(s, _)| s == "True")
        })
    }

    /// The pods of the MPIJob's job (by the label the job's pods carry), whole.
    pub fn pod_objects(&self, job: &str) -> Vec<Value> {
        self.cluster
            .store()
            .list(&PODS, Some(NS), &Default::default())
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p["metadata"]["labels"]["prrte-k8s.io/job"] == job)
            .map(|p| (*p).clone())
            .collect()
    }

    /// The MPIJob's child, whichever it is: ("jobset" or "job", the object).
    pub fn child(&self, name: &str) -> Option<(&'static str, Value)> {
        ["jobset", "job"]
            .into_iter()
            .find_map(|kind| self.get(kind, name).map(|o| (kind, o)))
    }

    /// The pods of the MPIJob's child, sorted by index ([`index_of`]).
    pub fn pods(&self, job: &str) -> Vec<PodState> {
        let mut pods: Vec<PodState> = self
            .pod_objects(job)
            .into_iter()
            .map(|p| {
                (
                    index_of(&p).map(|i| i.to_string()).unwrap_or_default(),
                    p["status"]["phase"].as_str().unwrap_or("").to_string(),
                    p["metadata"]["deletionTimestamp"].is_string(),
                )
            })
            .collect();
        pods.sort_by_key(|(i, phase, going)| {
            (i.parse::<u32>().unwrap_or(u32::MAX), phase.clone(), *going)
        });
        pods
    }

    /// The log of the pod `pod`'s MPI container.
    pub fn logs(&self, pod: &str) -> String {
        match self.kubectl(&["logs", pod, "-c", "mpi"], None) {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            Ok(o) => format!("(kubectl logs {pod}: {})", text(&o)),
            Err(e) => format!("(kubectl logs {pod}: {e:#})"),
        }
    }

    /// Checks pi's output in the launcher's log (`np` ranks, the right pi); returns the host of
    /// each rank and the host of each pod of the job, by index ([`index_of`]: the launcher's
    /// first).
    pub fn pi_ran(&self, name: &str, np: usize) -> (Vec<String>, Vec<String>) {
        let mut pods = self.pod_objects(name);
        pods.sort_by_key(|p| index_of(p).unwrap_or(u32::MAX));
        let pod_name = |p: &Value| p["metadata"]["name"].as_str().unwrap_or("").to_string();
        let hosts: Vec<String> = pods
            .iter()
            .map(|p| {
                p["spec"]["hostname"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| pod_name(p))
            })
            .collect();
        let launcher = pods.first().map(pod_name).unwrap_or_default();
        let log = self.logs(&launcher);
        let run = check_pi(&log, np).unwrap_or_else(|e| panic!("{e:#}\n{}", self.describe(name)));
        (run.hosts, hosts)
    }

    /// Waits until the MPIJob's pods are `want`.
    pub fn wait_pods(&self, name: &str, what: &str, secs: u64, want: impl Fn(&[PodState]) -> bool) {
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
    pub fn wait_counts(&self, name: &str, want: [(i64, i64, i64); 2]) -> Value {
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

    pub fn shutdown(self) {
        let Sandbox {
            controller,
            cluster,
            ..
        } = self;
        drop(controller);
        cluster.shutdown().unwrap();
    }
}

/// The replicaStatuses of an MPIJob: each role's (active, succeeded, failed), a count it omits
/// being 0.
pub fn counts(j: &Value) -> [(i64, i64, i64); 2] {
    ["Launcher", "Worker"].map(|r| {
        let s = &j["status"]["replicaStatuses"][r];
        let n = |k: &str| s[k].as_i64().unwrap_or(0);
        (n("active"), n("succeeded"), n("failed"))
    })
}

/// The conditions and completion time of a finished MPIJob, which must not change after.
pub fn end_of(job: &Value) -> (Value, Value) {
    (
        job["status"]["conditions"].clone(),
        job["status"]["completionTime"].clone(),
    )
}
