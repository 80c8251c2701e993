//! The controller with the launcher in a pod of its own, end to end: each MPIJob with workers
//! gets a JobSet (replicated jobs `launcher` and `worker`), the launcher's pod from the
//! Launcher's template and the workers' from the Worker's, as `--launcher-pod auto` (the
//! default) chooses where the cluster serves JobSets, and `--launcher-pod jobset` always. The
//! usual GPU MPIJob (a small launcher of another image, workers with more) succeeds with each
//! pod as its template says, its `replicaStatuses` selecting by replicated job; what the one
//! Indexed Job gives holds as well: a worker evicted while the ranks run fails the MPIJob at
//! once naming the pod, a rank that fails is named with its pod and exit code, and an MPIJob
//! created suspended (Kueue's way) runs no pod until it is resumed. The controller runs as a
//! process of this build against a sandbox of its own, which serves JobSets
//! (`common::controller`); `kubectl` is the real one.
#![forbid(unsafe_code)]
mod common;

use common::controller::{container, counts, index_of, launcher_args, pi, tag, Sandbox};
use sandbox::app_images::AppImage;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The launcher's image in the GPU-style MPIJob: the tests' Open MPI image under another name.
const LAUNCHER_IMAGE: &str = "docker.io/example/mpi-launcher:cpu";
const REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// The image and cpu limit of the pod's application container (the one of the MPIJob's
/// image, not the runtime's init container).
fn app(p: &Value) -> (String, String) {
    let c = p["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "mpi"))
        .cloned()
        .unwrap_or_default();
    (
        c["image"].as_str().unwrap_or("").to_string(),
        c["resources"]["limits"]["cpu"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// A GPU-style MPIJob (launcher `cpu: 1` of another image, workers `cpu: 2`): a JobSet whose
/// launcher pod is the Launcher's template and whose workers are the Worker's; `Succeeded`,
/// pi's output in the launcher's log, the counts mpi-operator's, the selectors naming the
/// replicated job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_style_mpijob_gets_its_launchers_own_pod_and_succeeds() {
    let sb = Sandbox::start_with("ctl-js-gpu", "jobset").await;
    tag(AppImage::TrixieOpenmpi, LAUNCHER_IMAGE).unwrap();
    sb.apply(&pi("gpu", |v| {
        let l = container(v, "Launcher");
        l["image"] = json!(LAUNCHER_IMAGE);
        l["resources"]["limits"] = json!({"cpu": "1", "memory": "1Gi"});
        container(v, "Worker")["resources"]["limits"] = json!({"cpu": "2", "memory": "2Gi"});
    }));
    let done = sb.wait("gpu", "Succeeded", 300);
    assert!(Sandbox::condition(&done, "Failed").is_none());
    let js = sb.kubectl_ok(&["get", "jobset", "gpu", "-o", "json"], None);
    let js: Value = serde_json::from_str(&js).unwrap();
    assert_eq!(js["metadata"]["ownerReferences"][0]["kind"], "MPIJob");
    assert!(
        sb.kubectl(&["get", "job", "gpu"], None)
            .is_ok_and(|o| !o.status.success()),
        "no Indexed Job of the MPIJob's name"
    );
    let pods = sb.pod_objects("gpu");
    let role = |p: &Value| {
        p["metadata"]["labels"][REPLICATED_JOB]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let launchers: Vec<&Value> = pods.iter().filter(|p| role(p) == "launcher").collect();
    let workers: Vec<&Value> = pods.iter().filter(|p| role(p) == "worker").collect();
    assert_eq!(launchers.len(), 1, "{}", sb.describe("gpu"));
    assert_eq!(workers.len(), 2, "{}", sb.describe("gpu"));
    assert_eq!(
        app(launchers[0]),
        (LAUNCHER_IMAGE.to_string(), "1".to_string())
    );
    for w in &workers {
        let (image, cpu) = app(w);
        assert_ne!(image, LAUNCHER_IMAGE);
        assert_eq!(cpu, "2");
    }
    let launcher_pod = launchers[0]["metadata"]["name"].as_str().unwrap();
    let log = sb.logs(launcher_pod);
    assert!(log.contains("pi is approximately"), "{log}");
    let settled = sb.wait_counts("gpu", [(0, 1, 0), (0, 0, 0)]);
    let sel = |r: &str| settled["status"]["replicaStatuses"][r]["selector"].clone();
    assert_eq!(
        sel("Launcher"),
        json!(format!("prrte-k8s.io/job=gpu,{REPLICATED_JOB}=launcher"))
    );
    assert_eq!(
        sel("Worker"),
        json!(format!("prrte-k8s.io/job=gpu,{REPLICATED_JOB}=worker"))
    );
    assert_eq!(counts(&settled), [(0, 1, 0), (0, 0, 0)]);
    sb.shutdown();
}

/// The message of the MPIJob's condition `kind`, if it is True.
fn message(job: &Value, kind: &str) -> String {
    job["status"]["conditions"]
        .as_array()
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == kind && c["status"] == "True")
        })
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The names of the MPIJob's pods, by index (the launcher's first).
fn pod_names(sb: &Sandbox, name: &str) -> Vec<String> {
    let mut pods = sb.pod_objects(name);
    pods.sort_by_key(|p| index_of(p).unwrap_or(u32::MAX));
    pods.iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Waits until each of the MPIJob's 2 workers runs a process `comm` (its rank); returns the
/// pods' names, by index.
fn wait_for_ranks(sb: &Sandbox, name: &str, comm: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let pods = pod_names(sb, name);
        let runs = |pod: &String| {
            sb.cluster
                .pod_host_pids(pod)
                .unwrap_or_default()
                .into_iter()
                .any(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim_end() == comm)
                })
        };
        if pods.len() == 3 && pods[1..].iter().all(runs) {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "no {comm} in each worker of {name}:\n{}",
            sb.describe(name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A worker evicted while the ranks run (the default `--launcher-pod`, a JobSet): the MPIJob
/// fails at once, well before its ranks would end, its `Failed` condition naming the evicted
/// pod, with the `MPIJobEvicted` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_worker_fails_the_mpijob_at_once_naming_the_pod() {
    let sb = Sandbox::start("ctl-js-evict").await;
    sb.apply(&pi("evict", |v| launcher_args(v, &["/bin/sleep", "600"])));
    let pods = wait_for_ranks(&sb, "evict", "sleep");
    assert_eq!(sb.child("evict").map(|c| c.0), Some("jobset"));
    let victim = &pods[2];
    let evicted = Instant::now();
    sb.cluster.evict(victim).unwrap();
    let failed = sb.wait("evict", "Failed", 60);
    // At once: well within the 600 s the ranks would run.
    assert!(evicted.elapsed() < Duration::from_secs(60));
    let m = message(&failed, "Failed");
    assert!(
        m.contains(victim.as_str()),
        "the Failed condition names the evicted pod {victim}: {m}\n{}",
        sb.describe("evict")
    );
    assert!(
        Sandbox::condition(&failed, "Succeeded").is_none(),
        "{failed}"
    );
    sb.assert_events("evict", &["MPIJobEvicted"]);
    sb.shutdown();
}

/// A rank exiting 3 (rank 1, in the second worker's pod): the MPIJob fails, its `Failed`
/// condition naming the rank, its pod and the exit code, as the launcher's termination message
/// gives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rank_is_named_with_its_pod_and_exit_code() {
    let sb = Sandbox::start("ctl-js-rank").await;
    sb.apply(&pi("rank", |v| {
        launcher_args(
            v,
            &[
                "/bin/sh",
                "-c",
                "if [ \"$PMIX_RANK\" = 1 ]; then exit 3; fi; sleep 5",
            ],
        )
    }));
    let failed = sb.wait("rank", "Failed", 240);
    assert_eq!(sb.child("rank").map(|c| c.0), Some("jobset"));
    // The second worker's pod (gone by now: the failed JobSet stopped the workers' Job) is
    // the replicated job `worker`'s pod 1: `rank-worker-0-1-<suffix>`.
    let m = message(&failed, "Failed");
    let named = m
        .split_once("rank 1 in pod rank-worker-0-1-")
        .and_then(|(_, rest)| rest.split_once(' '))
        .is_some_and(|(suffix, rest)| {
            !suffix.is_empty()
                && suffix.chars().all(|c| c.is_ascii_alphanumeric())
                && rest.starts_with("exited with code 3")
        });
    assert!(
        named,
        "the Failed condition names rank 1, the second worker's pod and code 3: {m}\n{}",
        sb.describe("rank")
    );
    sb.shutdown();
}

/// The True conditions of each state of the MPIJob `name` the store holds from now until
/// `end` is True (each state once, in order), followed through the store's every change.
async fn follow(sb: &Sandbox, name: &str, end: &str, secs: u64) -> Vec<BTreeSet<String>> {
    let mut feed = sb.cluster.store().subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut seen: Vec<BTreeSet<String>> = Vec::new();
    loop {
        let ev = match tokio::time::timeout_at(deadline, feed.recv()).await {
            Ok(Ok(ev)) => ev,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(n))) => {
                panic!("the store's feed dropped {n} changes")
            }
            _ => panic!(
                "MPIJob {name}: not {end} within {secs} s (seen {seen:?}):\n{}",
                sb.describe(name)
            ),
        };
        if ev.resource.plural != "mpijobs" || ev.name != name {
            continue;
        }
        let now: BTreeSet<String> = ev.object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] == "True")
            .filter_map(|c| c["type"].as_str().map(String::from))
            .collect();
        if seen.last() != Some(&now) {
            seen.push(now.clone());
        }
        if now.contains(end) {
            return seen;
        }
    }
}

