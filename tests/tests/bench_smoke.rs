//! The launch benchmark's ssh baseline works at all (not timed): with an sshd and an agent in
//! each of two pods, a DVM through the agents and then prte with `plm ssh` (tree spawn and not)
//! reach "DVM ready", pterm ends each, and no prted or ssh session is left; and the benchmark
//! binary runs end to end at 4 pods, writing its JSON and plot, and grows a DVM of 2 pods by 1
//! (with `prrte-k8s grow` and with a PMIx allocation request, released after); and its
//! `--tasks` mode runs every method at a tiny size.
#![forbid(unsafe_code)]
use sandbox::bench::sshd::{self, Spawn, SshBaseline};
use sandbox::harness::mpijob::{Job, JobSpec};
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
    let agent_args: Vec<String> = sandbox::harness::mpijob::K8S
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

/// The benchmark binary itself, end to end at a small size (4 pods, 1 run; not timed): every
/// method reaches "DVM ready", its time split into phases, then jobs of `true` at 1 and 3
/// ranks per pod; the memory per pod; the tables and the JSON name the profile the binary was
/// built with (the agent and the components are taken from its own target directory), and the
/// PNG plot is written next to the JSON; `--plot-from` redraws it from the JSON alone. The
/// batch Jobs' part runs too (a Job of 4 pods in a sandbox cluster), with its own plot, and the
/// grow part (a DVM of 2 pods grown by 1): its phases positive and summing to its total, the
/// grown DVM with a daemon in each of its 3 pods.
#[test]
fn bench_binary_writes_json_and_plot_of_its_profile() {
    let dir = sandbox::harness::TestDir::new("bench-smoke-run").unwrap();
    let bench = env!("CARGO_BIN_EXE_prrte-k8s-bench");
    let json_path = dir.path().join("b.json");
    let o = std::process::Command::new(bench)
        .args(["--pods", "4", "--runs", "1", "--grow", "1"])
        .args(["--ranks-per-pod", "3", "--json"])
        .arg(&json_path)
        .env("TMPDIR", dir.tmpdir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}\n{stdout}\n{stderr}", o.status);
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    assert!(
        stdout.contains(&format!("Every figure below: {profile} build"))
            && stdout.contains(&format!("DVM-ready time [{profile}]")),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(report["profile"], profile);
    assert_eq!(report["runs"], 1);
    assert!(report["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(report["load_avg_1m"]["median"].as_f64().unwrap() >= 0.0);
    // The agent and the components measured sit next to the bench binary.
    let bin_dir = std::path::Path::new(bench).parent().unwrap();
    for k in ["agent", "components"] {
        let p = std::path::PathBuf::from(report["artifacts"][k].as_str().unwrap());
        assert_eq!(p.parent().unwrap(), bin_dir, "{k}: {}", p.display());
        assert!(p.is_file(), "{}", p.display());
    }
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["pods"], 4);
    assert_eq!(rows[0]["ranks_per_pod"], 3);
    for m in ["agent", "ssh", "ssh-notree", "lower-bound"] {
        let method = &rows[0]["methods"][m];
        // The DVM-ready time split into its phases, each from /proc start times.
        let ph = &method["phases_s"];
        let part = |k: &str| ph[k]["samples"][0].as_f64().unwrap_or(f64::NAN);
        let parts = [
            "to_first_prted",
            "first_to_last_prted",
            "last_prted_to_ready",
        ];
        assert!(parts.iter().all(|k| part(k) >= 0.0), "{m}: {ph}");
        let ready = method["dvm_ready_s"]["samples"][0].as_f64().unwrap();
        let sum: f64 = parts.iter().map(|k| part(k)).sum();
        assert!(sum >= ready - 1e-9 && sum < ready + 0.05, "{m}: {ph}");
        // The jobs of `true` at 1 and at 3 ranks per pod (12 processes, oversubscribed).
        for k in ["job_true_1_per_pod_s", "job_true_ranks_per_pod_s"] {
            let t = method[k]["median"].as_f64().unwrap_or(0.0);
            assert!(t > 0.0 && t < 120.0, "{m}: {k}: {method}");
        }
        let r = &method["dvm_ready_s"];
        let med = r["median"].as_f64().unwrap_or(0.0);
        assert!(med > 0.0 && med < 120.0, "{m}: {r}");
        assert_eq!(r["samples"].as_array().unwrap().len(), 1, "{m}: {r}");
        assert!(r["min"].as_f64() <= Some(med) && r["max"].as_f64() >= Some(med));
        let idle = &rows[0]["methods"][m]["agents_idle_cpu_ms_per_s"]["median"];
        assert!(idle.as_f64().is_some_and(|c| c >= 0.0), "{m}: {idle}");
    }
    // Memory per worker pod: the agent's and its prted's, sshd's; the agent held against 6 MiB
    // in the table (printed, not asserted: this is the test build, not the release).
    let mem = &rows[0]["memory_at_ready_kib"];
    for k in [
        "agent_rss_per_pod",
        "agent_pss_per_pod",
        "prted_pss_per_pod",
        "sshd_pss_per_pod",
    ] {
        assert!(mem[k].as_u64().unwrap_or(0) > 100, "{k}: {mem}");
    }
    // The median of the pods' sums: above each part's median.
    let kib = |k: &str| mem[k].as_u64().unwrap_or(0);
    assert!(
        kib("agent_plus_prted_pss_per_pod") > kib("agent_pss_per_pod")
            && kib("agent_plus_prted_pss_per_pod") > kib("prted_pss_per_pod"),
        "{mem}"
    );
    assert!(stdout.contains("agent RSS <= 6 MiB"), "{stdout}");
    assert!(rows[0]["ratio_ssh_over_agent"].as_f64().unwrap() > 0.0);
    assert!(rows[0]["ratio_agent_over_lower_bound"].as_f64().unwrap() > 0.0);
    // The channel's encryption held against the agents' DVM-ready time of the same run.
    assert!(
        stdout.contains("The agent channel's encryption"),
        "{stdout}"
    );
    let ch = &report["channel"];
    let dvm = &ch["per_dvm"].as_array().unwrap()[0];
    assert_eq!(dvm["pods"], 4, "{ch}");
    let ready = rows[0]["methods"]["agent"]["dvm_ready_s"]["median"].as_f64();
    assert_eq!(dvm["agent_dvm_ready_s"].as_f64(), ready, "{ch}");
    let added = dvm["launcher_added_ms"].as_f64().unwrap();
    let share = dvm["share_of_dvm_ready_percent"].as_f64().unwrap();
    assert!(
        added > 0.0 && (share - added / 1e3 / ready.unwrap() * 100.0).abs() < 1e-9,
        "{ch}"
    );
    assert!(
        ch["noise_handshake_agent_us"]["median"].as_f64().unwrap() > 0.0,
        "{ch}"
    );
    let png = dir.path().join("b.png");
    let is_png = |p: &std::path::Path| {
        std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n") && b.len() > 5_000)
    };
    assert!(is_png(&png), "no plot at {}\n{stdout}", png.display());
    // The batch Jobs: a Job of 4 pods applied until Complete, phase by phase, and the same
    // command in a running DVM; their table, JSON and plot.
    assert!(stdout.contains("Batch Job end to end"), "{stdout}");
    let batch = &report["batch"]["rows"].as_array().unwrap()[0];
    assert_eq!(batch["pods"], 4, "{batch}");
    assert_eq!(batch["command"], "mpirun -n 4 true", "{batch}");
    let med = |k: &str| batch[k]["median"].as_f64().unwrap_or(f64::NAN);
    for k in ["pods_ready_s", "command_s", "total_s", "in_running_dvm_s"] {
        assert!(med(k) > 0.0 && med(k) < 120.0, "{k}: {batch}");
    }
    assert!(
        med("total_s") > med("pods_ready_s") + med("command_s"),
        "{batch}"
    );
    for k in [
        "ready_to_command_s",
        "ended_to_workers_done_s",
        "workers_done_to_complete_s",
        "overhead_s",
    ] {
        assert!(med(k).is_finite(), "{k}: {batch}");
    }
    // The launcher waited for its worker's pod to be finished before it exited.
    assert!(med("ended_to_workers_done_s") > 0.0, "{batch}");
    let batch_png = dir.path().join("b-batch.png");
    assert!(
        is_png(&batch_png),
        "no batch plot at {}\n{stdout}",
        batch_png.display()
    );
    // The grow: 2 pods grown by 1, split into its phases, beside a plain start of 3 pods.
    assert!(stdout.contains("Growing a running DVM"), "{stdout}");
    let grow = &report["grow"]["rows"].as_array().unwrap()[0];
    assert_eq!(grow["new_pods"], 1, "{grow}");
    assert_eq!(grow["pods_after"], 3, "{grow}");
    assert_eq!(grow["daemons_after"], serde_json::json!([3]), "{grow}");
    let sample = |k: &str| grow[k]["samples"][0].as_f64().unwrap_or(f64::NAN);
    let phases = [
        "request_to_patched_s",
        "patched_to_ready_s",
        "ready_to_in_dvm_s",
    ];
    for k in phases.iter().chain(&[
        "total_s",
        "plain_dvm_ready_s",
        "alloc_extend_s",
        "alloc_release_s",
    ]) {
        assert!(sample(k) > 0.0 && sample(k) < 120.0, "{k}: {grow}");
    }
    let sum: f64 = phases.iter().map(|k| sample(k)).sum();
    assert!((sum - sample("total_s")).abs() < 1e-6, "{grow}");
    // Redraw from the JSON alone, and refuse a file that is not a report.
    let again = dir.path().join("again.png");
    let o = std::process::Command::new(bench)
        .arg("--plot-from")
        .arg(&json_path)
        .arg("--plot")
        .arg(&again)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(is_png(&again));
    assert!(is_png(&dir.path().join("again-batch.png")));
    std::fs::write(dir.path().join("bad.json"), "not json").unwrap();
    let o = std::process::Command::new(bench)
        .arg("--plot-from")
        .arg(dir.path().join("bad.json"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not JSON written by prrte-k8s-bench"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The controller's benchmark at the smallest size (2 pods, 1 run each way, a burst of 1; not
/// timed): the MPIJob reaches `Succeeded` through `prrte-k8s controller` running as a process
/// against the sandbox, the same MPIJob through `prrte-k8s manifest --from-mpijob` completes,
/// and the JSON has both times, the difference and the controller's CPU time and RSS.
#[test]
fn bench_binary_runs_mpijobs_through_the_controller() {
    let dir = sandbox::harness::TestDir::new("bench-smoke-controller").unwrap();
    let bench = env!("CARGO_BIN_EXE_prrte-k8s-bench");
    let json_path = dir.path().join("c.json");
    let o = std::process::Command::new(bench)
        .args(["--controller-only", "--pods", "2", "--runs", "1"])
        .args(["--burst", "1", "--json"])
        .arg(&json_path)
        .env("TMPDIR", dir.tmpdir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}\n{stdout}\n{stderr}", o.status);
    assert!(stdout.contains("controller adds"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let row = &report["controller"]["rows"][0];
    assert_eq!(row["pods"], 2, "{report}");
    for k in ["controller_s", "manifest_s"] {
        let med = row[k]["median"].as_f64().unwrap_or(0.0);
        assert!(med > 0.0 && med < 180.0, "{k}: {row}");
    }
    assert!(row["controller_adds_s"].as_f64().is_some(), "{row}");
    let burst = &report["controller"]["burst"];
    assert_eq!(burst["mpijobs"], 1, "{burst}");
    assert!(
        burst["controller_cpu_s"].as_f64().unwrap() >= 0.0,
        "{burst}"
    );
    assert!(
        burst["controller_peak_rss_kib"].as_u64().unwrap() > 1000,
        "{burst}"
    );
}

/// The workflow benchmark at a tiny size (not timed): one DVM of 16 pods, 40 single-rank and 4
/// `-n 32` tasks through `prrte-k8s submit`, 4 tasks as a prun each (sequential, 16 at once) and
/// 4 Kubernetes Jobs: every method's row has all its tasks, none failed, a positive rate and
/// latency; submit's rows carry prte's CPU and the breakdown of a task's time.
#[test]
fn bench_binary_runs_tasks_through_one_dvm() {
    let dir = sandbox::harness::TestDir::new("bench-smoke-tasks").unwrap();
    let bench = env!("CARGO_BIN_EXE_prrte-k8s-bench");
    let json_path = dir.path().join("t.json");
    let o = std::process::Command::new(bench)
        .args(["--tasks", "40", "--wide-tasks", "4", "--prun-tasks", "4"])
        .args(["--k8s-jobs", "4", "--json"])
        .arg(&json_path)
        .env("TMPDIR", dir.tmpdir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}\n{stdout}\n{stderr}", o.status);
    assert!(stdout.contains("tasks/s"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let rows = report["tasks"].as_array().expect("tasks rows");
    let want = [
        ("submit, 1 rank", 40),
        ("submit, -n 32", 4),
        ("prun per task, sequential", 4),
        ("prun per task, 16 at once", 4),
        ("Kubernetes Job per task", 4),
    ];
    assert_eq!(rows.len(), want.len(), "{report}");
    for (row, (method, n)) in rows.iter().zip(want) {
        assert_eq!(row["method"], method, "{row}");
        assert_eq!(row["tasks"], n, "{row}");
        assert_eq!(row["failed"], 0, "{row}");
        assert!(row["tasks_per_s"].as_f64().unwrap() > 0.0, "{row}");
        let (med, p99) = (
            row["median_ms"].as_f64().unwrap(),
            row["p99_ms"].as_f64().unwrap(),
        );
        assert!(med > 0.0 && p99 >= med, "{row}");
    }
    for row in &rows[..2] {
        assert!(row["prte_cpu_s"].as_f64().unwrap() > 0.0, "{row}");
        assert!(
            row["phases"].as_str().unwrap().contains("spawn answered"),
            "{row}"
        );
    }
}
