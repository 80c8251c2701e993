//! JobSet (jobset.x-k8s.io/v1alpha2) in the sandbox, driven with kubectl: a JobSet's
//! child Jobs `<jobset>-<replicatedJob>-<index>` with JobSet's labels, Completed by its success
//! policy; a child Job's failure restarting the whole JobSet (`failurePolicy.maxRestarts`: the
//! earlier attempt's pods get SIGTERM and are gone before the next attempt's start, every
//! new Job with `restart-attempt` + 1, `status.restarts` counted and shown by `kubectl get
//! jobset`), and Failed once the restarts are used up. Needs root.
#![forbid(unsafe_code)]

use sandbox::api::resources::{JOBS, JOBSETS, PODS};
use sandbox::api::{EventType, Obj};
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::kubectl::{cell, get_row as row, run_ok as kubectl_ok};
use sandbox::harness::unique;
use sandbox::runtime::podnet;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);
const ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";

/// `kubectl apply -f` of `yaml`.
fn apply(c: &Cluster, dir: &Path, yaml: &str) {
    let f = dir.join(format!("{}.yaml", unique("apply")));
    std::fs::write(&f, yaml).unwrap();
    kubectl_ok(c, &["apply", "-f", f.to_str().unwrap()]);
}

/// Waits until JobSet `name` has condition `ty`; the JobSet.
async fn jobset_condition(c: &Cluster, name: &str, ty: &str) -> Obj {
    let deadline = Instant::now() + WAIT;
    loop {
        let js = c.store().get(&JOBSETS, "default", name).unwrap();
        let done = js["status"]["conditions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["type"] == ty && x["status"] == "True"));
        if done {
            return js;
        }
        assert!(Instant::now() < deadline, "JobSet {name} never {ty}: {js}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn condition<'a>(js: &'a Value, ty: &str) -> &'a Value {
    js["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["type"] == ty))
        .unwrap_or_else(|| panic!("no condition {ty}: {js}"))
}

fn jobs_of(c: &Cluster, js: &str) -> Vec<Obj> {
    let q = sandbox::api::ListQuery {
        labels: sandbox::api::selector::LabelSelector::parse(&format!(
            "jobset.sigs.k8s.io/jobset-name={js}"
        ))
        .unwrap(),
        ..Default::default()
    };
    c.store().list(&JOBS, Some("default"), &q).unwrap().items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_makes_its_child_jobs_and_completes() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let dir = tempfile::tempdir().unwrap();
    let js = unique("js");
    let job = |rj: &str, n: usize| {
        format!(
            r#"
  - name: {rj}
    replicas: {n}
    template:
      spec:
        completionMode: Indexed
        completions: 1
        parallelism: 1
        template:
          metadata: {{labels: {{app: {js}}}}}
          spec:
            restartPolicy: Never
            containers: [{{name: c, command: [sh, -c, "exit 0"]}}]"#
        )
    };
    apply(
        &cluster,
        dir.path(),
        &format!(
            "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {{name: {js}}}\nspec:\n  replicatedJobs:{}{}\n",
            job("workers", 2),
            job("driver", 1)
        ),
    );
    let done = jobset_condition(&cluster, &js, "Completed").await;
    assert_eq!(done["status"]["terminalState"], "Completed");
    assert_eq!(condition(&done, "Completed")["reason"], "AllJobsCompleted");
    assert_eq!(done["status"]["restarts"], 0);
    let mut names: Vec<String> = jobs_of(&cluster, &js)
        .iter()
        .map(|j| j["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            format!("{js}-driver-0"),
            format!("{js}-workers-0"),
            format!("{js}-workers-1")
        ]
    );
    let w1 = cluster
        .store()
        .get(&JOBS, "default", &format!("{js}-workers-1"))
        .unwrap();
    let labels = &w1["metadata"]["labels"];
    assert_eq!(labels["jobset.sigs.k8s.io/replicatedjob-name"], "workers");
    assert_eq!(labels["jobset.sigs.k8s.io/replicatedjob-replicas"], "2");
    assert_eq!(labels["jobset.sigs.k8s.io/job-index"], "1");
    assert_eq!(labels["jobset.sigs.k8s.io/job-global-index"], "1");
    assert_eq!(labels["jobset.sigs.k8s.io/global-replicas"], "3");
    assert_eq!(labels[ATTEMPT], "0");
    assert_eq!(w1["metadata"]["annotations"][ATTEMPT], "0");
    assert_eq!(w1["metadata"]["ownerReferences"][0]["kind"], "JobSet");
    // Their pods carry the JobSet's labels too.
    let pods = cluster
        .store()
        .list(&PODS, Some("default"), &Default::default())
        .unwrap();
    let p = pods
        .items
        .iter()
        .find(|p| {
            p["metadata"]["labels"]["batch.kubernetes.io/job-name"]
                == format!("{js}-driver-0").as_str()
        })
        .expect("the driver's pod");
    assert_eq!(
        p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"],
        js.as_str()
    );
    assert_eq!(p["spec"]["subdomain"], js.as_str());
    let r = row(&cluster, "jobset", &js);
    assert_eq!(cell(&r, "TERMINALSTATE"), "Completed", "{r:?}");
    assert_eq!(cell(&r, "RESTARTS"), "0", "{r:?}");
    assert_eq!(cell(&r, "COMPLETED"), "True", "{r:?}");
    // Deleting the JobSet takes its Jobs and pods with it.
    kubectl_ok(&cluster, &["delete", "jobset", &js]);
    let deadline = Instant::now() + WAIT;
    while !jobs_of(&cluster, &js).is_empty() {
        assert!(Instant::now() < deadline, "the JobSet's Jobs stayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(cluster);
    assert!(podnet::leftovers(&prefix).is_empty());
}

/// A JobSet of one replicated Job "node" (an Indexed Job of 2 pods, backoffLimit 0) whose
/// index 0 fails once both pods have started on the attempts below `fail_below`; index 1 writes
/// `term-<attempt>` under `dir` on SIGTERM and exits, else both exit 0 after `go` exists.
fn restarting_jobset(name: &str, dir: &Path, policy: &str, fail_below: u32) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: {name}}}
spec:
{policy}
  replicatedJobs:
  - name: node
    template:
      spec:
        completionMode: Indexed
        completions: 2
        parallelism: 2
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            terminationGracePeriodSeconds: 120
            containers:
            - name: c
              env:
              - name: ATTEMPT
                valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['{ATTEMPT}']"}}}}
              command:
              - sh
              - -c
              - |
                trap 'echo term > {d}/term-$ATTEMPT-$JOB_COMPLETION_INDEX; exit 0' TERM
                touch {d}/started-$ATTEMPT-$JOB_COMPLETION_INDEX
                if [ $ATTEMPT -lt {fail_below} ]; then
                  if [ $JOB_COMPLETION_INDEX = 0 ]; then
                    until [ -e {d}/started-$ATTEMPT-1 ]; do sleep 0.05; done
                    exit 1
                  fi
                  while :; do sleep 0.1; done
                fi
                exit 0
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_child_job_restarts_the_whole_jobset() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let dir = tempfile::tempdir().unwrap();
    let js = unique("jsr");
    let mut rx = cluster.store().subscribe();
    let policy = "  failurePolicy: {maxRestarts: 1}";
    apply(
        &cluster,
        dir.path(),
        &restarting_jobset(&js, dir.path(), policy, 1),
    );
    let done = jobset_condition(&cluster, &js, "Completed").await;
    assert_eq!(done["status"]["restarts"], 1, "{done}");
    let restarts = kubectl_ok(
        &cluster,
        &["get", "jobset", &js, "-o", "jsonpath={.status.restarts}"],
    );
    assert_eq!(restarts, "1");
    let r = row(&cluster, "jobset", &js);
    assert_eq!(cell(&r, "RESTARTS"), "1", "{r:?}");
    assert_eq!(cell(&r, "TERMINALSTATE"), "Completed", "{r:?}");
    // The first attempt's index 1 was told to stop; the second attempt ran both.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("term-0-1")).unwrap(),
        "term\n"
    );
    for i in 0..2 {
        assert!(dir.path().join(format!("started-1-{i}")).exists());
    }
    let jobs = jobs_of(&cluster, &js);
    assert_eq!(jobs.len(), 1, "the first attempt's Job is gone");
    assert_eq!(jobs[0]["metadata"]["name"], format!("{js}-node-0").as_str());
    assert_eq!(jobs[0]["metadata"]["labels"][ATTEMPT], "1");
    // Every pod of the first attempt was gone before one of the second was made.
    let (mut last_old_gone, mut first_new) = (None, None);
    while let Ok(ev) = rx.try_recv() {
        if !std::ptr::eq(ev.resource, &PODS) {
            continue;
        }
        let attempt = ev.object["metadata"]["labels"][ATTEMPT]
            .as_str()
            .unwrap_or("")
            .to_string();
        match (ev.kind, attempt.as_str()) {
            (EventType::Deleted, "0") => last_old_gone = Some(ev.rv),
            (EventType::Added, "1") if first_new.is_none() => first_new = Some(ev.rv),
            _ => {}
        }
    }
    let (gone, new) = (
        last_old_gone.expect("old pods removed"),
        first_new.expect("new pods"),
    );
    assert!(
        gone < new,
        "a new pod (rv {new}) before the old ones were gone (rv {gone})"
    );
    drop(cluster);
    assert!(podnet::leftovers(&prefix).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_fails_once_its_restarts_are_used_up() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let dir = tempfile::tempdir().unwrap();
    let (limited, unlimited) = (unique("jsmax"), unique("jsnone"));
    let (d1, d2) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&d1).unwrap();
    std::fs::create_dir_all(&d2).unwrap();
    let policy = "  failurePolicy: {maxRestarts: 1}";
    apply(
        &cluster,
        dir.path(),
        &restarting_jobset(&limited, &d1, policy, 99),
    );
    apply(
        &cluster,
        dir.path(),
        &restarting_jobset(&unlimited, &d2, "", 99),
    );
    let failed = jobset_condition(&cluster, &limited, "Failed").await;
    assert_eq!(failed["status"]["restarts"], 1, "{failed}");
    assert_eq!(failed["status"]["terminalState"], "Failed");
    let c = condition(&failed, "Failed");
    assert_eq!(c["reason"], "ReachedMaxRestarts");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains(&format!("first failed job: {limited}-node-0")),
        "{m}"
    );
    let failed = jobset_condition(&cluster, &unlimited, "Failed").await;
    assert_eq!(failed["status"]["restarts"], 0, "{failed}");
    assert_eq!(condition(&failed, "Failed")["reason"], "FailedJobs");
    // Both attempts' index 1 got SIGTERM (the last one's when its Job failed); no third
    // attempt.
    for a in 0..2 {
        sandbox::harness::wait_file(&d1.join(format!("term-{a}-1")), WAIT);
    }
    assert!(!d1.join("started-2-0").exists());
    sandbox::harness::wait_file(&d2.join("term-0-1"), WAIT);
    let r = row(&cluster, "jobset", &limited);
    assert_eq!(cell(&r, "TERMINALSTATE"), "Failed", "{r:?}");
    drop(cluster);
    assert!(podnet::leftovers(&prefix).is_empty());
}
