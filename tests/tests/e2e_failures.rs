//! PRRTE with the k8s components when things go wrong: each failure ends prte with a non-zero
//! exit and a message naming the pod and the cause, without hanging and without leaving any
//! prted behind.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::time::Duration;

fn prterun_args<'a>(extra: &[&'a str], prog: &'a str) -> Vec<&'a str> {
    let mut v = k8s_args(extra);
    v.extend(["-n", "2", prog]);
    v
}

/// An agent holding another secret refuses the launch; prte names the pod and the mismatch and
/// nothing is started there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_is_refused_and_named() {
    let dir = harness::TestDir::new("other-secret").unwrap();
    let other = dir.secret("other").unwrap();
    let mut spec = JobSpec::new("badkey", 3);
    spec.agent_secret = vec![None, None, Some(other)];
    let job = Job::start(spec).await.unwrap();
    let prog = harness::mpi_program("allreduce").unwrap();
    let out = job
        .run_in_pod(
            0,
            "prterun",
            &prterun_args(&[], prog.to_str().unwrap()),
            Duration::from_secs(90),
        )
        .unwrap();
    let t = text(&out);
    eprintln!("{t}");
    assert!(!out.status.success(), "prterun must fail: {t}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&job.pods[2]), "the message names the pod: {t}");
    assert!(
        err.to_lowercase().contains("secret"),
        "the message names the cause: {t}"
    );
    assert!(
        !err.contains(&format!("pod {}", job.pods[1])),
        "only the bad pod is blamed: {t}"
    );
    assert!(
        job.pids_in_pod(2, "prted").unwrap().is_empty(),
        "nothing started in the refusing pod"
    );
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
}

/// A prted that never calls back: our startup timeout names the pod; PRRTE alone would wait
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_that_never_reports_times_out_naming_the_pod() {
    let dir = harness::TestDir::new("mute-prted").unwrap();
    let mute = script(&dir, "mute-prted", "exec sleep 1000").unwrap();
    let mut spec = JobSpec::new("mute", 3);
    spec.prted = vec![None, Some(mute), None];
    let job = Job::start(spec).await.unwrap();
    let prog = harness::mpi_program("allreduce").unwrap();
    let started = std::time::Instant::now();
    let out = job
        .run_in_pod(
            0,
            "prterun",
            &prterun_args(
                &["--prtemca", "plm_k8s_launch_timeout", "4"],
                prog.to_str().unwrap(),
            ),
            Duration::from_secs(90),
        )
        .unwrap();
    let t = text(&out);
    eprintln!("{t}");
    assert!(!out.status.success(), "prterun must fail: {t}");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "failed before the timeout: {t}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&job.pods[1]) && err.contains("did not report back within 4 s"),
        "{t}"
    );
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
    // the agent killed its stuck "prted" when prte went away
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !job.pids_in_pod(1, "sleep").unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the mute prted is still running in pod 1"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The agent dies while its prted starts: prte fails naming the pod, no hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_killed_mid_launch_fails_naming_the_pod() {
    let dir = harness::TestDir::new("slow-prted").unwrap();
    let marker = dir.path().join("started");
    let slow = script(
        &dir,
        "slow-prted",
        &format!("touch {}; exec sleep 1000", marker.display()),
    )
    .unwrap();
    let mut spec = JobSpec::new("agentdie", 3);
    spec.prted = vec![None, None, Some(slow)];
    let job = Job::start(spec).await.unwrap();
    let prog = harness::mpi_program("allreduce").unwrap();
    let cmd = job
        .in_pod(
            0,
            "prterun",
            &prterun_args(
                &["--prtemca", "plm_k8s_launch_timeout", "60"],
                prog.to_str().unwrap(),
            ),
        )
        .unwrap();
    let mut run = harness::Guarded::spawn(cmd, "prterun", job.dir.path()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the launch never reached pod 2"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let agents = job.pids_in_pod(2, "prrte-k8s-agent").unwrap();
    assert!(!agents.is_empty(), "no agent in pod 2");
    for pid in agents {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let st = run
        .wait_timeout(Duration::from_secs(30))
        .unwrap()
        .expect("prterun hung after the agent died");
    assert!(!st.success());
    let err = std::fs::read_to_string(job.dir.path().join("prterun.err")).unwrap();
    eprintln!("{err}");
    assert!(
        err.contains(&job.pods[2]),
        "the message names the pod: {err}"
    );
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
}

/// The launcher's service account may not list pods: the allocation fails, naming the missing
/// permission and the Role rule that grants it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_rbac_names_the_permission() {
    let job = Job::start(JobSpec::new("norbac", 2)).await.unwrap();
    // Take the launcher's rights away: delete its RoleBinding.
    let kubectl =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let out = harness::run_with_timeout(
        {
            let mut c = std::process::Command::new(&kubectl);
            c.arg("--kubeconfig").arg(job.cluster.kubeconfig()).args([
                "delete",
                "rolebinding",
                ROLEBINDING,
            ]);
            c
        },
        Duration::from_secs(30),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "kubectl delete rolebinding: {}",
        text(&out)
    );
    let out = job
        .prterun(&["-n", "1", "true"], Duration::from_secs(90))
        .unwrap();
    let t = text(&out);
    eprintln!("{t}");
    assert!(!out.status.success(), "prterun must fail: {t}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("forbidden") || err.contains("Forbidden") || err.contains("403"),
        "{t}"
    );
    assert!(
        err.contains("pods") && err.contains("list") || err.contains("get"),
        "names the permission: {t}"
    );
    assert!(
        err.contains("resources: [\"pods\"]"),
        "shows the Role rule: {t}"
    );
}

/// A prted that dies while the DVM runs: prte reports which pod and how it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prted_death_while_running_is_reported_with_pod_and_signal() {
    let job = Job::start(JobSpec::new("prteddie", 3)).await.unwrap();
    let mut prte = job.start_prte(&[], Duration::from_secs(60)).unwrap();
    let victims = job.pids_in_pod(1, "prted").unwrap();
    assert!(!victims.is_empty(), "no prted in pod 1");
    for pid in &victims {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let st = prte
        .wait_timeout(Duration::from_secs(30))
        .unwrap()
        .expect("prte kept running after losing a daemon");
    // prte writes PRRTE's error output to stdout or stderr depending on its mode: read both
    let err = ["prte.err", "prte.out"]
        .iter()
        .map(|f| std::fs::read_to_string(job.dir.path().join(f)).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("{st:?}\n{err}");
    assert!(!st.success(), "prte must fail after losing a daemon");
    assert!(err.contains(&job.pods[1]), "names the pod: {err}");
    assert!(
        err.contains("signal 9") || err.contains("SIGKILL"),
        "says how it ended: {err}"
    );
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
}