/// An MPIJob created with `runPolicy.suspend: true` (Kueue's way of holding it until
/// admitted), through the default `--launcher-pod` (a JobSet): `Suspended` True
/// (`MPIJobSuspended`), its JobSet and both child Jobs suspended, and no pod, until
/// `suspend: false` is patched; then `Suspended` False (`MPIJobResumed`), `Running`, and
/// `Succeeded` with pi's output, in that order, each with mpi-operator's event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_mpijob_runs_no_pod_until_resumed_then_succeeds() {
    let sb = Sandbox::start("ctl-js-suspend").await;
    sb.apply(&pi("held", |v| {
        v["spec"]["runPolicy"]["suspend"] = json!(true);
    }));
    let held = sb.wait("held", "Suspended", 60);
    assert_eq!(
        Sandbox::condition(&held, "Suspended"),
        Some(("True".into(), "MPIJobSuspended".into()))
    );
    let (kind, js) = sb.child("held").expect("the MPIJob's child");
    assert_eq!((kind, &js["spec"]["suspend"]), ("jobset", &json!(true)));
    // Both child Jobs made, suspended: from then on no pod may come.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = sb.kubectl_ok(
            &[
                "get",
                "job",
                "-l",
                "jobset.sigs.k8s.io/jobset-name=held",
                "-o",
                "json",
            ],
            None,
        );
        let jobs: Value = serde_json::from_str(&jobs).unwrap();
        let suspended = jobs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|j| j["spec"]["suspend"] == true)
            .count();
        if suspended == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the JobSet's Jobs not made suspended: {jobs}\n{}",
            sb.describe("held")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Held: no pod for a while (the time pods would take to appear, several times over).
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert!(sb.pods("held").is_empty(), "{}", sb.describe("held"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = tokio::join!(follow(&sb, "held", "Succeeded", 240), async {
        sb.patch("held", r#"{"spec":{"runPolicy":{"suspend":false}}}"#);
    })
    .0;
    let done = sb.mpijob("held").unwrap();
    assert_eq!(
        Sandbox::condition(&done, "Suspended"),
        Some(("False".into(), "MPIJobResumed".into()))
    );
    assert_eq!(
        Sandbox::condition(&done, "Running"),
        Some(("False".into(), "MPIJobRunning".into()))
    );
    // Suspended until resumed, then Running, then Succeeded (Running turned False).
    let at = |want: &[&str]| {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        seen.iter().position(|s| *s == want)
    };
    let running = at(&["Created", "Running"]);
    let succeeded = at(&["Created", "Succeeded"]);
    assert!(
        running.is_some() && running < succeeded,
        "not Running then Succeeded after the resume: {seen:?}"
    );
    assert!(
        seen[..running.unwrap_or(0)]
            .iter()
            .all(|s| !s.contains("Running")),
        "{seen:?}"
    );
    let (ranks, hosts) = sb.pi_ran("held", 2);
    for r in &ranks {
        assert!(
            hosts[1..].contains(r),
            "rank on {r}, not a worker {hosts:?}"
        );
    }
    sb.assert_events(
        "held",
        &[
            "MPIJobSuspended",
            "MPIJobResumed",
            "MPIJobRunning",
            "MPIJobSucceeded",
        ],
    );
    sb.shutdown();
}
