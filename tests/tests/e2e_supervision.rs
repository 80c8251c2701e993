//! No process outlives its job, in any pod: with the real prted (which would daemonize out of
//! the agent's session without `--leave-session-attached`), after a pod is evicted while ranks
//! run in every pod, and after the launcher's connection ends.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::time::Duration;

/// Every process of pod `i` as "comm(pid)", for messages.
fn processes(job: &Job, i: usize) -> Vec<String> {
    job.cluster
        .pod_host_pids(&job.pods[i])
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            format!("{}({p})", comm.trim_end())
        })
        .collect()
}

/// The real prted in a pod runs as the agent's child in the agent's session: one prted per pod
/// (it did not fork a daemon into its own session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_prted_stays_in_the_agents_session() {
    let job = Job::start(JobSpec::new("session", 2)).await.unwrap();
    let prte = job
        .in_pod(
            0,
            "prte",
            &[
                "--allow-run-as-root",
                "--prtemca",
                "ras",
                "k8s",
                "--prtemca",
                "plm",
                "k8s",
            ],
        )
        .unwrap();
    let mut prte = harness::Guarded::spawn(prte, "prte", job.dir.path()).unwrap();
    wait_for_text(
        &job.dir.path().join("prte.out"),
        "DVM ready",
        Duration::from_secs(60),
    )
    .unwrap();
    let agent = job.pids_in_pod(1, "prrte-k8s-agent").unwrap();
    assert_eq!(agent.len(), 1, "{:?}", processes(&job, 1));
    let prteds = job.pids_in_pod(1, "prted").unwrap();
    assert_eq!(
        prteds.len(),
        1,
        "one prted, not a parent and its daemon: {:?}",
        processes(&job, 1)
    );
    let stat = |p: u32| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap();
    let session = |p: u32| -> String {
        let s = stat(p);
        s[s.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .nth(3)
            .unwrap()
            .to_string()
    };
    assert_eq!(
        session(prteds[0]),
        session(agent[0]),
        "prted left the agent's session"
    );
    // The agent stops it when prte goes away (SIGKILL: no orderly shutdown of the DVM).
    prte.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = prte.wait_timeout(Duration::from_secs(10));
    job.wait_no_prteds(Duration::from_secs(15)).unwrap();
}
