//! The Python module end to end: its wheel built with pip from the tree (`make wheel`'s script,
//! cached outside the clone), installed with pip into a venv on the host (the sandbox's pods
//! share the host's file system), and the README's and user guide's three-line example run by that venv's
//! Python in a pod of a job whose pod-0 agent runs the DVM. Every task of the list has exactly
//! one result, with its exit (a failing task, one killed by a signal, one past its timeout)
//! and the pods it ran in. Every PRRTE process runs with its pod's private TMPDIR (under the
//! test directory).
#![forbid(unsafe_code)]
mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

const PODS: usize = 4;
const TRUE_TASKS: usize = 40;
/// Bounds far above what each step takes here.
const RUN_LIMIT: Duration = Duration::from_secs(180);
const PIP_LIMIT: Duration = Duration::from_secs(300);

/// The Python block `doc` (a file of the repository) marks as the workflow example.
fn example_in(doc: &str) -> String {
    let guide = std::fs::read_to_string(repo().join(doc)).unwrap();
    let from = guide
        .find("<!-- the Python workflow example")
        .unwrap_or_else(|| panic!("{doc} marks no Python workflow example"));
    let rest = &guide[from..];
    let start = rest
        .find("```python\n")
        .expect("a python block after the mark")
        + 10;
    let len = rest[start..].find("```").expect("the block's end");
    rest[start..start + len].to_string()
}

/// The user's guide's example (the README shows the same).
fn guide_example() -> String {
    example_in("docs/user-guide.md")
}

fn run(cmd: Command, limit: Duration) {
    let desc = format!("{cmd:?}");
    let out = sandbox::harness::run_with_timeout(cmd, limit).unwrap();
    assert!(out.status.success(), "{desc}\n{}", text(&out));
}

/// Host pids of live (not zombie) `sleep` processes in any pod.
fn sleepers(job: &Job) -> Vec<u32> {
    job.live_pids("sleep").unwrap()
}

#[test]
fn the_readme_and_the_guide_show_one_three_line_example() {
    let ex = guide_example();
    assert_eq!(example_in("README.md"), ex);
    assert_eq!(ex.lines().count(), 3, "{ex}");
    assert!(
        ex.contains("prrte_k8s.connect()") && ex.contains(".map("),
        "{ex}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_python_example_runs_every_task_in_a_pod() {
    let wheel = python_wheel().unwrap();
    let job = Job::start(JobSpec::dvm_head("pywf", PODS)).await.unwrap();
    let dir = job.dir.path().to_path_buf();

    // pip from the tree's wheel into a venv the pods see.
    let venv = dir.join("venv");
    let mut mk = Command::new("python3");
    mk.args(["-m", "venv"]).arg(&venv);
    run(mk, PIP_LIMIT);
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args([
        "install",
        "--no-index",
        "--no-deps",
        "--disable-pip-version-check",
    ])
    .arg(&wheel);
    run(pip, PIP_LIMIT);

    // The task list: comments and a blank line (no task), single-rank and two-rank tasks, one
    // failing, one killed by a signal, one past its own timeout.
    let mut lines = vec!["# a Python workflow".to_string(), String::new()];
    let mut want: Vec<serde_json::Value> = Vec::new();
    for i in 0..TRUE_TASKS {
        lines.push(
            if i % 10 == 3 {
                "-n 2 /bin/true"
            } else {
                "/bin/true"
            }
            .into(),
        );
        want.push(0.into());
    }
    let specials = [
        ("sh -c 'exit 3'", serde_json::Value::from(3)),
        ("sh -c 'kill -9 $$'", "SIGKILL".into()),
        ("--timeout 3 sleep 100", "timeout".into()),
    ];
    for (line, exit) in specials {
        lines.push(line.into());
        want.push(exit);
    }
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("tasks.txt"), lines.join("\n") + "\n").unwrap();

    job.wait_for_dvm(Duration::from_secs(120)).unwrap();
    let python = venv.join("bin/python");
    let script = format!(
        "cd {} && exec {} -c \"$1\"",
        work.display(),
        python.display()
    );
    let example = guide_example();
    let out = job
        .exec_in_pod(1, &["sh", "-c", &script, "sh", &example], RUN_LIMIT)
        .unwrap();
    assert!(out.status.success(), "the example in pod 1\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let results = results_by_index(&stdout).unwrap();
    assert_eq!(
        results.len(),
        want.len(),
        "one result per task\n{}",
        text(&out)
    );
    for (i, exit) in want.iter().enumerate() {
        let r = &results[&i];
        assert_eq!(&r["exit"], exit, "task {i}: {r}");
        assert!(r["start"].is_string() && r["end"].is_string(), "{r}");
        let pods = r["pods"].as_array().expect("pods");
        assert!(
            pods.iter()
                .all(|p| job.hostnames.iter().any(|h| Some(h.as_str()) == p.as_str())),
            "task {i} names pods not of the job: {r}"
        );
    }
    assert!(
        results
            .values()
            .any(|r| r["pods"].as_array().unwrap().len() == 2),
        "no two-rank task names its two ranks' pods"
    );
    assert!(
        sleepers(&job).is_empty(),
        "the timed-out task still runs: {:?}",
        sleepers(&job)
    );
    // The DVM still serves once the Python process is gone.
    let cli = sandbox::harness::workspace_bin("prrte-k8s").unwrap();
    let cli = cli.display().to_string();
    let out = job
        .exec_in_pod(
            2,
            &[&cli, "prun", "-n", "8", "/bin/true"],
            Duration::from_secs(60),
        )
        .unwrap();
    assert!(
        out.status.success(),
        "prun after the workflow\n{}",
        text(&out)
    );
}
