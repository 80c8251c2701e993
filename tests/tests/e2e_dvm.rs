//! PRRTE with the k8s components in the sandbox cluster: allocation from pods, daemons through
//! the agents (no sshd anywhere), real MPI programs across pods.
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allreduce_across_eight_pods_through_agents() {
    let mut spec = JobSpec::new("ar8", 8);
    spec.cpus = vec!["2"; 8];
    let job = Job::start(spec).await.unwrap();
    let prog = harness::mpi_program("allreduce").unwrap();
    let out = job
        .run_in_pod(0, "prterun", &["--allow-run-as-root", "--prtemca", "ras", "k8s", "--prtemca", "plm", "k8s", "-n", "16", prog.to_str().unwrap()], Duration::from_secs(120))
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "prterun failed: {t}");
    let lines = allreduce_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(lines.len(), 16, "{t}");
    assert!(lines.iter().all(|l| l.1 == 16 && l.3), "a rank got the wrong sum: {t}");
    let ranks: BTreeSet<usize> = lines.iter().map(|l| l.0).collect();
    assert_eq!(ranks, (0..16).collect());
    let hosts: BTreeSet<String> = lines.iter().map(|l| l.2.clone()).collect();
    let expected: BTreeSet<String> = job.hostnames.iter().cloned().collect();
    assert_eq!(hosts, expected, "ranks must run on all 8 pods: {t}");
    // By-slot mapping in pod index order: ranks 2i and 2i+1 on pod i.
    for (rank, _, host, _) in &lines {
        assert_eq!(host, &job.hostnames[rank / 2], "rank {rank} placement: {t}");
    }
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
}
