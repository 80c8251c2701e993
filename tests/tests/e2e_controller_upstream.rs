//! mpi-operator v0.8's own test cases against the controller, end to end: its e2e cases
//! (`test/e2e/mpi_job_test.go`: Open MPI and MPICH, root and non-root, host network,
//! `runLauncherAsWorker`, a malformed command, managed externally), the status its
//! integration tests expect (`test/integration/mpi_job_controller_test.go`: conditions with
//! their reasons, `replicaStatuses`, `startTime`, `completionTime`, events) and the launcher
//! Job's `ttlSecondsAfterFinished` of its unit tests (`pkg/controller/mpi_job_controller_test.go`).
//! Each test is named after the case it mirrors. The MPIJobs are mpi-operator's examples with
//! `managedBy` added, changed as the upstream case changes its MPIJob; the images are the tests'
//! trixie Open MPI and MPICH images under the examples' names. The controller runs as a process
//! of this build against a sandbox of its own (`common::controller`), with its default
//! `--launcher-pod` (the sandbox serves JobSets: each MPIJob with workers gets a JobSet, the
//! launcher a pod of its own); `kubectl` is the real one.
//! Suspend and resume, `cleanPodPolicy`, `TestShutdownWorker` and `TestMPIJobFailure` are in
//! `e2e_controller_run_policy.rs`; the e2e case "suspended on creation" in `e2e_controller.rs`.
#![forbid(unsafe_code)]
mod common;

use common::controller::{
    container, counts, end_of, launcher_args, mpijob_from, pi, tag, Sandbox, PI, PI_MPICH,
    PI_MPICH_IMAGE,
};
use sandbox::app_images::AppImage;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The uid every pod runs as when the MPIJob names none (the restricted Pod Security level
/// allows no root): mpi-operator's images' `mpiuser`.
const MPIUSER: i64 = 1000;

/// The MPIJob `example` as mpi-operator's e2e "running as root" case writes it: no
/// `securityContext`, no `sshAuthMountPath`, the launcher's `mpirun` given
/// `--allow-run-as-root`, the workers running the image's own command.
fn as_root(example: &str, name: &str) -> String {
    mpijob_from(example, name, |v| {
        if let Some(s) = v["spec"].as_object_mut() {
            s.remove("sshAuthMountPath");
        }
        for role in ["Launcher", "Worker"] {
            let c = container(v, role).as_object_mut().unwrap();
            c.remove("securityContext");
            if role == "Worker" {
                c.remove("command");
                c.remove("args");
            }
        }
        let launcher = container(v, "Launcher");
        match launcher["command"].as_array_mut() {
            // Open MPI: `command: [mpirun]`, as upstream appends the option to it.
            Some(cmd) if !cmd.is_empty() => cmd.push(json!("--allow-run-as-root")),
            // MPICH: `args: [mpirun, ...]`; Hydra's mpirun runs as root without asking.
            _ => {}
        }
        v["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = json!("OnFailure");
    })
}

/// The uid each of the MPIJob's pods runs its application container as.
fn uids(sb: &Sandbox, name: &str) -> Vec<i64> {
    sb.pod_objects(name)
        .iter()
        .map(|p| {
            let c = p["spec"]["containers"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == "mpi"))
                .cloned()
                .unwrap_or_default();
            c["securityContext"]["runAsUser"]
                .as_i64()
                .or_else(|| p["spec"]["securityContext"]["runAsUser"].as_i64())
                .unwrap_or(0)
        })
        .collect()
}

/// Runs the MPIJob `yaml` (named `name`) to `Succeeded` and checks pi's output for `np` ranks,
/// one on each worker; returns the MPIJob.
fn succeeds_with_pi(sb: &Sandbox, name: &str, yaml: &str, np: usize) -> Value {
    sb.apply(yaml);
    let done = sb.wait(name, "Succeeded", 300);
    let (ranks, hosts) = sb.pi_ran(name, np);
    for r in &ranks {
        assert!(
            hosts[1..].contains(r),
            "rank on {r}, not on a worker {hosts:?}"
        );
    }
    done
}

/// e2e "with OpenMPI implementation, running as root, should succeed": the MPIJob asks no
/// user and gives `mpirun --allow-run-as-root`; it succeeds. Here the pods run as `mpiuser`
/// (uid 1000), never root: the controller renders every pod at the restricted Pod Security
/// level, which allows no root, and the option is harmless to a non-root mpirun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mpi_running_as_root_should_succeed() {
    let sb = Sandbox::start("up-ompi-root").await;
    succeeds_with_pi(&sb, "pi", &as_root(PI, "pi"), 2);
    assert_eq!(uids(&sb, "pi"), [MPIUSER; 3]);
    sb.shutdown();
}

