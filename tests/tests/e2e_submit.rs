//! `prrte-k8s submit`: many tasks through one PMIx tool connection into the job's DVM.
//!
//! One DVM (run by the pod-0 agent) of 16 pods with 2 slots each; the submitter runs in pod 1,
//! finding the DVM as `prrte-k8s prun` does. 500 single-rank `/bin/true`, three failing tasks and
//! one that hangs past its `--timeout`: every task has exactly one result, the failures are
//! named, the hang is reported as `timeout` and killed, each task's output is kept apart
//! (`--output`), and the DVM serves a `prun` afterwards.
//! A submitter killed midway and run again with `--resume` runs only the tasks without a
//! result. A submitter killed while its tasks run (each a `sleep`): the DVM kills every one of
//! them (no task process survives) and keeps serving: a `prun` over every slot and a new
//! submit run. A DVM whose every slot another job holds: the submitter's spawns are refused for
//! want of room, and it tries again until there is room (it never waits for an end that cannot
//! come). Every PRRTE process runs with its pod's private TMPDIR (under the test directory).
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PODS: usize = 16;
const TRUE_TASKS: usize = 500;
const FAILING: [usize; 3] = [100, 250, 400];
/// Where the hanging task sits in the list.
const HANG: usize = 300;
/// A bound far above what the run takes (500 tasks end in well under a minute here).
const RUN_LIMIT: Duration = Duration::from_secs(300);

fn cli() -> String {
    harness::workspace_bin("prrte-k8s")
        .unwrap()
        .display()
        .to_string()
}

