//! The preemption notice: a pod of a running job gets SIGTERM (what a kubelet sends when the pod
//! is evicted or deleted) with its agent's `--preempt-grace`; every rank of the job, in every
//! pod, hears of it within 1 s with the seconds left (a PMIx event `PMIX_JCTRL_PREEMPT_ALERT`
//! for a C program registered for it; the site's signal, `plm_k8s_preempt_signal`, for an
//! mpi4py program), writes its checkpoint before its pod ends, and nothing is left running; the
//! same when the pod is evicted through the API (the sandbox's kubelet then sends SIGTERM).
#![forbid(unsafe_code)]
mod common;

use anyhow::Result;
use common::*;
use sandbox::harness;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The agents' grace period in these tests, and what the ranks are told they have: the grace
/// less the fixture's `--kill-grace 2` and the agent's 1 s margin.
const GRACE: u64 = 20;
const HOLD: u64 = GRACE - 2 - 1;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// `tests/programs/preempt_pmix.c` compiled against the installed PMIx.
fn build_pmix_program(dir: &Path) -> Result<PathBuf> {
    harness::pmix_program(dir, "preempt_pmix", &["-O1"])
}

/// A job of `pods` pods whose agents have the grace period.
async fn job(name: &str, pods: usize) -> Job {
    let mut spec = JobSpec::new(name, pods);
    spec.agent_args = vec![vec!["--preempt-grace".into(), GRACE.to_string()]; pods];
    Job::start(spec).await.unwrap()
}