/// e2e "with OpenMPI implementation, running as non-root, should succeed": `runAsUser: 1000`
/// on both replicas, the workers' sshd given `NET_BIND_SERVICE`, `sshAuthMountPath`; it
/// succeeds, every pod as uid 1000 (no sshd runs: the agent is the pods' entrypoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mpi_running_as_non_root_should_succeed() {
    let sb = Sandbox::start("up-ompi-nonroot").await;
    let yaml = pi("pi", |v| {
        container(v, "Worker")["securityContext"]["capabilities"] =
            json!({"add": ["NET_BIND_SERVICE"]});
    });
    succeeds_with_pi(&sb, "pi", &yaml, 2);
    assert_eq!(uids(&sb, "pi"), [MPIUSER; 3]);
    sb.shutdown();
}

/// e2e "with OpenMPI implementation, running as root, running with host network, should
/// succeed": `hostNetwork: true` on both replicas, one worker, `mpirun /home/mpiuser/pi`
/// (one rank per slot). It succeeds, on the pod network: the controller drops `hostNetwork`
/// (the restricted Pod Security level allows no host network), and the sandbox's kubelet gives
/// every pod a network namespace of its own in any case, so a pod on the host's network cannot
/// be shown here. What is asserted is what a user sees: the MPIJob succeeds, its pods have no
/// `hostNetwork`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mpi_running_with_host_network_should_succeed() {
    let sb = Sandbox::start("up-ompi-hostnet").await;
    let mut yaml: Value = serde_yaml::from_str(&as_root(PI, "pi")).unwrap();
    for role in ["Launcher", "Worker"] {
        yaml["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["hostNetwork"] = json!(true);
    }
    container(&mut yaml, "Launcher")["args"] = json!(["/home/mpiuser/pi"]);
    yaml["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = json!(1);
    succeeds_with_pi(&sb, "pi", &serde_yaml::to_string(&yaml).unwrap(), 1);
    for p in sb.pod_objects("pi") {
        assert_ne!(p["spec"]["hostNetwork"], true, "{}", p["spec"]);
    }
    sb.shutdown();
}

/// e2e "with MPICH Implementation, running as root, should succeed": mpi-operator's MPICH
/// pi with no `securityContext`; it succeeds through Hydra's mpirun, as uid 1000 (see
/// [`open_mpi_running_as_root_should_succeed`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpich_running_as_root_should_succeed() {
    let sb = Sandbox::start("up-mpich-root").await;
    tag(AppImage::TrixieMpich, PI_MPICH_IMAGE).unwrap();
    succeeds_with_pi(&sb, "pi", &as_root(PI_MPICH, "pi"), 2);
    assert_eq!(uids(&sb, "pi"), [MPIUSER; 3]);
    sb.shutdown();
}

/// e2e "with MPICH Implementation, running as non-root, should succeed": mpi-operator's
/// `pi-mpich.yaml` as it is (`runAsUser: 1000`, sshd probed on port 2222); it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpich_running_as_non_root_should_succeed() {
    let sb = Sandbox::start("up-mpich-nonroot").await;
    tag(AppImage::TrixieMpich, PI_MPICH_IMAGE).unwrap();
    succeeds_with_pi(&sb, "pi", &mpijob_from(PI_MPICH, "pi", |_| {}), 2);
    assert_eq!(uids(&sb, "pi"), [MPIUSER; 3]);
    sb.shutdown();
}

