//! The controller and an MPIJob's `runPolicy` end to end, against mpi-operator v0.8's own
//! expectations: `suspend` of a running MPIJob and its resume (its integration test
//! `TestMPIJobResumingAndSuspending`), the status after the end (`TestMPIJobSuccess`,
//! `TestMPIJobFailure`, its e2e case "has malformed command", a deadline), and
//! `cleanPodPolicy` (`TestShutdownWorker`: `Running`, the default; `All`), and `backoffLimit`
//! (a launcher that fails twice then succeeds, one that always fails). The controller
//! runs as a process of this build (`prrte-k8s controller`, the cluster's kubeconfig) against
//! a sandbox of its own, which serves JobSets (so each MPIJob with workers gets one, as the
//! default `--launcher-pod auto` chooses; the Indexed Job where a test says so), the MPIJobs are mpi-operator's `pi.yaml` with `managedBy` added and
//! its image the tests' trixie Open MPI image; `kubectl` is the real one.
#![forbid(unsafe_code)]
mod common;

use common::controller::{end_of, launcher_args, pi, Sandbox};
use serde_json::{json, Value};
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
    let (kind, child) = sb.child("pause").expect("the MPIJob's child");
    assert_eq!(kind, "jobset");
    assert_eq!(child["spec"]["suspend"], true);
    // Its Jobs suspended, with no start time (the Job controller resets it).
    let jobs = sb.kubectl_ok(
        &[
            "get",
            "job",
            "-l",
            "jobset.sigs.k8s.io/jobset-name=pause",
            "-o",
            "json",
        ],
        None,
    );
    let jobs: Value = serde_json::from_str(&jobs).unwrap();
    let jobs = jobs["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    for job in &jobs {
        assert_eq!(job["spec"]["suspend"], true);
        assert!(
            job["status"].get("startTime").is_none(),
            "{}",
            job["status"]
        );
    }

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
/// workers stay up (their agents told the command ended; the JobSet does not end), counted
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
    // The JobSet has not ended, its workers' Job active with both.
    let (kind, js) = sb.child("none").expect("the MPIJob's child");
    assert_eq!(kind, "jobset");
    let ended = js["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["status"] == "True" && (c["type"] == "Completed" || c["type"] == "Failed"));
    assert!(!ended, "{}", js["status"]);
    let workers = sb.kubectl_ok(&["get", "job", "none-worker-0", "-o", "json"], None);
    let workers: Value = serde_json::from_str(&workers).unwrap();
    assert_eq!(workers["status"]["active"], 2, "{}", workers["status"]);
    sb.kubectl_ok(&["delete", "mpijob", "none", "--wait=false"], None);
    sb.wait_pods("none", "gone", 90, |p| p.is_empty());
    sb.shutdown();
}

/// The launcher runs `mpirun -n 2 sh -c 'test ATTEMPT -ge SUCCEEDS_FROM && exec pi'`, ATTEMPT
/// the pod's attempt label read through a downward-API volume in every pod (the ranks' too):
/// attempts before `succeeds_from` fail (the ranks exit 1), later ones run pi.
fn fails_until(v: &mut Value, succeeds_from: u32) {
    let script = format!(
        "test \"$(cat /etc/attempt/attempt)\" -ge {succeeds_from} && exec /home/mpiuser/pi"
    );
    launcher_args(v, &["/bin/sh", "-c", &script]);
    v["spec"]["runPolicy"]["backoffLimit"] = 2.into();
    for role in ["Launcher", "Worker"] {
        let spec = &mut v["spec"]["mpiReplicaSpecs"][role]["template"]["spec"];
        spec["volumes"] = json!([{"name": "attempt", "downwardAPI": {"items": [
            {"path": "attempt", "fieldRef": {"fieldPath": "metadata.labels['prrte-k8s.io/attempt']"}}]}}]);
        spec["containers"][0]["volumeMounts"] =
            json!([{"name": "attempt", "mountPath": "/etc/attempt", "readOnly": true}]);
    }
}

impl Sandbox {
    /// Applies `yaml`, the MPIJob `name`, and follows every change of it in the API server's
    /// store (no write is missed, however short its state lasted) until its condition `end` is
    /// True, within `secs`; returns it then, and the messages of the `Restarting` conditions
    /// it showed on the way (each once, in order).
    async fn through_restarts(
        &self,
        yaml: &str,
        name: &str,
        end: &str,
        secs: u64,
    ) -> (Value, Vec<String>) {
        let mut feed = self.cluster.store().subscribe();
        self.apply(yaml);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let mut seen: Vec<String> = Vec::new();
        loop {
            let next = tokio::time::timeout_at(deadline, feed.recv()).await;
            let ev = match next {
                Ok(Ok(ev)) => ev,
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(n))) => {
                    panic!("the store's feed dropped {n} changes")
                }
                _ => panic!(
                    "MPIJob {name}: not {end} within {secs} s (restarts seen: {seen:?}):\n{}",
                    self.describe(name)
                ),
            };
            if ev.resource.plural != "mpijobs" || ev.name != name {
                continue;
            }
            let j: &Value = &ev.object;
            let restarting = j["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Restarting" && c["status"] == "True");
            if let Some(m) = restarting.and_then(|c| c["message"].as_str()) {
                if !seen.iter().any(|s| s == m) {
                    seen.push(m.to_string());
                }
            }
            if Self::condition(j, end).is_some_and(|(s, _)| s == "True") {
                return (j.clone(), seen);
            }
        }
    }

    /// The events of `reason` on the MPIJob `name`, oldest first: (message, how many times it
    /// was recorded). kube's recorder makes one event of a reason a series: a repeat counts,
    /// its message is the first's.
    fn events(&self, name: &str, reason: &str) -> Vec<(String, i64)> {
        let out = self.kubectl_ok(
            &[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={name},reason={reason}"),
                "-o",
                "json",
            ],
            None,
        );
        let v: Value = serde_json::from_str(&out).unwrap_or_default();
        let mut evs: Vec<(String, String, i64)> = v["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                let note = e["message"].as_str().or(e["note"].as_str()).unwrap_or("");
                let t = e["eventTime"]
                    .as_str()
                    .or(e["firstTimestamp"].as_str())
                    .unwrap_or("");
                let count = e["series"]["count"]
                    .as_i64()
                    .or(e["count"].as_i64())
                    .unwrap_or(1);
                (t.to_string(), note.to_string(), count)
            })
            .collect();
        evs.sort();
        evs.into_iter().map(|(_, m, n)| (m, n)).collect()
    }
}

