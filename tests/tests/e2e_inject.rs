//! The injected runtime end to end, the way a user coming from mpi-operator runs it: an
//! MPIJob of their own image (`sandbox::app_images`: Debian trixie with `openmpi-bin` or
//! `mpich`, openssh installed, nothing of prrte-k8s in it) converted with `prrte-k8s manifest
//! --from-mpijob FILE` and applied with `kubectl apply -f -` in the sandbox cluster. The pods'
//! init container `prrte-k8s-install` copies the runtime from `localhost/prrte-k8s-inject`
//! (`make image`), the agent finds the image's MPI (`--mpi`), and the launcher pod's `mpirun`
//! runs the ranks on the worker pods: trixie's Open MPI 5 through the k8s components loaded
//! into its own prte, MPICH through Hydra with `prrte-k8s-rsh` and a machinefile from
//! discovery; Debian unstable's Open MPI 6 (PRRTE 5.0) through PRRTE's ssh launcher with
//! `prrte-k8s-rsh`, its prted checked by the PRRTE 5.0 profile. No sshd runs. The static
//! programs also run in an image with no libc at all.
#![forbid(unsafe_code)]
use anyhow::{bail, Context, Result};
use sandbox::api::resources::{JOBS, PODS};
use sandbox::app_images::{app_image, check_pi, AppImage, INJECT_IMAGE};
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::{self, StopOnDrop, TestDir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NS: &str = "default";

fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// An mpi-operator MPIJob as its examples write it (`examples/v2beta1/pi`): a launcher
/// running `command`, `workers` workers running sshd (which prrte-k8s never starts),
/// `slotsPerWorker` slots each, uid 1000.
fn mpijob(name: &str, image: &str, implementation: &str, slots: u32, command: &[&str]) -> String {
    let command: Vec<String> = command.iter().map(|a| format!("{a:?}")).collect();
    format!(
        r#"apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: {name}
spec:
  slotsPerWorker: {slots}
  mpiImplementation: {implementation}
  sshAuthMountPath: /home/mpiuser/.ssh
  runPolicy:
    cleanPodPolicy: Running
    backoffLimit: 0
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
            - name: mpi-launcher
              image: {image}
              command: [{command}]
              securityContext: {{runAsUser: 1000}}
              resources:
                limits: {{cpu: 1, memory: 1Gi}}
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
                limits: {{cpu: 1, memory: 1Gi}}
"#,
        command = command.join(", ")
    )
}

/// What was seen of each pod of a cluster while it ran (pods of a failed Job are deleted).
#[derive(Default)]
struct Watched {
    /// Every program name (`comm`) of each pod's processes.
    programs: BTreeMap<String, BTreeSet<String>>,
    /// The last text of each pod's `mpi` container log.
    logs: BTreeMap<String, String>,
}

impl Watched {
    fn logs(&self) -> String {
        self.logs
            .iter()
            .map(|(pod, log)| format!("== {pod} (as last seen)\n{log}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Samples the pods of `cluster` (their processes on the node, their logs) until `stop` is set.
fn watch_pods(cluster: &Cluster, stop: &AtomicBool) -> Watched {
    let mut seen = Watched::default();
    let store = cluster.store();
    while !stop.load(Ordering::Relaxed) {
        let pods = store
            .list(&PODS, Some(NS), &Default::default())
            .map(|l| l.items)
            .unwrap_or_default();
        for p in pods {
            let name = pod_name(&p);
            for pid in cluster.pod_host_pids(&name).unwrap_or_default() {
                if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                    seen.programs
                        .entry(name.clone())
                        .or_default()
                        .insert(c.trim_end().to_string());
                }
            }
            if let Some(log) = cluster
                .container_log(NS, &name, "mpi")
                .and_then(|f| std::fs::read_to_string(f).ok())
            {
                seen.logs.insert(name, log);
            }
        }
        // A sampling period, not a wait for a condition: the loop ends when `stop` is set.
        std::thread::sleep(Duration::from_millis(20));
    }
    seen
}

/// A sandbox cluster of its own (own directory, pods named after the test) and kubectl on it.
struct Sandbox {
    cluster: Cluster,
    kubectl: PathBuf,
    dir: TestDir,
}

impl Sandbox {
    async fn start(test: &str) -> Result<Sandbox> {
        if sandbox::images::inspect(INJECT_IMAGE)?.is_none() {
            bail!("the image {INJECT_IMAGE} is not in the local store; run `make image`");
        }
        let kubectl =
            sandbox::harness::kubectl::find().context("no kubectl; run prrte-config/setup.sh")?;
        let dir = TestDir::new(test)?;
        let cluster = Cluster::start(ClusterOptions {
            dir: Some(dir.path().join("cluster")),
            ..Default::default()
        })
        .await?;
        Ok(Sandbox {
            cluster,
            kubectl,
            dir,
        })
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        sandbox::harness::kubectl::with_input(&self.kubectl, &self.cluster, args, stdin)
    }

    /// `prrte-k8s manifest --from-mpijob FILE` of `yaml`, then `kubectl apply -f -`.
    fn apply_mpijob(&self, name: &str, yaml: &str) -> Result<String> {
        let file = self.dir.path().join(format!("{name}.mpijob.yaml"));
        std::fs::write(&file, yaml)?;
        let mut c = Command::new(harness::workspace_bin("prrte-k8s")?);
        c.arg("manifest").arg("--from-mpijob").arg(&file);
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

    /// Waits until the Job is finished (its `Complete` or `Failed` condition), at most `secs`;
    /// then `kubectl wait --for=condition=<condition> job/<name>` must agree. The error has the
    /// Job's state, and comes at once when the Job ends the other way.
    fn wait_job(&self, name: &str, condition: &str, secs: u64) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let ended = loop {
            let job = self.cluster.store().get(&JOBS, NS, name);
            let ended = job.as_ref().ok().and_then(|j| {
                j["status"]["conditions"].as_array()?.iter().find_map(|c| {
                    (c["status"] == "True" && (c["type"] == "Complete" || c["type"] == "Failed"))
                        .then(|| c["type"].as_str().unwrap_or("").to_lowercase())
                })
            });
            if let Some(e) = ended {
                break e;
            }
            if Instant::now() >= deadline {
                bail!(
                    "Job {name} not finished within {secs} s\n{}",
                    self.describe(name)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if ended != condition {
            bail!(
                "Job {name} ended {ended}, not {condition}\n{}",
                self.describe(name)
            );
        }
        let mut c = Command::new(&self.kubectl);
        c.env("KUBECONFIG", self.cluster.kubeconfig()).args([
            "wait",
            &format!("--for=condition={condition}"),
            &format!("job/{name}"),
            "--timeout=30s",
        ]);
        let out = harness::run_with_timeout(c, Duration::from_secs(50))?;
        if !out.status.success() {
            bail!(
                "kubectl wait --for=condition={condition} job/{name}: {}\n{}",
                text(&out),
                self.describe(name)
            );
        }
        Ok(())
    }

    /// The Job's pods, by completion index.
    fn pods(&self, job: &str) -> Vec<Arc<Value>> {
        let mut pods: Vec<Arc<Value>> = self
            .cluster
            .store()
            .list(&PODS, Some(NS), &Default::default())
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == job)
            .collect();
        pods.sort_by_key(|p| {
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap_or("")
                .parse::<u32>()
                .unwrap_or(u32::MAX)
        });
        pods
    }

    /// `kubectl logs POD -c CONTAINER`.
    fn logs(&self, pod: &str, container: &str) -> String {
        match self.kubectl(&["logs", pod, "-c", container], None) {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            Ok(o) => format!("(kubectl logs {pod} -c {container} failed: {})", text(&o)),
            Err(e) => format!("(kubectl logs {pod}: {e:#})"),
        }
    }

    fn describe(&self, job: &str) -> String {
        let status = self
            .cluster
            .store()
            .get(&JOBS, NS, job)
            .map(|j| serde_json::to_string_pretty(&j["status"]).unwrap_or_default());
        let pods: Vec<String> = self
            .pods(job)
            .iter()
            .map(|p| {
                let name = pod_name(p);
                format!(
                    "== {name} {} init={} main={}\n-- install:\n{}\n-- mpi:\n{}",
                    p["status"]["phase"],
                    p.pointer("/status/initContainerStatuses/0/state")
                        .map(|s| s.to_string())
                        .unwrap_or_default(),
                    p.pointer("/status/containerStatuses/0/state")
                        .map(|s| s.to_string())
                        .unwrap_or_default(),
                    self.logs(&name, "prrte-k8s-install"),
                    self.logs(&name, "mpi"),
                )
            })
            .collect();
        format!("job status: {status:?}\npods:\n{}", pods.join("\n"))
    }
}

fn pod_name(p: &Value) -> String {
    p["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn hostname(p: &Value) -> String {
    p["spec"]["hostname"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| pod_name(p))
}

/// What a finished MPIJob left: pod 0's (the launcher's) log, the worker pods' host names and
/// logs, and the programs seen in each pod while it ran.
struct Finished {
    launcher: String,
    launcher_host: String,
    /// (pod, host name, log) of each worker.
    workers: Vec<(String, String, String)>,
    seen: BTreeMap<String, BTreeSet<String>>,
    describe: String,
}

/// Converts and applies the MPIJob `name` of `app`'s image running `command` on 2 workers of
/// `slots` slots each; waits for the Job's `condition` (`complete` or `failed`).
async fn run_mpijob(
    test: &str,
    app: AppImage,
    implementation: &str,
    slots: u32,
    command: &[&str],
    condition: &str,
) -> (Sandbox, Finished) {
    let image = app_image(app).unwrap();
    let sb = Sandbox::start(test).await.unwrap();
    let yaml = mpijob(test, &image, implementation, slots, command);
    let stop = AtomicBool::new(false);
    let (seen, done) = std::thread::scope(|s| {
        let watch = s.spawn(|| watch_pods(&sb.cluster, &stop));
        let stopping = StopOnDrop(&stop);
        let done = sb
            .apply_mpijob(test, &yaml)
            .and_then(|_| sb.wait_job(test, condition, 240));
        drop(stopping);
        (watch.join().unwrap_or_default(), done)
    });
    if let Err(e) = done {
        panic!("{e:#}\n{}", seen.logs());
    }
    let pods = sb.pods(test);
    // A failed Job's controller deletes its running pods; pod 0 (the launcher) stays.
    let want = if condition == "complete" { 3 } else { 1 };
    assert!(
        pods.len() >= want && pod_name(&pods[0]).starts_with(&format!("{test}-0")),
        "{want} pods, pod 0 first:\n{}\n{}",
        sb.describe(test),
        seen.logs()
    );
    let f = Finished {
        launcher: sb.logs(&pod_name(&pods[0]), "mpi"),
        launcher_host: hostname(&pods[0]),
        workers: pods[1..]
            .iter()
            .map(|p| (pod_name(p), hostname(p), sb.logs(&pod_name(p), "mpi")))
            .collect(),
        describe: format!("{}\n{}", sb.describe(test), seen.logs()),
        seen: seen.programs,
    };
    (sb, f)
}

/// The agent of every pod said which MPI it found (`launch` is the launch path's name).
fn assert_detected(f: &Finished, launch: &str, mpi: &str) {
    for log in std::iter::once(&f.launcher).chain(f.workers.iter().map(|(_, _, l)| l)) {
        let line = log
            .lines()
            .find(|l| l.contains("serving the image's MPI"))
            .unwrap_or_else(|| panic!("no detection line in:\n{log}\n{}", f.describe));
        assert!(
            line.contains(launch) && line.contains(mpi),
            "expected {launch} / {mpi}: {line}"
        );
    }
}

/// `np` ranks of pi, `per_worker` on each worker pod, none on the launcher; no sshd anywhere;
/// each worker's agent started the image's daemon `daemon`.
fn assert_pi_on_workers(f: &Finished, np: usize, per_worker: usize, daemon: &str) {
    let run = check_pi(&f.launcher, np).unwrap_or_else(|e| panic!("{e:#}\n{}", f.describe));
    assert!(
        !run.hosts.contains(&f.launcher_host),
        "a rank on the launcher {}: {:?}",
        f.launcher_host,
        run.hosts
    );
    for (_, host, _) in &f.workers {
        assert_eq!(
            run.hosts.iter().filter(|h| *h == host).count(),
            per_worker,
            "{per_worker} ranks on {host}: {:?}\n{}",
            run.hosts,
            f.describe
        );
    }
    assert_no_sshd(f);
    for (pod, _, log) in &f.workers {
        // The worker's agent started the image's daemon for the launcher (a launch or exec
        // request), the daemon it serves named at its start.
        assert!(
            log.contains(&format!("prted={daemon} ")) && log.contains("outcome=started pid"),
            "{pod}'s agent did not start {daemon}:\n{log}"
        );
    }
}

fn assert_no_sshd(f: &Finished) {
    for (pod, progs) in &f.seen {
        assert!(
            !progs.iter().any(|p| p.starts_with("sshd")),
            "sshd ran in {pod}: {progs:?}"
        );
    }
    // The sampling saw each pod's processes: its agent (pid 1, alive throughout) at least.
    assert!(
        f.seen.len() >= 3 && f.seen.values().all(|p| p.contains("prrte-k8s-agent")),
        "the pods' processes were not all seen: {:?}",
        f.seen
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_of_trixie_openmpi_runs_ranks_on_the_workers_through_the_components() {
    let (_sb, f) = run_mpijob(
        "injompi",
        AppImage::TrixieOpenmpi,
        "OpenMPI",
        2,
        &["mpirun", "-n", "4", "/home/mpiuser/pi"],
        "complete",
    )
    .await;
    assert_detected(&f, "prrte-components", "Open MPI 5.0");
    // Debian's stock PRRTE cannot serve allocation requests, and the agent says why.
    assert_detected(&f, "prrte-components", "lacks prrte-k8s's patch 0003");
    assert_pi_on_workers(&f, 4, 2, "/usr/bin/prted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_of_trixie_mpich_runs_ranks_on_the_workers_through_hydra() {
    let (_sb, f) = run_mpijob(
        "injmpich",
        AppImage::TrixieMpich,
        "MPICH",
        2,
        &["mpirun", "-n", "4", "/home/mpiuser/pi"],
        "complete",
    )
    .await;
    assert_detected(&f, "mpich-hydra", "MPICH 4.");
    assert_pi_on_workers(&f, 4, 2, "/usr/bin/hydra_pmi_proxy");
}

/// Debian bookworm's Open MPI 4.1 (ORTE): its mpirun starts an `orted` on each worker pod
/// through `prrte-k8s-rsh` as its rsh agent, hosts from the hostfile the agent wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_of_bookworm_openmpi4_runs_ranks_on_the_workers_through_orte() {
    let (_sb, f) = run_mpijob(
        "injorte",
        AppImage::BookwormOpenmpi,
        "OpenMPI",
        2,
        &["mpirun", "-n", "4", "/home/mpiuser/pi"],
        "complete",
    )
    .await;
    assert_detected(&f, "orte-rsh", "Open MPI 4.1");
    assert_pi_on_workers(&f, 4, 2, "/usr/bin/orted");
}

/// Debian unstable's Open MPI 6.0 (PRRTE 5.0, PMIx 7.0): the components are not built for its
/// PRRTE, so its mpirun starts a prted on each worker pod through PRRTE's ssh launcher and
/// `prrte-k8s-rsh`, and the workers' agents admit that prted's command line by the PRRTE 5.0
/// profile (`--daemonize` and the hostfile it hands on, which PRRTE 3.0's launcher never sends).
/// The image's `/etc/openmpi/openmpi-mca-params.conf` pins the TCP BTL to `lo`; the agent's
/// `OMPI_MCA_btl_tcp_if_include` (the pod's interface), which mpirun hands to the ranks, puts
/// it on the pod network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_of_sid_openmpi6_runs_ranks_on_the_workers_through_prrte_rsh() {
    let (_sb, f) = run_mpijob(
        "injompi6",
        AppImage::SidOpenmpi,
        "OpenMPI",
        2,
        &["mpirun", "-n", "4", "/home/mpiuser/pi"],
        "complete",
    )
    .await;
    assert_detected(&f, "prrte-rsh", "Open MPI 6.0");
    assert_pi_on_workers(&f, 4, 2, "/usr/bin/prted");
    for (pod, _, log) in &f.workers {
        assert!(
            !log.contains("is not an option prted gets"),
            "{pod}'s agent refused a prted argument:\n{log}"
        );
    }
}

/// Debian bullseye's MPICH 3.4 (glibc 2.31, older than the one the runtime was built on: the
/// injected programs are static) through Hydra and `prrte-k8s-rsh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_of_bullseye_mpich_runs_ranks_on_the_workers_through_hydra() {
    let (_sb, f) = run_mpijob(
        "injbull",
        AppImage::BullseyeMpich,
        "MPICH",
        2,
        &["mpirun", "-n", "4", "/home/mpiuser/pi"],
        "complete",
    )
    .await;
    assert_detected(&f, "mpich-hydra", "MPICH 3.");
    assert_pi_on_workers(&f, 4, 2, "/usr/bin/hydra_pmi_proxy");
}

/// The program fails with exit code 3 after a correct run: the Job fails, and kubectl names the
/// code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_whose_program_exits_3_fails_the_job_naming_the_code() {
    let (sb, f) = run_mpijob(
        "injfail",
        AppImage::TrixieOpenmpi,
        "OpenMPI",
        1,
        &["/bin/sh", "-c", "mpirun -n 2 /home/mpiuser/pi && exit 3"],
        "failed",
    )
    .await;
    check_pi(&f.launcher, 2).unwrap_or_else(|e| panic!("{e:#}\n{}", f.describe));
    assert_no_sshd(&f);
    let out = sb
        .kubectl(
            &[
                "get",
                "job",
                "injfail",
                "-o",
                "jsonpath={range .status.conditions[*]}{.type}={.status}: {.message}{\"\\n\"}{end}",
            ],
            None,
        )
        .unwrap();
    let conditions = String::from_utf8_lossy(&out.stdout);
    let failed = conditions
        .lines()
        .find(|l| l.starts_with("Failed=True"))
        .unwrap_or_else(|| panic!("no Failed condition: {}", text(&out)));
    assert!(failed.contains("exit code 3"), "{failed}");
    let pod0 = pod_name(&sb.pods("injfail")[0]);
    let out = sb
        .kubectl(
            &[
                "get",
                "pod",
                &pod0,
                "-o",
                "jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Failed 3",
        "{}",
        text(&out)
    );
}

/// The static programs run in an image with no libc (busybox-static only), copied there by the
/// inject image's init container; the agent's `--mpi auto` finds no MPI and says what it
/// looked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_programs_run_in_an_image_without_libc() {
    let image = app_image(AppImage::NoLibc).unwrap();
    let sb = Sandbox::start("injnolibc").await.unwrap();
    let script = "set -e; \
        for p in prrte-k8s prrte-k8s-agent; do /opt/prrte-k8s/bin/$p --version; done; \
        set +e; /opt/prrte-k8s/bin/prrte-k8s-rsh 2>&1; echo rsh-exit=$?; \
        /opt/prrte-k8s/bin/prrte-k8s-agent --mpi auto --detect-only; echo detect-exit=$?";
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: injnolibc}}
spec:
  restartPolicy: Never
  securityContext: {{runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, seccompProfile: {{type: RuntimeDefault}}}}
  initContainers:
  - name: prrte-k8s-install
    image: {INJECT_IMAGE}
    command: [/opt/prrte-k8s-bundle/bin/prrte-k8s, install-runtime, --to, /opt/prrte-k8s]
    securityContext: {{allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {{drop: [ALL]}}}}
    volumeMounts: [{{name: prrte-k8s-runtime, mountPath: /opt/prrte-k8s}}]
  containers:
  - name: app
    image: {image}
    command: [/bin/sh, -c, {script:?}]
    securityContext: {{allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {{drop: [ALL]}}}}
    volumeMounts:
    - {{name: prrte-k8s-runtime, mountPath: /opt/prrte-k8s, readOnly: true}}
    - {{name: tmp, mountPath: /tmp}}
  volumes:
  - {{name: prrte-k8s-runtime, emptyDir: {{}}}}
  - {{name: tmp, emptyDir: {{}}}}
"#
    );
    let out = sb.kubectl(&["apply", "-f", "-"], Some(&pod)).unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let done = sb
        .cluster
        .wait_phase(
            NS,
            "injnolibc",
            &["Succeeded", "Failed"],
            Duration::from_secs(120),
        )
        .await
        .unwrap();
    let install = sb.logs("injnolibc", "prrte-k8s-install");
    let log = sb.logs("injnolibc", "app");
    assert_eq!(done["status"]["phase"], "Succeeded", "{install}\n{log}");
    assert!(
        install.starts_with("prrte-k8s install-runtime: installed prrte-k8s "),
        "{install}"
    );
    let version = env!("CARGO_PKG_VERSION");
    for p in ["prrte-k8s", "prrte-k8s-agent"] {
        assert!(
            log.lines().any(|l| l.trim() == format!("{p} {version}")),
            "{p} --version in:\n{log}"
        );
    }
    // prrte-k8s-rsh, like ssh, has no --version: without a host it prints its usage.
    assert!(log.contains("usage: prrte-k8s-rsh"), "{log}");
    assert!(log.contains("rsh-exit=255"), "{log}");
    assert!(log.contains("launch: none"), "{log}");
    assert!(log.contains("detect-exit=2"), "{log}");
    assert!(
        log.contains("prted"),
        "the error names what was looked for:\n{log}"
    );
}

/// A process of a pod, told apart from a later one with the same pid by its start time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: u32,
    comm: String,
    start: u64,
}

impl Proc {
    fn read(pid: u32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ...`: the comm may hold spaces and parentheses, the fields after
        // the last `)` do not; the start time is field 22 (the 20th after the comm).
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_string();
        let start = rest.split_whitespace().nth(19)?.parse().ok()?;
        Some(Proc { pid, comm, start })
    }

    fn alive(&self) -> bool {
        Proc::read(self.pid).is_some_and(|p| p == *self)
    }
}

impl Sandbox {
    /// The processes of pod `pod` on the node.
    fn procs(&self, pod: &str) -> Vec<Proc> {
        self.cluster
            .pod_host_pids(pod)
            .unwrap_or_default()
            .into_iter()
            .filter_map(Proc::read)
            .collect()
    }

    /// Waits until each pod `i` of Job `job` runs at least `per_pod[i]` processes named
    /// `comm`; then every process of the Job's pods.
    fn wait_for_procs(&self, job: &str, comm: &str, per_pod: &[usize], secs: u64) -> Vec<Proc> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let pods = self.pods(job);
            let procs: Vec<Vec<Proc>> = pods.iter().map(|p| self.procs(&pod_name(p))).collect();
            let ok = pods.len() == per_pod.len()
                && procs
                    .iter()
                    .zip(per_pod)
                    .all(|(ps, &n)| ps.iter().filter(|p| p.comm == comm).count() >= n);
            if ok {
                return procs.into_iter().flatten().collect();
            }
            assert!(
                Instant::now() < deadline,
                "the pods do not run {per_pod:?} {comm} processes within {secs} s: {procs:?}\n{}",
                self.describe(job)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A worker pod is evicted while the ranks run: the Job fails at once naming that pod (the pod
/// failure policy's `DisruptionTarget` rule), and every process of every pod ends, the
/// launcher's mpirun and the other worker's ranks too. How long the other pods' deletion takes
/// (their grace period) is not what is tested: only that it ends, within a bound well above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_with_an_evicted_worker_fails_the_job_naming_it_and_nothing_is_left() {
    let test = "injevict";
    let image = app_image(AppImage::TrixieOpenmpi).unwrap();
    let sb = Sandbox::start(test).await.unwrap();
    let yaml = mpijob(
        test,
        &image,
        "OpenMPI",
        2,
        &["mpirun", "-n", "4", "sleep", "600"],
    );
    sb.apply_mpijob(test, &yaml).unwrap();
    // Two ranks (`sleep`) on each worker, none on the launcher.
    let procs = sb.wait_for_procs(test, "sleep", &[0, 2, 2], 240);
    let pods = sb.pods(test);
    assert!(
        sb.procs(&pod_name(&pods[0]))
            .iter()
            .all(|p| p.comm != "sleep"),
        "a rank on the launcher:\n{}",
        sb.describe(test)
    );
    let victim = pod_name(&pods[2]);
    sb.cluster.evict(&victim).unwrap();
    sb.wait_job(test, "failed", 60).unwrap();
    let job = sb.cluster.store().get(&JOBS, NS, test).unwrap();
    let failed = job["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Failed"))
        .cloned()
        .unwrap_or_default();
    let message = failed["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&victim) && message.contains("DisruptionTarget"),
        "the Failed condition names the evicted pod {victim}: {failed}"
    );
    // Nothing left: every process seen in the pods ends, and no pod of the Job runs.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left: Vec<&Proc> = procs.iter().filter(|p| p.alive()).collect();
        let running: Vec<String> = sb
            .pods(test)
            .iter()
            .filter(|p| {
                !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                    || !sb.procs(&pod_name(p)).is_empty()
            })
            .map(|p| pod_name(p))
            .collect();
        if left.is_empty() && running.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left running 120 s after the Job failed: processes {left:?}, pods {running:?}\n{}",
            sb.describe(test)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
