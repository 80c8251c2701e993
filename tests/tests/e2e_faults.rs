//! PRRTE with the k8s components around faults of the cluster: API server errors during
//! discovery (seen on PRRTE's own verbose output), a pod deleted during the allocation wait,
//! during the daemons' launch and during a run, and a pod cut off from the network during a run.
//! Each ends prterun non-zero, naming the pod, within the relevant timeout, and leaves no prted
//! and no rank behind.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::api::faults::{Fault, FaultRule};
use sandbox::api::resources::PODS;
use sandbox::api::store::DeleteOptions;
use sandbox::harness;
use std::time::{Duration, Instant};

/// Deletes pod `i` of the job through the API (grace period 0, as `kubectl delete --now`
/// would after its grace): the kubelet stops it at once.
fn delete_pod(job: &Job, i: usize) {
    job.cluster
        .store()
        .delete(
            &PODS,
            NS,
            &job.pods[i],
            &DeleteOptions {
                grace_period: Some(0),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("deleting pod {}: {e:?}", job.pods[i]));
}

/// prterun's output so far (stderr then stdout).
fn prterun_output(job: &Job) -> String {
    ["prterun.err", "prterun.out"]
        .iter()
        .map(|f| std::fs::read_to_string(job.dir.path().join(f)).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Processes of the job (prted, the ranks: `sleep`, prterun) left in pod `i`, "comm(pid)".
fn leftovers(job: &Job, i: usize) -> Vec<String> {
    job.cluster
        .pod_host_pids(&job.pods[i])
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).ok()?;
            let comm = comm.trim_end();
            ["prted", "prterun", "prte", "sleep"]
                .contains(&comm)
                .then(|| format!("{comm}({p})"))
        })
        .collect()
}

/// Waits until none of `pods` holds a process of the job, or fails naming what is left.
fn assert_nothing_left(job: &Job, pods: &[usize], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<(usize, Vec<String>)> = pods
            .iter()
            .map(|&i| (i, leftovers(job, i)))
            .filter(|(_, l)| !l.is_empty())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of the job left {within:?} after prterun ended: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `prterun -n <pods> --map-by node <rank>` in pod 0 (a rank that runs until killed,
/// `sleep`) and waits until a rank runs in every pod.
fn ranks_everywhere(job: &Job, extra: &[&str]) -> harness::Guarded {
    let dir = harness::TestDir::new("fault-rank").unwrap();
    let rank = script(&dir, "fault-rank", "exec sleep 1000").unwrap();
    let n = job.pods.len().to_string();
    let mut args = k8s_args(&["--map-by", "node"]);
    args.extend(extra);
    args.extend(["-n", &n, rank.to_str().unwrap()]);
    let cmd = job.in_pod(0, "prterun", &args).unwrap();
    let mut run = harness::Guarded::spawn(cmd, "prterun", job.dir.path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..job.pods.len()).any(|i| job.pids_in_pod(i, "sleep").unwrap().is_empty()) {
        assert!(
            Instant::now() < deadline,
            "ranks did not start in every pod"
        );
        if let Some(st) = run.wait_timeout(Duration::ZERO).unwrap() {
            panic!("prterun ended early ({st}): {}", prterun_output(job));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::mem::forget(dir);
    run
}

/// Waits (bounded) for prterun to end; it must fail and name pod `i`. Returns the output.
fn fails_naming(job: &Job, run: &mut harness::Guarded, i: usize, within: Duration) -> String {
    let t0 = Instant::now();
    let st = run.wait_timeout(within).unwrap();
    let out = prterun_output(job);
    let st =
        st.unwrap_or_else(|| panic!("prterun still running {within:?} after the fault:\n{out}"));
    eprintln!("prterun ended after {:?} with {st}:\n{out}", t0.elapsed());
    assert!(!st.success(), "prterun must fail: {out}");
    assert!(
        out.contains(&job.pods[i]),
        "the message names pod {}: {out}",
        job.pods[i]
    );
    out
}

fn prterun_args<'a>(extra: &[&'a str], prog: &'a str, n: &'a str) -> Vec<&'a str> {
    let mut v = k8s_args(extra);
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
}

/// Discovery waits for 4 pods (ras_k8s_expected_pods) of which 3 exist; one of them is deleted
/// during the wait. At ras_k8s_timeout prterun fails naming the deleted pod; no daemon was
/// launched anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_during_the_allocation_wait_is_named() {
    let job = Job::start(JobSpec::new("delwait", 3)).await.unwrap();
    let cmd = job
        .in_pod(
            0,
            "prterun",
            &prterun_args(
                &[
                    "--prtemca",
                    "ras_k8s_expected_pods",
                    "4",
                    "--prtemca",
                    "ras_k8s_timeout",
                    "6",
                    "--prtemca",
                    "ras_base_verbose",
                    "1",
                ],
                "hostname",
                "3",
            ),
        )
        .unwrap();
    let mut run = harness::Guarded::spawn(cmd, "prterun", job.dir.path()).unwrap();
    // Discovery is waiting (it says so once it watches); then pod 2 goes.
    wait_for_text(
        &job.dir.path().join("prterun.err"),
        "discovering the job's pods",
        Duration::from_secs(30),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    delete_pod(&job, 2);
    let out = fails_naming(&job, &mut run, 2, Duration::from_secs(20));
    assert!(
        out.contains(&format!("pod {} was deleted during the wait", job.pods[2])),
        "{out}"
    );
    assert!(out.contains("Timed out after 6s"), "{out}");
    assert_nothing_left(&job, &[0, 1], Duration::from_secs(10));
}

/// Pod 2 is deleted while its prted starts (a prted that takes 3 s to start): prterun fails
/// naming the pod long before plm_k8s_launch_timeout, and nothing is left in the other pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_during_the_daemons_launch_is_named() {
    let dir = harness::TestDir::new("slow-prted").unwrap();
    let real = harness::prefix().join("bin/prted");
    let slow = script(
        &dir,
        "slow-prted",
        &format!(
            "touch \"$TMPDIR/slow-prted-started\"; sleep 3; exec {} \"$@\"",
            real.display()
        ),
    )
    .unwrap();
    let mut spec = JobSpec::new("dellaunch", 3);
    spec.prted = vec![None, None, Some(slow)];
    let job = Job::start(spec).await.unwrap();
    let cmd = job
        .in_pod(
            0,
            "prterun",
            &prterun_args(
                &["--prtemca", "plm_k8s_launch_timeout", "40"],
                "hostname",
                "3",
            ),
        )
        .unwrap();
    let mut run = harness::Guarded::spawn(cmd, "prterun", job.dir.path()).unwrap();
    let marker = job.pod_tmp(2).join("slow-prted-started");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the slow prted never started: {}",
            prterun_output(&job)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    delete_pod(&job, 2);
    let out = fails_naming(&job, &mut run, 2, Duration::from_secs(30));
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "not just the launch timeout: {out}"
    );
    assert_nothing_left(&job, &[0, 1], Duration::from_secs(10));
}

