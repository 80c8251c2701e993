//! Graceful termination, as a kubelet does it, driven with kubectl: a deleted pod
//! shows `deletionTimestamp` and `deletionGracePeriodSeconds` while its containers get SIGTERM
//! and the grace period (`--grace-period`, else `terminationGracePeriodSeconds`), then SIGKILL;
//! it disappears once they have ended. The same through the `pods/eviction` subresource, for
//! the pods of a Job deleted with propagation Foreground or Background, and for the remaining
//! pods of a failed Job. Needs root.
#![forbid(unsafe_code)]

use sandbox::api::resources::{JOBS, PODS};
use sandbox::api::{EventType, Obj, StoreEvent};
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::kubectl::{run as kubectl, run_ok as kubectl_ok};
use sandbox::harness::unique;
use sandbox::runtime::podnet;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::Receiver;

const WAIT: Duration = Duration::from_secs(60);

/// What a pod went through until it was removed, from the store's feed.
struct Ending {
    /// The pod as it was last written before its removal.
    last: Obj,
    /// Whether it was seen terminating (`deletionTimestamp` set) before it went.
    saw_terminating: Option<Obj>,
    /// When it was removed.
    gone_at: Instant,
}

/// Follows `rx` until pod `name` is removed.
async fn ending(rx: &mut Receiver<Arc<StoreEvent>>, name: &str) -> Ending {
    let mut last = None;
    let mut saw_terminating = None;
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let ev = tokio::time::timeout_at(until, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("pod {name} was not removed within {WAIT:?}"))
            .expect("the store's feed");
        if !std::ptr::eq(ev.resource, &PODS) || ev.name != name {
            continue;
        }
        if ev.kind == EventType::Deleted {
            return Ending {
                last: last.unwrap_or_else(|| ev.object.clone()),
                saw_terminating,
                gone_at: Instant::now(),
            };
        }
        if !ev.object["metadata"]["deletionTimestamp"].is_null() && saw_terminating.is_none() {
            saw_terminating = Some(ev.object.clone());
        }
        last = Some(ev.object.clone());
    }
}

/// Waits until none of `pids` exists any more.
fn wait_gone(pids: &[u32], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| Path::new(&format!("/proc/{p}")).exists())
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: processes {alive:?} still alive after 20s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn container_exit(p: &Value) -> Option<i64> {
    p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"].as_i64()
}

fn pod_names(c: &Cluster, selector: &str) -> Vec<String> {
    let q = sandbox::api::ListQuery {
        labels: sandbox::api::selector::LabelSelector::parse(selector).unwrap(),
        ..Default::default()
    };
    c.store()
        .list(&PODS, Some("default"), &q)
        .unwrap()
        .items
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// A container that writes `started` once its SIGTERM handler is set, and on SIGTERM writes
/// `term` and exits 0 (`exits`) or carries on.
fn handler_script(dir: &Path, file: &str, exits: bool) -> String {
    let then = if exits { "; exit 0" } else { "" };
    let out = dir.join(file);
    format!(
        "trap 'echo term >> {o}{then}' TERM; echo started > {o}.started; while :; do sleep 0.1; done",
        o = out.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_pods_get_sigterm_and_their_grace_period_then_sigkill() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let dir = tempfile::tempdir().unwrap();
    let t = unique("grace");
    let (stops, ignores) = (format!("{t}-stops"), format!("{t}-ignores"));
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {stops}}}
spec:
  restartPolicy: Never
  containers: [{{name: c, command: [sh, -c, "{}"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {ignores}}}
spec:
  terminationGracePeriodSeconds: 300
  containers: [{{name: c, command: [sh, -c, "{}"]}}]
"#,
            handler_script(dir.path(), "stops", true),
            handler_script(dir.path(), "ignores", false),
        ))
        .unwrap();
    sandbox::harness::wait_file(&dir.path().join("stops.started"), WAIT);
    sandbox::harness::wait_file(&dir.path().join("ignores.started"), WAIT);
    let pids = [
        cluster.pod_host_pids(&stops).unwrap(),
        cluster.pod_host_pids(&ignores).unwrap(),
    ]
    .concat();
    let mut rx = cluster.store().subscribe();
    let mut rx2 = cluster.store().subscribe();
    let t0 = Instant::now();
    // Its own grace period (the default, 30 s) is far longer than it takes.
    kubectl_ok(&cluster, &["delete", "pod", &stops, "--wait=false"]);
    kubectl_ok(
        &cluster,
        &[
            "delete",
            "pod",
            &ignores,
            "--grace-period=5",
            "--wait=false",
        ],
    );
    // While it terminates the pod shows it, in the API and in kubectl's table.
    let shown = kubectl_ok(
        &cluster,
        &[
            "get",
            "pod",
            &ignores,
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds} {.metadata.deletionTimestamp}",
        ],
    );
    let (grace, ts) = shown.split_once(' ').unwrap();
    assert_eq!(grace, "5", "{shown}");
    assert!(ts.ends_with('Z'), "{shown}");
    let row = kubectl_ok(&cluster, &["get", "pod", &ignores, "--no-headers"]);
    assert_eq!(row.split_whitespace().nth(2), Some("Terminating"), "{row}");

    let a = ending(&mut rx, &stops).await;
    let waited = a.gone_at - t0;
    assert!(
        waited < Duration::from_secs(25),
        "a container that exits on SIGTERM is not made to wait for its grace period: {waited:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("stops")).unwrap(),
        "term\n"
    );
    assert_eq!(container_exit(&a.last), Some(0), "{}", a.last);
    assert_eq!(a.last["status"]["phase"], "Succeeded", "{}", a.last);
    let seen = a.saw_terminating.expect("seen terminating");
    assert_eq!(seen["metadata"]["deletionGracePeriodSeconds"], 30);

    let b = ending(&mut rx2, &ignores).await;
    let waited = b.gone_at - t0;
    assert!(
        waited >= Duration::from_secs(5),
        "killed before its grace period was over: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(35),
        "not killed when its grace period was over: {waited:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ignores")).unwrap(),
        "term\n",
        "it got SIGTERM first"
    );
    assert_eq!(container_exit(&b.last), Some(137), "{}", b.last);
    assert_eq!(b.last["status"]["phase"], "Failed", "{}", b.last);
    wait_gone(&pids, "deleted pods");
    let (ok, _, err) = kubectl(&cluster, &["get", "pod", &ignores]);
    assert!(!ok && err.contains("NotFound"), "{err}");
    drop(cluster);
    assert!(podnet::leftovers(&prefix).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_marks_the_pod_and_gives_it_its_grace_period() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let dir = tempfile::tempdir().unwrap();
    let pod = unique("evictee");
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {pod}}}
spec:
  terminationGracePeriodSeconds: 120
  containers: [{{name: c, command: [sh, -c, "{}"]}}]