/// e2e "with custom cluster-domain, running as root, should succeed": `runLauncherAsWorker:
/// true` (the custom cluster domain is mpi-operator's hostfile's; here the pods find each
/// other through the API, so there is none to set). It succeeds, and the launcher's pod is a
/// worker too: of pi's 2 ranks one runs in the launcher's pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_cluster_domain_run_launcher_as_worker_should_succeed() {
    let sb = Sandbox::start("up-launcher-worker").await;
    let mut yaml: Value = serde_yaml::from_str(&as_root(PI, "pi")).unwrap();
    yaml["spec"]["runLauncherAsWorker"] = json!(true);
    sb.apply(&serde_yaml::to_string(&yaml).unwrap());
    sb.wait("pi", "Succeeded", 300);
    let (ranks, hosts) = sb.pi_ran("pi", 2);
    assert!(
        ranks.contains(&hosts[0]),
        "no rank on the launcher {}: {ranks:?}",
        hosts[0]
    );
    sb.shutdown();
}

/// e2e "with OpenMPI implementation, has malformed command, should fail" (`backoffLimit: 1`):
/// the launcher's command cannot run (upstream: mpirun refusing root; here, where nothing
/// runs as root, a command that is not there). The MPIJob ends `Failed`, with a
/// `completionTime`, never `Succeeded`, and once its pods have settled no worker is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn has_malformed_command_should_fail() {
    let sb = Sandbox::start("up-malformed").await;
    sb.apply(&pi("bad", |v| {
        v["spec"]["runPolicy"]["backoffLimit"] = json!(1);
        container(v, "Launcher")["command"] = json!(["/home/mpiuser/no-such-mpirun"]);
    }));
    let failed = sb.wait("bad", "Failed", 300);
    assert!(failed["status"]["completionTime"].is_string(), "{failed}");
    assert!(
        Sandbox::condition(&failed, "Succeeded").is_none(),
        "{failed}"
    );
    sb.wait_pods("bad", "stopped", 90, |p| {
        p.iter()
            .all(|(_, phase, _)| phase != "Running" && phase != "Pending")
    });
    let settled = sb.wait_for("bad", "its workers uncounted", 60, |j| {
        counts(j)[1] == (0, 0, 0) && counts(j)[0].0 == 0
    });
    assert_eq!(end_of(&settled), end_of(&failed));
    sb.shutdown();
}

/// e2e "running as non-root, should not be updated when managed externally, only created",
/// integration `TestMPIJobManagedExternally` and unit `TestDoNothingWithMPIJobManagedExternally`:
/// MPIJobs whose `managedBy` is Kueue's MultiKueue (`kueue.x-k8s.io/multikueue`) or
/// mpi-operator's own (`kubeflow.org/mpi-operator`, the e2e case "should succeed when explicitly
/// managed by mpi-operator": another controller's here) are created and left alone: no
/// status (no condition, no `startTime`), no JobSet nor Job, no pod, no Secret or other object
/// of theirs.
/// That the controller has seen them is shown by an MPIJob of its own applied after them
/// running to its end meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn should_not_be_updated_when_managed_externally_only_created() {
    let sb = Sandbox::start("up-managed-ext").await;
    let others = [
        ("kueue", "kueue.x-k8s.io/multikueue"),
        ("operator", "kubeflow.org/mpi-operator"),
    ];
    for (name, by) in others {
        sb.apply(&pi(name, |v| {
            v["spec"]["runPolicy"]["managedBy"] = json!(by);
        }));
    }
    sb.apply(&pi("ours", |v| launcher_args(v, &["/bin/true"])));
    sb.wait("ours", "Succeeded", 300);
    for (name, by) in others {
        let j = sb.mpijob(name).expect("the MPIJob is there");
        assert_eq!(j["spec"]["runPolicy"]["managedBy"], by);
        assert!(
            j.get("status")
                .is_none_or(|s| s.as_object().is_none_or(|m| m.is_empty())),
            "{name}: {}",
            j["status"]
        );
        for kind in [
            "jobset",
            "job",
            "secret",
            "serviceaccount",
            "role",
            "rolebinding",
            "networkpolicy",
        ] {
            let out = sb.kubectl_ok(&["get", kind, "-o", "json"], None);
            let list: Value = serde_json::from_str(&out).unwrap();
            let uid = &j["metadata"]["uid"];
            let theirs: Vec<&Value> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| {
                    o["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|rs| rs.iter().any(|r| &r["uid"] == uid))
                })
                .collect();
            assert!(theirs.is_empty(), "{name}: {kind} made: {theirs:?}");
        }
        assert!(sb.pods(name).is_empty(), "{name}: {:?}", sb.pods(name));
    }
    sb.shutdown();
}