/// `backoffLimit: 2` and a launcher whose first two attempts fail: the MPIJob is `Restarting`
/// twice (each naming the attempt that failed and the next), its event recorded twice, every pod
/// made again each time (the attempt label 0, 1, 2), then `Succeeded`; the launcher's
/// failures counted as mpi-operator counts its launcher Job's (`Launcher {succeeded: 1,
/// failed: 2}`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_restarts_then_succeeds() {
    restarts_then_succeed("ctl-backoff-ok", "shared").await;
}

/// The same with the launcher in a pod of its own: the JobSet is made again each time, its
/// attempt label 2 at the end, the launcher's log in the replicated job `launcher`'s pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_restarts_a_jobset_then_succeeds() {
    restarts_then_succeed("ctl-backoff-js", "jobset").await;
}

/// `backoffLimit: 2`, the first two attempts failing, with the controller's
/// `--launcher-pod launcher_pod` (`shared`: the Indexed Job; `jobset`: the JobSet).
async fn restarts_then_succeed(test: &str, launcher_pod: &str) {
    let sb = Sandbox::start_with(test, launcher_pod).await;
    let yaml = pi("retry", |v| fails_until(v, 2));
    let (done, seen) = sb.through_restarts(&yaml, "retry", "Succeeded", 600).await;
    assert_eq!(seen.len(), 2, "{seen:?}\n{}", sb.describe("retry"));
    for (i, m) in seen.iter().enumerate() {
        let (failed, next) = (i + 1, i + 2);
        assert!(
            m.contains(&format!("attempt {failed} ("))
                && m.contains(&format!("attempt {next} starts")),
            "{m}"
        );
    }
    // One event of the reason, recorded twice (the first restart's message).
    assert_eq!(
        sb.events("retry", "MPIJobRestarting"),
        [(seen[0].clone(), 2)]
    );
    assert!(Sandbox::condition(&done, "Failed").is_none());
    assert!(
        Sandbox::condition(&done, "Restarting").is_none(),
        "Running replaced it"
    );
    let (kind, launcher) = if launcher_pod == "jobset" {
        (
            "jobset",
            "jobset.sigs.k8s.io/jobset-name=retry,jobset.sigs.k8s.io/replicatedjob-name=launcher",
        )
    } else {
        (
            "job",
            "batch.kubernetes.io/job-name=retry,batch.kubernetes.io/job-completion-index=0",
        )
    };
    let job = sb.kubectl_ok(&["get", kind, "retry", "-o", "json"], None);
    let job: Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["metadata"]["labels"]["prrte-k8s.io/attempt"], "2");
    let log = sb.kubectl_ok(&["logs", "--tail=-1", "-l", launcher], None);
    assert!(log.contains("pi is approximately"), "{log}");
    let settled = sb.wait_counts("retry", [(0, 1, 2), (0, 0, 0)]);
    assert_eq!(end_of(&settled), end_of(&done));
    sb.shutdown();
}

/// `backoffLimit: 2` and a launcher that always fails: `Restarting` twice, then `Failed` with
/// reason `BackoffLimitExceeded`, its message naming the third attempt's failure (the pod and
/// its exit code), and its event; the three failures counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_exceeded() {
    let sb = Sandbox::start("ctl-backoff-exceeded").await;
    let yaml = pi("doomed", |v| fails_until(v, 9));
    let (done, seen) = sb.through_restarts(&yaml, "doomed", "Failed", 600).await;
    assert_eq!(seen.len(), 2, "{seen:?}\n{}", sb.describe("doomed"));
    let failed = done["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(failed["reason"], "BackoffLimitExceeded");
    let msg = failed["message"].as_str().unwrap();
    // The JobSet's launcher names the failed rank ("exited with code 1"), the Job's pod
    // failure policy the pod ("failed with exit code 1").
    assert!(
        msg.contains("backoff limit (2 restarts): attempt 3 (")
            && (msg.contains("exited with code 1") || msg.contains("exit code 1")),
        "{msg}"
    );
    // One event; the condition may name the failed rank after it, once the launcher's pod
    // shows it.
    let ev = sb.events("doomed", "BackoffLimitExceeded");
    assert!(
        ev.len() == 1 && ev[0].1 == 1 && msg.starts_with(&ev[0].0),
        "{ev:?}\n{msg}"
    );
    assert_eq!(
        sb.events("doomed", "MPIJobRestarting"),
        [(seen[0].clone(), 2)]
    );
    let settled = sb.wait_counts("doomed", [(0, 0, 3), (0, 0, 0)]);
    assert_eq!(end_of(&settled), end_of(&done));
    sb.shutdown();
}
