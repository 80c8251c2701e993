//! No process outlives its job, in any pod: with the real prted (which would fork a daemon away
//! from the agent without `--leave-session-attached`), after a pod is evicted while ranks run in
//! every pod, and after the launcher's connection ends.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::time::{Duration, Instant};

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

/// Processes of the job (prted, the ranks, prterun) left in pod `i`.
fn leftovers(job: &Job, i: usize, rank_comm: &str) -> Vec<String> {
    processes(job, i)
        .into_iter()
        .filter(|p| {
            ["prted(", "prterun(", "prte(", &format!("{rank_comm}(")]
                .iter()
                .any(|c| p.starts_with(c))
        })
        .collect()
}

/// The real prted in a pod runs as the agent's child (one prted per pod: it did not fork a
/// daemon away from the agent) and leads a session and process group of its own, not the
/// agent's session (`--set-sid`, as a prted started through ssh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_prted_is_the_agents_child_in_its_own_session() {
    let job = Job::start(JobSpec::new("session", 2)).await.unwrap();
    let mut prte = job.start_prte(&[], Duration::from_secs(60)).unwrap();
    let agent = job.pids_in_pod(1, "prrte-k8s-agent").unwrap();
    assert_eq!(agent.len(), 1, "{:?}", processes(&job, 1));
    let prteds = job.pids_in_pod(1, "prted").unwrap();
    assert_eq!(
        prteds.len(),
        1,
        "one prted, not a parent and its daemon: {:?}",
        processes(&job, 1)
    );
    // (parent, process group, session) as /proc/PID/stat gives them.
    let ids = |p: u32| -> [u32; 3] {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap();
        let f: Vec<u32> = s[s.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .skip(1)
            .take(3)
            .map(|x| x.parse().unwrap())
            .collect();
        [f[0], f[1], f[2]]
    };
    let (prted, agent) = (prteds[0], agent[0]);
    assert_eq!(
        ids(prted),
        [agent, prted, prted],
        "prted's parent, group, session"
    );
    assert_ne!(ids(agent)[2], prted, "the agent's session is not prted's");
    // The agent stops it when prte goes away (SIGKILL: no orderly shutdown of the DVM).
    prte.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = prte.wait_timeout(Duration::from_secs(10));
    job.wait_no_prteds(Duration::from_secs(15)).unwrap();
}

/// A pod is evicted while ranks run in every pod: prterun ends non-zero within 15 s naming the
/// pod, and within 10 s more no prted and no rank is left in any pod (prterun's own pod
/// included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_a_pod_ends_the_job_everywhere() {
    let job = Job::start(JobSpec::new("evict", 3)).await.unwrap();
    let dir = harness::TestDir::new("evict-rank").unwrap();
    // A rank that runs until killed, under a name of its own.
    let rank = script(&dir, "evict-rank", "exec sleep 1000").unwrap();
    let cmd = job
        .in_pod(
            0,
            "prterun",
            &k8s_args(&["--map-by", "node", "-n", "3", rank.to_str().unwrap()]),
        )
        .unwrap();
    let mut run = harness::Guarded::spawn(cmd, "prterun", job.dir.path()).unwrap();
    // Ranks run in every pod.
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..3).any(|i| job.pids_in_pod(i, "sleep").unwrap().is_empty()) {
        assert!(
            Instant::now() < deadline,
            "ranks did not start in every pod: {:?}",
            (0..3).map(|i| processes(&job, i)).collect::<Vec<_>>()
        );
        if let Some(st) = run.wait_timeout(Duration::ZERO).unwrap() {
            panic!(
                "prterun ended early ({st}): {}",
                std::fs::read_to_string(job.dir.path().join("prterun.err")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let t0 = Instant::now();
    job.cluster.evict(&job.pods[2]).unwrap();
    let st = run.wait_timeout(Duration::from_secs(15)).unwrap();
    let out = ["prterun.err", "prterun.out"]
        .iter()
        .map(|f| std::fs::read_to_string(job.dir.path().join(f)).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let st = st.unwrap_or_else(|| panic!("prterun still running 15 s after the eviction:\n{out}"));
    eprintln!("prterun ended after {:?} with {st}:\n{out}", t0.elapsed());
    assert!(!st.success(), "prterun must fail: {out}");
    assert!(
        out.contains(&job.pods[2]),
        "the message names the evicted pod: {out}"
    );
    let ended = Instant::now();
    let mut left: Vec<(usize, Vec<String>)>;
    loop {
        left = (0..2)
            .map(|i| (i, leftovers(&job, i, "sleep")))
            .filter(|(_, l)| !l.is_empty())
            .collect();
        if left.is_empty() || ended.elapsed() > Duration::from_secs(10) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        left.is_empty(),
        "processes of the job left 10 s after prterun ended: {left:?}"
    );
    // The agents are still there (they outlive jobs, not the other way round).
    for i in 0..2 {
        assert_eq!(
            job.pids_in_pod(i, "prrte-k8s-agent").unwrap().len(),
            1,
            "pod {i}: {:?}",
            processes(&job, i)
        );
    }
}