/// Integration `TestMPIJobSuccess` (with `cleanPodPolicy: Running`), end to end: the
/// `Created` condition (`MPIJobCreated`) and the event; while the launcher and both workers
/// run, `replicaStatuses` `Launcher {active: 1}`, `Worker {active: 2}`, `Running` True
/// (`MPIJobRunning`) and a `startTime`; at the end `Succeeded` True (`MPIJobSucceeded`),
/// `Running` False (its reason kept), a `completionTime` not before the start, and
/// `Launcher {succeeded: 1}`, `Worker {}`: a zero count is left out, as mpi-operator leaves it
/// out (its `omitempty`), not written `0`; the events `MPIJobCreated`, `MPIJobRunning`,
/// `MPIJobSucceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_mpi_job_success() {
    let sb = Sandbox::start("up-success").await;
    sb.apply(&pi("job", |v| {
        v["spec"]["runPolicy"]["cleanPodPolicy"] = json!("Running");
        launcher_args(v, &["/bin/sleep", "10"]);
    }));
    let created = sb.wait("job", "Created", 60);
    assert_eq!(
        Sandbox::condition(&created, "Created"),
        Some(("True".into(), "MPIJobCreated".into()))
    );
    let running = sb.wait_for("job", "running, all counted", 180, |j| {
        counts(j) == [(1, 0, 0), (2, 0, 0)]
            && Sandbox::condition(j, "Running").is_some_and(|(s, _)| s == "True")
    });
    assert_eq!(
        Sandbox::condition(&running, "Running"),
        Some(("True".into(), "MPIJobRunning".into()))
    );
    let started = running["status"]["startTime"].clone();
    assert!(started.is_string(), "{}", running["status"]);
    let done = sb.wait("job", "Succeeded", 180);
    assert_eq!(
        Sandbox::condition(&done, "Succeeded"),
        Some(("True".into(), "MPIJobSucceeded".into()))
    );
    // mpi-operator's setCondition turns Running false and keeps its reason.
    assert_eq!(
        Sandbox::condition(&done, "Running"),
        Some(("False".into(), "MPIJobRunning".into()))
    );
    assert_eq!(done["status"]["startTime"], started);
    // Both RFC 3339 in UTC, as the controller writes them: ordered as strings.
    let (start, end) = (
        started.as_str().unwrap_or(""),
        done["status"]["completionTime"].as_str().unwrap_or(""),
    );
    assert!(
        end.len() == start.len() && end >= start,
        "{}",
        done["status"]
    );
    let settled = sb.wait_counts("job", [(0, 1, 0), (0, 0, 0)]);
    assert_eq!(end_of(&settled), end_of(&done));
    let r = &settled["status"]["replicaStatuses"];
    for (role, zero) in [
        ("Launcher", &["active", "failed"][..]),
        ("Worker", &["active", "succeeded", "failed"][..]),
    ] {
        for k in zero {
            assert!(r[role].get(*k).is_none(), "{role}.{k} written: {r}");
        }
    }
    sb.assert_events(
        "job",
        &["MPIJobCreated", "MPIJobRunning", "MPIJobSucceeded"],
    );
    sb.shutdown();
}