/// Pod 2 is deleted while ranks run in every pod: prterun fails within 15 s naming it and no
/// prted or rank is left in the other pods 10 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_during_a_run_ends_the_job_naming_it() {
    let job = Job::start(JobSpec::new("delrun", 3)).await.unwrap();
    let mut run = ranks_everywhere(&job, &[]);
    delete_pod(&job, 2);
    fails_naming(&job, &mut run, 2, Duration::from_secs(15));
    assert_nothing_left(&job, &[0, 1], Duration::from_secs(10));
}

/// Pod 2 is cut off from the network while ranks run in every pod (nftables drops all its
/// traffic, so connections to it stall rather than fail). The launcher's heartbeats on the agent
/// connection go unanswered: within 10 s it reports pod 2's daemon lost and prterun fails
/// naming the pod, and pod 2's agent, hearing no heartbeat for 10 s, stops its prted and rank:
/// nothing of the job is left in any pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_cut_off_from_the_network_ends_the_job_naming_it() {
    let job = Job::start(JobSpec::new("cutoff", 3)).await.unwrap();
    let mut run = ranks_everywhere(&job, &[]);
    let cut = job.cluster.cut_off(&job.pods[2]).unwrap();
    let out = fails_naming(&job, &mut run, 2, Duration::from_secs(20));
    assert!(
        out.contains("agent connection lost") && out.contains("silent"),
        "{out}"
    );
    assert_nothing_left(&job, &[0, 1, 2], Duration::from_secs(20));
    cut.restore().unwrap();
}

/// Pod 2 is cut off from the network before prterun starts: whether discovery still sees it
/// Ready (its readiness probe has not failed yet) and the launcher cannot connect to its agent
/// (plm_k8s_connect_timeout), or discovery sees it unready and waits for it (ras_k8s_timeout),
/// prterun fails naming the pod within those timeouts and no prted is left anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_cut_off_before_the_launch_is_named() {
    let job = Job::start(JobSpec::new("cutlaunch", 3)).await.unwrap();
    let cut = job.cluster.cut_off(&job.pods[2]).unwrap();
    let t0 = Instant::now();
    let out = job
        .run_in_pod(
            0,
            "prterun",
            &prterun_args(
                &[
                    "--prtemca",
                    "plm_k8s_connect_timeout",
                    "5",
                    "--prtemca",
                    "ras_k8s_timeout",
                    "15",
                ],
                "hostname",
                "3",
            ),
            Duration::from_secs(60),
        )
        .unwrap();
    let t = text(&out);
    eprintln!("prterun ended after {:?}: {t}", t0.elapsed());
    assert!(!out.status.success(), "prterun must fail: {t}");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "within the timeouts: {:?}",
        t0.elapsed()
    );
    assert!(t.contains(&job.pods[2]), "names the pod: {t}");
    assert_nothing_left(&job, &[0, 1, 2], Duration::from_secs(10));
    cut.restore().unwrap();
}
