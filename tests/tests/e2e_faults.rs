//! PRRTE with the k8s components around faults of the cluster: API server errors during
//! discovery, seen on PRRTE's own verbose output.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::api::faults::{Fault, FaultRule};
use sandbox::harness;
use std::time::Duration;

fn prterun_args<'a>(extra: &[&'a str], prog: &'a str, n: &'a str) -> Vec<&'a str> {
    let mut v = vec![
        "--allow-run-as-root",
        "--prtemca",
        "ras",
        "k8s",
        "--prtemca",
        "plm",
        "k8s",
    ];
    v.extend(extra);
    v.extend(["-n", n, prog]);
    v
}

/// The API server answers the first pod requests with 500: discovery retries (the job runs),
/// and its warnings, like the launcher's progress, are on PRRTE's verbose output when
/// `ras_base_verbose` / `plm_base_verbose` ask for them, and only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_launcher_messages_reach_prrtes_verbose_output() {
    let job = Job::start(JobSpec::new("verbose", 2)).await.unwrap();
    let api = job.cluster.api();
    let run = |extra: &[&str]| {
        let out = job
            .run_in_pod(
                0,
                "prterun",
                &prterun_args(extra, "hostname", "2"),
                Duration::from_secs(90),
            )
            .unwrap();
        let t = text(&out);
        eprintln!("{t}");
        assert!(out.status.success(), "the job runs despite the 500s: {t}");
        for h in &job.hostnames {
            assert!(t.contains(h.as_str()), "ran in {h}: {t}");
        }
        t
    };

    let faults = api.inject(
        FaultRule::new(Fault::Status(500))
            .method("GET")
            .path("/pods")
            .list()
            .times(2),
    );
    let t = run(&[
        "--prtemca",
        "ras_base_verbose",
        "1",
        "--prtemca",
        "plm_base_verbose",
        "2",
    ]);
    assert_eq!(faults.hits(), 2, "both 500s were met");
    let warnings: Vec<&str> = t
        .lines()
        .filter(|l| l.contains("ras:k8s: warning:") && l.contains("retrying"))
        .collect();
    assert_eq!(warnings.len(), 2, "one warning per retry: {t}");
    assert!(warnings[0].contains("HTTP 500"), "names the answer: {t}");
    for (i, pod) in job.pods.iter().enumerate() {
        assert!(
            t.contains(&format!("plm:k8s: prted started in pod {pod}")) || i == 0,
            "the launcher's progress for {pod}: {t}"
        );
    }

    // PRRTE's default verbosity: the same faults, not a word of them.
    let faults = api.inject(
        FaultRule::new(Fault::Status(500))
            .method("GET")
            .path("/pods")
            .list()
            .times(2),
    );
    let t = run(&[]);
    assert_eq!(faults.hits(), 2);
    assert!(
        !t.contains("ras:k8s:") && !t.contains("plm:k8s:"),
        "quiet by default: {t}"
    );
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
    let _ = harness::prefix();
}