/// Unit `TestNewLauncherAndWorker` ("overrides": the launcher Job gets the MPIJob's
/// `runPolicy.ttlSecondsAfterFinished`), end to end: mpi-operator's Job controller then
/// deletes the launcher's Job and its pods that long after the end, and the MPIJob stays,
/// `Succeeded` with its `completionTime`. Here the MPIJob's JobSet carries the TTL: after it,
/// the JobSet and every pod are gone, the MPIJob keeps its end, and the controller makes nothing
/// again (a change to the MPIJob reconciled after changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_new_launcher_and_worker_ttl_seconds_after_finished() {
    let sb = Sandbox::start("up-ttl").await;
    sb.apply(&pi("ttl", |v| {
        v["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = json!(5);
        launcher_args(v, &["/bin/true"]);
    }));
    let done = sb.wait("ttl", "Succeeded", 300);
    let (kind, job) = sb.child("ttl").expect("the JobSet, before its TTL");
    assert_eq!(kind, "jobset");
    assert_eq!(job["spec"]["ttlSecondsAfterFinished"], 5);
    let deadline = Instant::now() + Duration::from_secs(90);
    while sb.child("ttl").is_some() || !sb.pods("ttl").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the Job or its pods outlived their TTL: {:?}\n{}",
            sb.pods("ttl"),
            sb.describe("ttl")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Reconciled again after the Job is gone: nothing is made, the end stays.
    sb.kubectl_ok(&["annotate", "mpijob", "ttl", "touched=1"], None);
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert!(sb.child("ttl").is_none(), "{}", sb.describe("ttl"));
        assert!(sb.pods("ttl").is_empty(), "{}", sb.describe("ttl"));
        std::thread::sleep(Duration::from_millis(250));
    }
    let after = sb.mpijob("ttl").expect("the MPIJob stays");
    assert_eq!(end_of(&after), end_of(&done));
    assert_eq!(
        Sandbox::condition(&after, "Succeeded").map(|c| c.0),
        Some("True".into())
    );
    sb.shutdown();
}

/// Integration `TestMPIJobWaitWorkers`: with `launcherCreationPolicy: WaitForWorkersReady`
/// no launcher pod exists until every worker is ready; then it is made and the job succeeds.
/// Whenever the launcher's pod is seen, every worker must already have been ready.
/// The launcher has a pod of its own (`--launcher-pod jobset`): the JobSet lists the workers
/// first and starts the launcher's Job once they are ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_mpi_job_wait_workers() {
    let sb = Sandbox::start_with("up-wait-workers", "jobset").await;
    sb.apply(&pi("wait", |v| {
        v["spec"]["launcherCreationPolicy"] = json!("WaitForWorkersReady");
    }));
    let role = |p: &Value| {
        p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let ready = |p: &Value| {
        p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut launcher_seen = false;
    loop {
        let done = sb
            .mpijob("wait")
            .is_some_and(|j| Sandbox::condition(&j, "Succeeded").is_some_and(|c| c.0 == "True"));
        if done {
            break;
        }
        let pods = sb.pod_objects("wait");
        if !launcher_seen && pods.iter().any(|p| role(p) == "launcher") {
            launcher_seen = true;
            let workers: Vec<&Value> = pods.iter().filter(|p| role(p) == "worker").collect();
            assert!(
                workers.len() == 2 && workers.iter().all(|p| ready(p)),
                "the launcher's pod before every worker was ready:\n{}",
                sb.describe("wait")
            );
        }
        assert!(
            Instant::now() < deadline,
            "not Succeeded within 300 s:\n{}",
            sb.describe("wait")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    sb.shutdown();
}