"#,
            handler_script(dir.path(), "evicted", true),
        ))
        .unwrap();
    sandbox::harness::wait_file(&dir.path().join("evicted.started"), WAIT);
    let pids = cluster.pod_host_pids(&pod).unwrap();
    let body = dir.path().join("eviction.json");
    std::fs::write(
        &body,
        format!(
            r#"{{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {{"name": "{pod}"}}, "deleteOptions": {{"gracePeriodSeconds": 60}}}}"#
        ),
    )
    .unwrap();
    let mut rx = cluster.store().subscribe();
    let path = format!("/api/v1/namespaces/default/pods/{pod}/eviction");
    let body_arg = body.to_str().unwrap();
    let out = kubectl_ok(&cluster, &["create", "--raw", &path, "-f", body_arg]);
    assert!(out.contains("Success"), "{out}");
    let e = ending(&mut rx, &pod).await;
    let seen = e.saw_terminating.expect("seen terminating");
    assert_eq!(seen["metadata"]["deletionGracePeriodSeconds"], 60);
    let cond = e.last["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == "DisruptionTarget"))
        .cloned()
        .unwrap_or_else(|| panic!("no DisruptionTarget: {}", e.last));
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("True"), Some("EvictionByEvictionAPI"))
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("evicted")).unwrap(),
        "term\n"
    );
    assert_eq!(container_exit(&e.last), Some(0), "{}", e.last);
    wait_gone(&pids, "evicted pod");
    // An eviction of a pod that does not exist is refused.
    let (ok, _, err) = kubectl(&cluster, &["create", "--raw", &path, "-f", body_arg]);
    assert!(!ok && err.contains("not found"), "{err}");
    drop(cluster);
    assert!(podnet::leftovers(&prefix).is_empty());
}

/// An Indexed Job of `n` pods, each writing `<index>` on SIGTERM under `dir` and exiting 0;
/// with `fail_index`, that index exits 1 once the others have started.
fn job_yaml(name: &str, dir: &Path, n: usize, fail_index: Option<usize>) -> String {
    let d = dir.display();
    let fail = match fail_index {
        Some(i) => format!(
            "if [ $JOB_COMPLETION_INDEX = {i} ]; then until [ $(ls {d}/*.started | wc -l) -ge {n} ]; do sleep 0.05; done; exit 1; fi; "
        ),
        None => String::new(),
    };
    format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  completionMode: Indexed
  completions: {n}
  parallelism: {n}
  backoffLimit: 0
  template:
    metadata: {{labels: {{job: {name}}}}}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 120
      containers:
      - name: c
        command: [sh, -c, "trap 'echo term > {d}/$JOB_COMPLETION_INDEX; exit 0' TERM; echo started > {d}/$JOB_COMPLETION_INDEX.started; {fail}while :; do sleep 0.1; done"]
"#
    )
}

