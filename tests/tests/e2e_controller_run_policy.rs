//! The controller and an MPIJob's `runPolicy` end to end, against mpi-operator v0.8's own
//! expectations: `suspend` of a running MPIJob and its resume (its integration test
//! `TestMPIJobResumingAndSuspending`), the status after the end (`TestMPIJobSuccess`,
//! `TestMPIJobFailure`, its e2e case "has malformed command", a deadline), and
//! `cleanPodPolicy` (`TestShutdownWorker`: `Running`, the default; `All`). The controller
//! runs as a process of this build (`prrte-k8s controller`, the cluster's kubeconfig) against
//! a sandbox of its own, the MPIJobs are mpi-operator's `pi.yaml` with `managedBy` added and
//! its image the tests' trixie Open MPI image; `kubectl` is the real one.
#![forbid(unsafe_code)]
mod common;

use common::controller::{end_of, launcher_args, pi, Sandbox};
use serde_json::Value;
use std::time::{Duration, Instant};

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
    sb.assert_events(
        "pause",
        &["MPIJobSuspended", "MPIJobResumed", "MPIJobSucceeded"],
    );
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