/// Waits until every rank wrote `DIR/ready.RANK` (its handler is in place).
fn wait_ready(dir: &Path, ranks: usize, run: &mut harness::Guarded, job: &Job) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while (0..ranks).any(|r| !dir.join(format!("ready.{r}")).exists()) {
        if let Some(st) = run.wait_timeout(Duration::ZERO).unwrap() {
            panic!("prterun ended early ({st}): {}", output(job));
        }
        assert!(
            Instant::now() < deadline,
            "the ranks did not start: {}",
            output(job)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn output(job: &Job) -> String {
    ["prterun.out", "prterun.err"]
        .iter()
        .map(|f| std::fs::read_to_string(job.dir.path().join(f)).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The pods' logs (the agents' and prteds' output), for failure messages.
fn pod_logs(job: &Job) -> String {
    job.pods
        .iter()
        .map(|p| {
            let log = job
                .cluster
                .pod_log(NS, p)
                .and_then(|f| std::fs::read_to_string(f).ok())
                .unwrap_or_default();
            format!("--- {p}:\n{log}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One rank's `notice.RANK`: host, seconds, pod, when it was told (ms), its step.
struct Notice {
    host: String,
    seconds: String,
    pod: String,
    told_ms: u128,
    step: u64,
}

fn notice(dir: &Path, rank: usize) -> Option<Notice> {
    let t = match std::fs::read(dir.join(format!("notice.{rank}"))) {
        Ok(t) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("notice.{rank}: {e}"),
    };
    let f: Vec<&str> = t.split_whitespace().collect();
    assert_eq!(f.len(), 6, "notice.{rank}: {t:?}");
    assert_eq!(f[0], rank.to_string(), "notice.{rank}: {t:?}");
    Some(Notice {
        host: f[1].into(),
        seconds: f[2].into(),
        pod: f[3].into(),
        told_ms: f[4].parse().unwrap(),
        step: f[5].parse().unwrap(),
    })
}

/// SIGTERM to pod `i`'s agent, as the kubelet sends; returns when it was sent (ms) and the
/// agent's pid.
fn sigterm_agent(job: &Job, i: usize) -> (u128, u32) {
    let agent = job.pids_in_pod(i, "prrte-k8s-agent").unwrap();
    assert_eq!(agent.len(), 1, "one agent in pod {i}");
    let t0 = now_ms();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent[0] as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    (t0, agent[0])
}

/// Runs `program DIR rest...` as 3 ranks over 3 pods, SIGTERMs pod 2's agent once every rank
/// is ready, and checks what every rank reports: told within 1 s with the seconds left, its
/// checkpoint written before pod 2's agent (and so its pod) ended; nothing left afterwards.
/// `rank_comm` is the ranks' process name; `pmix`: the notice names the pod.
fn preempt_run(
    job: &Job,
    end_pod_2: &dyn Fn(&Job) -> (u128, u32),
    extra: &[&str],
    program: &[&str],
    rest: &[&str],
    rank_comm: &str,
    pmix: bool,
) {
    let dir = job.dir.sub("ckpt").unwrap();
    let d = dir.to_str().unwrap().to_string();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["--map-by", "node", "-n", "3"]);
    args.extend(program);
    args.push(&d);
    args.extend(rest);
    // The agent that starts a launcher gives it the seconds (its ranks in pod 0 inherit them);
    // here the test starts prterun in pod 0, so it gives what pod 0's agent would.
    let vars = [format!("PRRTE_K8S_PREEMPT_SECONDS={HOLD}")];
    let cmd = job
        .in_pod_with(0, "prterun", &vars, &k8s_args(&args))
        .unwrap();
    let mut run = harness::Guarded::spawn(cmd, "prterun", job.dir.path()).unwrap();
    wait_ready(&dir, 3, &mut run, job);
    let (t0, agent) = end_pod_2(job);
    // The agent keeps its pod up until the ranks have exited (after their checkpoints).
    let deadline = Instant::now() + Duration::from_secs(GRACE + 10);
    while Path::new(&format!("/proc/{agent}")).exists() {
        assert!(
            Instant::now() < deadline,
            "pod 2's agent still runs {GRACE} s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone_ms = now_ms();
    let st = run.wait_timeout(Duration::from_secs(20)).unwrap();
    let ended_ms = now_ms();
    let out = output(job);
    let st = st.unwrap_or_else(|| panic!("prterun still runs after the notice:\n{out}"));
    eprintln!("prterun: {st}\n{out}");
    for rank in 0..3 {
        // Rank 2's pod has ended, so has prterun; give the others' last writes a moment.
        let until = Instant::now() + Duration::from_secs(5);
        while rank != 2 && notice(&dir, rank).is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "rank {rank}: notice read {} ms after prterun ended",
            now_ms() - ended_ms
        );
        let n = notice(&dir, rank).unwrap_or_else(|| {
            panic!(
                "rank {rank} wrote no notice before pod 2 ended (files: {:?}):\n{out}\n{}",
                std::fs::read_dir(&dir)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                    .unwrap_or_default(),
                pod_logs(job)
            )
        });
        let ckpt = std::fs::read_to_string(dir.join(format!("ckpt.{rank}"))).unwrap();
        assert_eq!(ckpt.trim(), n.step.to_string(), "rank {rank}'s checkpoint");
        let late = n.told_ms.saturating_sub(t0);
        eprintln!(
            "rank {rank} on {}: told {late} ms after SIGTERM, {} s left, step {}",
            n.host, n.seconds, n.step
        );
        assert!(late < 1000, "rank {rank} was told {late} ms after SIGTERM");
        assert!(n.told_ms <= gone_ms, "rank {rank} told after pod 2 ended");
        assert_eq!(n.host, job.hostnames[rank], "rank {rank}'s host");
        let secs: u64 = n.seconds.parse().unwrap();
        assert!(
            (HOLD - 1..=HOLD).contains(&secs),
            "rank {rank}: {secs} s left, expected about {HOLD}"
        );
        if pmix {
            assert_eq!(n.pod, job.pods[2], "rank {rank}: the pod told to end");
        }
    }
    assert!(
        out.contains("preempt rank 2"),
        "the ranks' output says so: {out}"
    );
    // Pod 2's agent, the last of its processes, has ended (an evicted pod is then removed);
    // in the other pods no prted and no rank is left.
    let deadline = Instant::now() + Duration::from_secs(15);
    for i in 0..2 {
        loop {
            let left = [
                job.pids_in_pod(i, "prted").unwrap(),
                job.pids_in_pod(i, rank_comm).unwrap(),
            ]
            .concat();
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "processes of the job left in pod {i}: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Pod 2 evicted through the API (`kubectl create --raw .../pods/P/eviction`, grace
/// [`GRACE`] s): the sandbox's kubelet gives its agent SIGTERM and the grace period.
fn evict_pod_2(job: &Job) -> (u128, u32) {
    let agent = job.pids_in_pod(2, "prrte-k8s-agent").unwrap();
    assert_eq!(agent.len(), 1, "one agent in pod 2");
    let pod = &job.pods[2];
    let body = job.dir.path().join("eviction.json");
    std::fs::write(
        &body,
        format!(
            r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{NS}"}},"deleteOptions":{{"gracePeriodSeconds":{GRACE}}}}}"#
        ),
    )
    .unwrap();
    let kubectl =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let t0 = now_ms();
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(job.cluster.kubeconfig())
        .args(["create", "--raw"])
        .arg(format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction"))
        .arg("-f")
        .arg(&body)
        .output()
        .unwrap();
    assert!(out.status.success(), "kubectl eviction: {}", text(&out));
    (t0, agent[0])
}

/// A C program registered for `PMIX_JCTRL_PREEMPT_ALERT` hears of pod 2's SIGTERM in every pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pmix_event_tells_every_rank_in_every_pod() {
    let job = job("prepmix", 3).await;
    let prog = build_pmix_program(job.dir.path()).unwrap();
    let prog = [prog.to_str().unwrap()];
    preempt_run(
        &job,
        &|j| sigterm_agent(j, 2),
        &[],
        &prog,
        &["600"],
        "preempt_pmix",
        true,
    );
}

/// The same when pod 2 is evicted through the Kubernetes API with a grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_pod_tells_every_rank_in_every_pod() {
    let job = job("preevict", 3).await;
    let prog = build_pmix_program(job.dir.path()).unwrap();
    let prog = [prog.to_str().unwrap()];
    preempt_run(
        &job,
        &evict_pod_2,
        &[],
        &prog,
        &["600"],
        "preempt_pmix",
        true,
    );
}

/// An mpi4py program that handles the site's signal (`plm_k8s_preempt_signal SIGUSR1`) hears of
/// pod 2's SIGTERM in every pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_signal_tells_every_mpi4py_rank_in_every_pod() {
    let job = job("presig", 3).await;
    let py = harness::venv().join("bin/python");
    let prog = repo().join("tests/programs/preempt_signal.py");
    preempt_run(
        &job,
        &|j| sigterm_agent(j, 2),
        &["--prtemca", "plm_k8s_preempt_signal", "SIGUSR1"],
        &[py.to_str().unwrap(), prog.to_str().unwrap()],
        &["600", "SIGUSR1"],
        "python",
        false,
    );
}
