//! What a user sees of each rank in a batch job (`prrte-k8s manifest ... -- mpirun ...`, the
//! path an MPIJob takes too): `kubectl logs` of a worker pod shows the output of the ranks that
//! ran in it, each line prefixed `[rank N] `, while pod 0's log is the command's output as it
//! printed it; a failed job's launcher names the first failed rank, its pod and its exit code
//! or signal. The pods run the example application image with this build's agent mounted over
//! the image's (a hostPath volume), so that the test exercises the code it is built with.
#![forbid(unsafe_code)]
use anyhow::{bail, Result};
use sandbox::harness;
use sandbox::harness::batch_job::{text, BatchJob};
use sandbox::harness::TestDir;
use std::collections::BTreeSet;
use std::time::Duration;

/// Where the image has its agent (the containers run `prrte-k8s-agent` from PATH).
const IMAGE_AGENT: &str = "/usr/local/bin/prrte-k8s-agent";

/// The rendered manifest with this build's agent mounted over the image's.
fn with_built_agent(_dir: &TestDir, yaml: String) -> Result<String> {
    let agent = harness::workspace_bin("prrte-k8s-agent")?;
    let mut out = String::new();
    let (mut mounts, mut volumes) = (0, 0);
    for line in yaml.lines() {
        out.push_str(line);
        out.push('\n');
        let indent = &line[..line.len() - line.trim_start().len()];
        if line.trim() == "volumeMounts:" {
            out.push_str(&format!(
                "{indent}- {{mountPath: {IMAGE_AGENT}, name: built-agent, readOnly: true}}\n"
            ));
            mounts += 1;
        } else if line.trim() == "volumes:" {
            out.push_str(&format!(
                "{indent}- {{name: built-agent, hostPath: {{path: '{}', type: File}}}}\n",
                agent.display()
            ));
            volumes += 1;
        }
    }
    if (mounts, volumes) != (1, 1) {
        bail!("expected one container and one volume list in the manifest:\n{yaml}");
    }
    Ok(out)
}

/// A job of 3 pods (one slot each) running `mpirun -n 3 --map-by node /bin/sh -c SCRIPT`:
/// rank R runs in the pod with index R.
async fn start(name: &str, script: &str) -> BatchJob {
    BatchJob::start_edited(
        name,
        3,
        &["--cpu", "1"],
        &[
            "mpirun", "-n", "3", "--map-by", "node", "/bin/sh", "-c", script,
        ],
        with_built_agent,
    )
    .await
    .unwrap()
}