/// The parseable result lines of a results file, by index (every index once, or the test fails).
fn results(path: &Path) -> BTreeMap<usize, serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    results_by_index(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How long the DVM may take to kill a lost tool's tasks (it looks for them every second).
const ORPHANS_KILLED: Duration = Duration::from_secs(30);

/// Host pids of live (not zombie) `sleep` processes in any pod.
fn sleepers(job: &Job) -> Vec<u32> {
    job.live_pids("sleep").unwrap()
}

fn write_tasks(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

/// `n` copies of the task `line` written to `<name>.txt`; the `submit` command line that runs
/// them into `<name>.json` (with `--max-in-flight` when given), and that results file.
fn submit_of(
    exe: &str,
    dir: &Path,
    name: &str,
    line: &str,
    n: usize,
    in_flight: Option<usize>,
) -> (Vec<String>, PathBuf) {
    let tasks = write_tasks(dir, &format!("{name}.txt"), &vec![line.to_string(); n]);
    let res = dir.join(format!("{name}.json"));
    let mut argv: Vec<String> = vec![exe.into(), "submit".into(), "--tasks".into()];
    argv.push(tasks.display().to_string());
    argv.extend(["--results".into(), res.display().to_string()]);
    if let Some(k) = in_flight {
        argv.extend(["--max-in-flight".into(), k.to_string()]);
    }
    (argv, res)
}

/// `argv` as the `&str`s the exec calls take.
fn strs(argv: &[String]) -> Vec<&str> {
    argv.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_runs_every_task_once_names_failures_and_kills_a_hang() {
    let job = Job::start(JobSpec::dvm_head("submit", PODS)).await.unwrap();
    job.wait_for_dvm(Duration::from_secs(120)).unwrap();
    let exe = cli();
    let dir = job.dir.path().to_path_buf();

    // 1. 500 true, three failing, one hanging (its own --timeout), comments and blank lines.
    let mut lines = vec!["# a workflow".to_string(), String::new()];
    let total = TRUE_TASKS + FAILING.len() + 1;
    for i in 0..total {
        lines.push(if FAILING.contains(&i) {
            format!("sh -c 'echo task-{i}; echo oops-{i} >&2; exit 3'")
        } else if i == HANG {
            "--timeout 5 sleep 1000".into()
        } else {
            "/bin/true".into()
        });
    }
    let tasks = write_tasks(&dir, "tasks.txt", &lines);
    let res = dir.join("results.json");
    let outdir = dir.join("output");
    let (tasks_s, res_s) = (tasks.display().to_string(), res.display().to_string());
    let out_s = outdir.display().to_string();
    let started = Instant::now();
    let out = job
        .exec_in_pod(
            1,
            &[
                &exe,
                "submit",
                "--tasks",
                &tasks_s,
                "--results",
                &res_s,
                "--max-in-flight",
                "24",
                "--output",
                &out_s,
            ],
            RUN_LIMIT,
        )
        .unwrap_or_else(|e| {
            let r = results(&res);
            let missing: Vec<usize> = (0..total).filter(|i| !r.contains_key(i)).collect();
            panic!(
                "{e:#}\n{} of {total} results; without one: {missing:?}",
                r.len()
            )
        });
    let secs = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!(
        "{total} tasks in {secs:.1} s ({:.1} tasks/s end to end)\n{err}",
        total as f64 / secs
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "failed tasks make the exit non-zero\n{}",
        text(&out)
    );
    let r = results(&res);
    assert_eq!(r.len(), total, "one result per task\n{err}");
    for (i, v) in &r {
        let want: serde_json::Value = if FAILING.contains(i) {
            3.into()
        } else if *i == HANG {
            "timeout".into()
        } else {
            0.into()
        };
        assert_eq!(v["exit"], want, "task {i}: {v}");
        assert!(v["start"].is_string() && v["end"].is_string(), "{v}");
        let pods = v["pods"].as_array().expect("pods");
        assert!(
            pods.iter()
                .all(|p| job.hostnames.iter().any(|h| Some(h.as_str()) == p.as_str())),
            "task {i} names pods not of the job: {v}"
        );
    }
    assert!(
        r.values()
            .any(|v| !v["pods"].as_array().unwrap().is_empty()),
        "no result names its pod"
    );
    for i in FAILING.iter().chain([&HANG]) {
        assert!(
            err.contains(&format!("{i} (exit ")),
            "failed task {i} not named:\n{err}"
        );
    }
    assert!(
        sleepers(&job).is_empty(),
        "the timed-out task still runs: {:?}",
        sleepers(&job)
    );

    // The DVM still serves: a prun of 32 ranks over every pod.
    let out = job
        .exec_in_pod(
            2,
            &[&exe, "prun", "-n", "32", "/bin/true"],
            Duration::from_secs(60),
        )
        .unwrap();
    assert!(out.status.success(), "prun after submit\n{}", text(&out));

    // 2. A submitter killed midway, then --resume: only the tasks without a result run.
    let n = 400;
    let (argv, res) = submit_of(&exe, &dir, "resume", "/bin/true", n, Some(8));
    let argv = strs(&argv);
    let mut first = harness::Guarded::spawn(
        job.cluster.pod_exec(&job.pods[3], &argv).unwrap(),
        "first",
        &dir,
    )
    .unwrap();
    let deadline = Instant::now() + RUN_LIMIT;
    while results(&res).len() < 50 {
        assert!(
            Instant::now() < deadline,
            "the first submitter wrote no 50 results"
        );
        assert!(
            first
                .wait_timeout(Duration::from_millis(20))
                .unwrap()
                .is_none(),
            "ended early"
        );
    }
    first.signal(nix::sys::signal::Signal::SIGKILL);
    assert!(first
        .wait_timeout(Duration::from_secs(20))
        .unwrap()
        .is_some());
    let before = results(&res);
    assert!(
        before.len() < n,
        "killed after all {n} results: nothing to resume"
    );
    let mut resume = argv.to_vec();
    resume.push("--resume");
    let out = job.exec_in_pod(4, &resume, RUN_LIMIT).unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "resume\n{}", text(&out));
    let after = results(&res);
    assert_eq!(after.len(), n, "{err}");
    for (i, v) in &before {
        assert_eq!(&after[i], v, "task {i}'s first result was replaced");
    }
    let ran = format!(
        "{} of {} tasks ended ({} already had a result)",
        n - before.len(),
        n - before.len(),
        before.len()
    );
    assert!(
        err.contains(&ran),
        "the resumed run ran other tasks than the missing ones (want {ran:?}):\n{err}"
    );
    eprintln!(
        "killed after {} results; the resumed run ran {}",
        before.len(),
        n - before.len()
    );

    // 3. A submitter killed while its tasks run: the DVM kills them, then serves again.
    let sleeping = 16;
    let (argv, res) = submit_of(&exe, &dir, "orphans", "sleep 1000", sleeping, Some(16));
    let argv = strs(&argv);
    let mut submitter = harness::Guarded::spawn(
        job.cluster.pod_exec(&job.pods[5], &argv).unwrap(),
        "orphans",
        &dir,
    )
    .unwrap();
    let deadline = Instant::now() + RUN_LIMIT;
    while sleepers(&job).len() < sleeping {
        assert!(
            Instant::now() < deadline,
            "only {} of {sleeping} tasks started",
            sleepers(&job).len()
        );
        assert!(
            submitter
                .wait_timeout(Duration::from_millis(50))
                .unwrap()
                .is_none(),
            "the submitter ended with its tasks running"
        );
    }
    submitter.signal(nix::sys::signal::Signal::SIGKILL);
    assert!(submitter
        .wait_timeout(Duration::from_secs(20))
        .unwrap()
        .is_some());
    let killed_at = Instant::now();
    while !sleepers(&job).is_empty() {
        assert!(
            killed_at.elapsed() < ORPHANS_KILLED,
            "{} tasks of the killed submitter still run after {ORPHANS_KILLED:?}",
            sleepers(&job).len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "the killed submitter's {sleeping} tasks were gone {:.1} s after the kill",
        killed_at.elapsed().as_secs_f64()
    );
    assert!(results(&res).is_empty(), "a killed submitter wrote results");
    // Their slots are free again: a prun over all 32, and a new submitter's tasks. The DVM
    // releases a killed job's slots once its daemons have reported it ended, a moment after its
    // processes are gone: until then a prun over every slot is refused for want of room.
    let freed_by = Instant::now() + Duration::from_secs(30);
    loop {
        let out = job
            .exec_in_pod(
                2,
                &[&exe, "prun", "-n", "32", "/bin/true"],
                Duration::from_secs(60),
            )
            .unwrap();
        if out.status.success() {
            break;
        }
        let refused = String::from_utf8_lossy(&out.stderr).contains("FAILED_TO_MAP");
        assert!(
            refused && Instant::now() < freed_by,
            "prun after the kill\n{}",
            text(&out)
        );
    }
    let (argv, res) = submit_of(&exe, &dir, "after", "/bin/true", 64, None);
    let out = job.exec_in_pod(6, &strs(&argv), RUN_LIMIT).unwrap();
    assert!(
        out.status.success(),
        "submit after the kill\n{}",
        text(&out)
    );
    assert_eq!(results(&res).len(), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_waits_for_room_in_a_dvm_another_job_fills() {
    const SLOTS: usize = 4;
    let job = Job::start(JobSpec::dvm_head("submitfull", 2))
        .await
        .unwrap();
    job.wait_for_dvm(Duration::from_secs(120)).unwrap();
    let exe = cli();
    let dir = job.dir.path().to_path_buf();
    let blocker = job
        .cluster
        .pod_exec(&job.pods[1], &[&exe, "prun", "-n", "4", "sleep", "15"])
        .unwrap();
    let mut blocker = harness::Guarded::spawn(blocker, "blocker", &dir).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sleepers(&job).len() < SLOTS {
        assert!(Instant::now() < deadline, "the blocking job did not start");
        assert!(
            blocker
                .wait_timeout(Duration::from_millis(50))
                .unwrap()
                .is_none(),
            "the blocking job ended early"
        );
    }
    // Every spawn in flight is refused: none of the submitter's tasks runs to leave and free
    // room, so it must try again on its own.
    let (argv, res) = submit_of(&exe, &dir, "full", "/bin/true", 3, Some(3));
    let out = job
        .exec_in_pod(0, &strs(&argv), Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e:#}\n{} results", results(&res).len()));
    assert!(
        out.status.success(),
        "submit into a full DVM\n{}",
        text(&out)
    );
    let r = results(&res);
    assert_eq!(r.len(), 3, "{}", text(&out));
    assert!(r.values().all(|v| v["exit"] == 0), "{r:?}");
    assert!(
        blocker
            .wait_timeout(Duration::from_secs(30))
            .unwrap()
            .is_some_and(|s| s.success()),
        "the blocking job did not end well"
    );
}
