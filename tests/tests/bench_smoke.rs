//! The launch benchmark's ssh baseline works at all (not timed): with an sshd and an agent in
//! each of two pods, a DVM through the agents and then prte with `plm ssh` (tree spawn and not)
//! reach "DVM ready", pterm ends each, and no prted or ssh session is left.
#![forbid(unsafe_code)]
use sandbox::mpijob::{Job, JobSpec};
use sandbox::sshd::{self, Spawn, SshBaseline};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_baseline_reaches_dvm_ready_and_pterm_ends_it() {
    let setup_dir = sandbox::harness::TestDir::new("bench-smoke-keys").unwrap();
    let ssh = SshBaseline::prepare(setup_dir.path()).unwrap();
    let mut spec = JobSpec::new("bsmoke", 2);
    ssh.apply(&mut spec);
    let job = Job::start(spec).await.unwrap();
    for i in 0..2 {
        assert_eq!(
            sshd::pids_like(&job, i, "sshd").unwrap().len(),
            1,
            "pod {i} runs its sshd: {}",
            sshd::sshd_log(&job, i)
        );
    }
    // The agents' path first: an agent stopping its prted must leave the pod's sshd alone.
    let agent_args: Vec<String> = [
        "--allow-run-as-root",
        "--prtemca",
        "ras",
        "k8s",
        "--prtemca",
        "plm",
        "k8s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    job.dvm_cycle(
        "prte-agent",
        &agent_args,
        Duration::from_secs(20),
        None,
        |_| Ok(String::new()),
    )
    .unwrap();
    for spawn in [Spawn::Tree, Spawn::NoTree] {
        let tag = format!("prte-ssh-{spawn:?}");
        let cycle = job
            .dvm_cycle(
                &tag,
                &ssh.prte_args(spawn),
                Duration::from_secs(20),
                None,
                |job| {
                    let n = job.pids_in_pod(1, "prted")?.len();
                    anyhow::ensure!(n >= 1, "pod 1 runs no prted");
                    anyhow::ensure!(
                        job.pids_in_pod(0, "prted")?.is_empty(),
                        "prte's pod runs a prted"
                    );
                    Ok(String::new())
                },
            )
            .unwrap_or_else(|e| {
                panic!(
                    "{tag}: {e:#}\nsshd log of pod 1:\n{}",
                    sshd::sshd_log(&job, 1)
                )
            });
        assert!(cycle.ready < Duration::from_secs(20));
        sshd::wait_sessions_closed(&job, Duration::from_secs(10)).unwrap();
    }
    job.wait_no_prteds(Duration::from_secs(5)).unwrap();
}