/// `kubectl logs POD` (the sandbox API's `pods/log`).
fn logs(job: &BatchJob, pod: &str) -> String {
    let out = job
        .kubectl(&["logs", pod], Duration::from_secs(30))
        .unwrap();
    assert!(out.status.success(), "kubectl logs {pod}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pods' names by index.
fn pod_names(job: &BatchJob) -> Vec<String> {
    let pods = job.pods();
    assert_eq!(pods.len(), 3, "{}", job.describe());
    pods.iter().map(|p| BatchJob::pod_name(p)).collect()
}

/// The lines of `log` that are a rank's prefixed output.
fn prefixed(log: &str) -> BTreeSet<String> {
    log.lines()
        .filter(|l| l.starts_with("[rank "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_worker_pods_log_has_its_ranks_output_prefixed_and_pod_0s_is_unchanged() {
    let job = start(
        "ranklog",
        "echo hello from rank $PMIX_RANK; echo warning from rank $PMIX_RANK >&2",
    )
    .await;
    job.wait_for_condition("complete", 180);
    let pods = pod_names(&job);
    for (i, pod) in pods.iter().enumerate().skip(1) {
        let log = logs(&job, pod);
        let want: BTreeSet<String> = [
            format!("[rank {i}] hello from rank {i}"),
            format!("[rank {i}] warning from rank {i}"),
        ]
        .into();
        assert_eq!(prefixed(&log), want, "pod {pod}'s log:\n{log}");
        assert_eq!(
            log.lines().filter(|l| l.contains("from rank")).count(),
            2,
            "pod {pod}'s log has its ranks' lines once, and no other rank's:\n{log}"
        );
    }
    let log0 = logs(&job, &pods[0]);
    assert!(prefixed(&log0).is_empty(), "pod 0's log:\n{log0}");
    for r in 0..3 {
        for what in ["hello", "warning"] {
            let line = format!("{what} from rank {r}");
            assert_eq!(
                log0.lines().filter(|l| *l == line).count(),
                1,
                "pod 0's log has {line:?} once, unprefixed:\n{log0}"
            );
        }
    }
    assert!(
        !log0.contains("JOB MAP"),
        "the launcher's job map is kept out of pod 0's log:\n{log0}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_printed_just_before_a_rank_exits_is_in_its_pods_log_whole_and_in_order() {
    // Every rank prints its lines as fast as it can and exits at once: the last of them reach
    // mpirun while the rank's prted already reports it ended.
    let job = start(
        "rankburst",
        "i=0; while [ $i -lt 300 ]; do echo \"out $PMIX_RANK $i\"; echo \"err $PMIX_RANK $i\" >&2; i=$((i+1)); done",
    )
    .await;
    job.wait_for_condition("complete", 180);
    let pods = pod_names(&job);
    for (r, pod) in pods.iter().enumerate().skip(1) {
        let log = logs(&job, pod);
        for what in ["out", "err"] {
            let got: Vec<&str> = log
                .lines()
                .filter_map(|l| l.strip_prefix(&format!("[rank {r}] {what} {r} ")))
                .collect();
            let want: Vec<String> = (0..300).map(|i| i.to_string()).collect();
            assert_eq!(
                got, want,
                "pod {pod}'s log has rank {r}'s {what} lines whole and in order:\n{log}"
            );
        }
        assert!(
            !log.lines()
                .any(|l| l.starts_with("[rank ") && !l.starts_with(&format!("[rank {r}] "))),
            "pod {pod}'s log has no other rank's lines:\n{log}"
        );
    }
    let log0 = logs(&job, &pods[0]);
    for r in 0..3 {
        assert_eq!(
            log0.lines()
                .filter(|l| l.starts_with(&format!("out {r} ")))
                .count(),
            300,
            "pod 0's log has every line of rank {r}, unprefixed:\n{log0}"
        );
    }
}

/// Pod 0's log and its container's termination message (which an MPIJob's `Failed` condition
/// quotes) name the first failed rank, its pod and how it ended.
fn assert_failure_named(job: &BatchJob, want: &str) {
    let pods = pod_names(job);
    let log0 = logs(job, &pods[0]);
    assert!(
        log0.contains(want),
        "pod 0's log names the failure {want:?}:\n{log0}"
    );
    let pod0 = &job.pods()[0];
    assert_eq!(
        pod0.pointer("/status/containerStatuses/0/state/terminated/message")
            .and_then(serde_json::Value::as_str),
        Some(want),
        "pod 0's termination message:\n{}",
        job.describe()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_exiting_7_is_named_with_its_pod_and_code() {
    let job = start(
        "rankexit",
        "if [ \"$PMIX_RANK\" = 2 ]; then exit 7; fi; sleep 3",
    )
    .await;
    job.wait_for_condition("failed", 180);
    let pods = pod_names(&job);
    assert_failure_named(
        &job,
        &format!("rank 2 in pod {} exited with code 7", pods[2]),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_killed_by_sigkill_is_named_with_its_pod_and_signal() {
    let job = start(
        "rankkill",
        "if [ \"$PMIX_RANK\" = 1 ]; then exec python3 -c 'import os; os.kill(os.getpid(), 9)'; fi; sleep 3",
    )
    .await;
    job.wait_for_condition("failed", 180);
    let pods = pod_names(&job);
    assert_failure_named(
        &job,
        &format!("rank 1 in pod {} was killed by signal 9 (Killed)", pods[1]),
    );
}