/// Waits until Job `name` has failed; the reason.
async fn job_failed(c: &Cluster, name: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let j = c.store().get(&JOBS, "default", name).unwrap();
        let failed = j["status"]["conditions"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|x| x["type"] == "Failed" && x["status"] == "True")
            })
            .cloned();
        if let Some(f) = failed {
            return f["reason"].as_str().unwrap_or("").to_string();
        }
        assert!(Instant::now() < deadline, "Job {name} never failed: {j}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn wait_started(dir: &Path, n: usize) {
    for i in 0..n {
        sandbox::harness::wait_file(&dir.join(format!("{i}.started")), WAIT);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_jobs_pods_get_sigterm_in_the_foreground_and_the_background() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    for cascade in ["foreground", "background"] {
        let dir = tempfile::tempdir().unwrap();
        let job = unique(&format!("del-{cascade}"));
        cluster
            .apply_yaml(&job_yaml(&job, dir.path(), 2, None))
            .unwrap();
        wait_started(dir.path(), 2);
        let pods = pod_names(&cluster, &format!("job={job}"));
        assert_eq!(pods.len(), 2, "{pods:?}");
        let pids: Vec<u32> = pods
            .iter()
            .flat_map(|p| cluster.pod_host_pids(p).unwrap())
            .collect();
        let mut feeds: Vec<_> = pods.iter().map(|_| cluster.store().subscribe()).collect();
        let cascade_arg = format!("--cascade={cascade}");
        kubectl_ok(
            &cluster,
            &["delete", "job", &job, &cascade_arg, "--wait=false"],
        );
        let j = cluster.store().get(&JOBS, "default", &job);
        if cascade == "foreground" {
            // The Job waits for its pods: terminating, with the finalizer.
            let j = j.expect("the Job stays while its pods terminate");
            assert!(!j["metadata"]["deletionTimestamp"].is_null(), "{j}");
            assert_eq!(j["metadata"]["finalizers"][0], "foregroundDeletion", "{j}");
        } else {
            assert!(j.is_err(), "the Job goes at once");
        }
        for (p, rx) in pods.iter().zip(&mut feeds) {
            let e = ending(rx, p).await;
            assert!(e.saw_terminating.is_some(), "{p} terminated gracefully");
            assert_eq!(container_exit(&e.last), Some(0), "{}", e.last);
        }
        for i in 0..2 {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(i.to_string())).unwrap(),
                "term\n",
                "index {i} ({cascade})"
            );
        }
        wait_gone(&pids, "a deleted Job's pods");
        // The Job goes with its last pod (Foreground) or has gone already.
        let deadline = Instant::now() + WAIT;
        while cluster.store().get(&JOBS, "default", &job).is_ok() {
            assert!(Instant::now() < deadline, "Job {job} stayed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(pod_names(&cluster, &format!("job={job}")).is_empty());
    }
    drop(cluster);
    assert!(podnet::leftovers(&prefix).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_jobs_remaining_pods_get_sigterm() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let dir = tempfile::tempdir().unwrap();
    let job = unique("fails");
    let mut rx = cluster.store().subscribe();
    cluster
        .apply_yaml(&job_yaml(&job, dir.path(), 3, Some(0)))
        .unwrap();
    assert_eq!(job_failed(&cluster, &job).await, "BackoffLimitExceeded");
    // Indexes 1 and 2 were told and stopped; index 0 had failed by itself.
    for i in [1, 2] {
        sandbox::harness::wait_file(&dir.path().join(i.to_string()), WAIT);
    }
    assert!(
        !dir.path().join("0").exists(),
        "the failed index was not signalled"
    );
    // Their pods go; the failed one stays, Failed.
    let mut gone = 0;
    while gone < 2 {
        let ev = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap();
        if std::ptr::eq(ev.resource, &PODS) && ev.kind == EventType::Deleted {
            assert_eq!(container_exit(&ev.object), Some(0), "{}", ev.object);
            gone += 1;
        }
    }
    let left = pod_names(&cluster, &format!("job={job}"));
    assert_eq!(left.len(), 1, "{left:?}");
    let p = cluster.store().get(&PODS, "default", &left[0]).unwrap();
    assert_eq!(p["status"]["phase"], "Failed");
    drop(cluster);
    assert!(podnet::leftovers(&prefix).is_empty());
}
