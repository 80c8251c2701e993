//! The Kubeflow SDK (PyPI `kubeflow`, the version `prrte-config/setup.sh` pins in its venv)
//! unchanged against the sandbox: Trainer v2.3.0's CRDs as published, the
//! `prrte-k8s-openmpi` ClusterTrainingRuntime of `prrte-config/trainer/` (with the namespace's
//! part), and `prrte-k8s controller --trainjobs` making what Trainer's controller would. The SDK
//! script `tests/python/trainer_sdk.py` lists the runtimes, trains a `CustomTrainer` function
//! and a `CustomTrainerContainer` command on 2 nodes of 2 processes, waits for `Complete`, reads
//! the launcher's log (`get_job_logs`, whole and followed) and the events, and deletes each
//! TrainJob. Every rank's line is in the log, the ranks ran on the two node pods, and once
//! deleted nothing of the TrainJob is left: no pod, Job, JobSet, Secret or ConfigMap.
//!
//! The node image is the tests' trixie Open MPI image with `python` (the SDK's function runs as
//! `python FILE` under `mpirun`, the file in `/home/mpiuser`, as in Trainer's own MPI images).
#![forbid(unsafe_code)]

mod common;

use anyhow::{Context, Result};
use common::controller::text;
use common::trainer::TrainerSandbox;
use sandbox::app_images::{app_image, AppImage};
use sandbox::harness;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const NS: &str = "default";
const RUNTIME: &str = "prrte-k8s-openmpi";
/// The Kubeflow SDK prrte-config/setup.sh installs (keep equal to its KUBEFLOW_SDK).
const KUBEFLOW_SDK: &str = "0.5.0";
/// Processes per node pod the runtime is given here, and node pods per TrainJob.
const PROCS: usize = 2;
const NODES: usize = 2;
/// Bound of the SDK script (two TrainJobs, each waited for up to 300 s by the SDK).
const SCRIPT_LIMIT: Duration = Duration::from_secs(660);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the repository")
        .to_path_buf()
}

/// The venv with the Kubeflow SDK.
fn kubeflow_python() -> PathBuf {
    PathBuf::from(std::env::var("PRRTE_K8S_ROOT").unwrap_or_else(|_| "/opt/prrte-k8s".into()))
        .join(format!("venv-kubeflow-{KUBEFLOW_SDK}"))
        .join("bin/python")
}

/// The setup script pins the SDK this test names.
#[test]
fn setup_pins_the_sdk_this_test_runs() {
    let setup = std::fs::read_to_string(repo().join("prrte-config/setup.sh")).unwrap();
    assert!(
        setup.contains(&format!("\nKUBEFLOW_SDK={KUBEFLOW_SDK}\n")),
        "prrte-config/setup.sh installs kubeflow {KUBEFLOW_SDK}"
    );
}

/// The runtime of `prrte-config/trainer/`, its `node` containers running `image`, its MPI
/// policy [`PROCS`] processes per node.
fn runtime(image: &str) -> Result<Value> {
    let path = repo().join(format!("prrte-config/trainer/{RUNTIME}.yaml"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut rt: Value = serde_yaml::from_str(&text)?;
    rt["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] = json!(PROCS);
    let jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array_mut()
        .context("the runtime's replicated jobs")?;
    for job in jobs {
        let containers = job
            .pointer_mut("/template/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
            .context("a replicated job's containers")?;
        for c in containers.iter_mut().filter(|c| c["name"] == "node") {
            c["image"] = json!(image);
        }
    }
    Ok(rt)
}

/// The runtime file parses and becomes the runtime this test applies: every `node` container
/// of the image given, [`PROCS`] processes per node, still a runtime the SDK lists.
#[test]
fn the_runtime_file_becomes_the_tests_runtime() {
    let path = repo().join(format!("prrte-config/trainer/{RUNTIME}.yaml"));
    if !path.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing",
            path.display()
        );
        eprintln!("skipped: {} is missing", path.display());
        return;
    }
    let rt = runtime("example/image:1").unwrap();
    assert_eq!(rt["metadata"]["name"], RUNTIME);
    assert!(rt["metadata"]["labels"]["trainer.kubeflow.org/framework"].is_string());
    assert_eq!(rt["spec"]["mlPolicy"]["mpi"]["numProcPerNode"], PROCS);
    let mut nodes = 0;
    for job in rt["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
    {
        for c in job["template"]["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == "node")
        {
            assert_eq!(c["image"], "example/image:1", "{}", job["name"]);
            nodes += 1;
        }
    }
    assert_eq!(
        nodes, 2,
        "a node container in the launcher and in the node job"
    );
}

/// The SDK script's report of one TrainJob.
struct Job {
    name: String,
    kind: String,
    report: Value,
}

/// The lines of `logs` that a rank printed (`<what> rank R of N on HOST`): rank, size, host.
fn rank_lines(logs: &Value, what: &str) -> Vec<(usize, usize, String)> {
    let prefix = format!("{what} rank ");
    logs.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|l| l.trim().strip_prefix(&prefix).map(str::to_string))
        .filter_map(|rest| {
            let w: Vec<&str> = rest.split_whitespace().collect();
            match w[..] {
                [r, "of", n, "on", host] => Some((r.parse().ok()?, n.parse().ok()?, host.into())),
                _ => None,
            }
        })
        .collect()
}

/// Every rank 0..NODES*PROCS printed once, of that size, on NODES hosts none of which is the
/// launcher's.
fn check_ranks(job: &Job, what: &str, key: &str) {
    let lines = rank_lines(&job.report[key], what);
    let n = NODES * PROCS;
    let ranks: BTreeSet<usize> = lines.iter().map(|l| l.0).collect();
    assert_eq!(
        (lines.len(), ranks),
        (n, (0..n).collect()),
        "{} ({}): every rank once in the {key}: {:#}",
        job.name,
        job.kind,
        job.report
    );
    assert!(lines.iter().all(|l| l.1 == n), "world size {n}: {lines:?}");
    let hosts: BTreeSet<&str> = lines.iter().map(|l| l.2.as_str()).collect();
    assert_eq!(hosts.len(), NODES, "the ranks on {NODES} hosts: {lines:?}");
    assert!(
        hosts.iter().all(|h| !h.contains("launcher")),
        "no rank on the launcher: {lines:?}"
    );
}

/// What this test needs that a checkout may lack: the SDK's venv (prrte-config/setup.sh), the
/// runtime (prrte-config/trainer/) and the controller's `--trainjobs`. None, or what is missing.
fn missing() -> Option<String> {
    let python = kubeflow_python();
    if !python.exists() {
        return Some(format!(
            "{} is missing (prrte-config/setup.sh installs the Kubeflow SDK {KUBEFLOW_SDK})",
            python.display()
        ));
    }
    let rt = repo().join(format!("prrte-config/trainer/{RUNTIME}.yaml"));
    if !rt.exists() {
        return Some(format!("{} is missing", rt.display()));
    }
    let help = harness::workspace_bin("prrte-k8s").ok().and_then(|bin| {
        let mut c = Command::new(bin);
        c.args(["controller", "--help"]);
        harness::run_with_timeout(c, Duration::from_secs(30)).ok()
    });
    match help {
        Some(h) if String::from_utf8_lossy(&h.stdout).contains("--trainjobs") => None,
        _ => Some("`prrte-k8s controller` has no --trainjobs".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_train_wait_logs_delete() {
    if let Some(why) = missing() {
        // CI installs and builds everything this needs: there it is a failure
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let python = kubeflow_python();
    let image = app_image(AppImage::TrixieOpenmpiPython).unwrap();
    let rt = runtime(&image).unwrap();
    let sb = TrainerSandbox::start("trainer-sdk", NS, &rt)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let script = repo().join("tests/python/trainer_sdk.py");
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg(sb.cluster.kubeconfig())
        .args([NS, RUNTIME, image.as_str()])
        .env("TMPDIR", sb.dir.tmpdir());
    let out = tokio::task::spawn_blocking(move || harness::run_with_timeout(cmd, SCRIPT_LIMIT))
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "the SDK script: {}\n--- controller\n{}",
        text(&out),
        sb.controller_log()
    );
    let reports: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();

    let runtimes = &reports[0]["runtimes"];
    assert!(
        runtimes
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == RUNTIME && r["framework"] == "openmpi"),
        "list_runtimes shows {RUNTIME}: {runtimes}"
    );
    let jobs: Vec<Job> = reports
        .iter()
        .filter(|r| r["job"].is_string())
        .map(|r| Job {
            name: r["job"].as_str().unwrap().to_string(),
            kind: r["kind"].as_str().unwrap().to_string(),
            report: r.clone(),
        })
        .collect();
    assert_eq!(
        jobs.iter().map(|j| j.kind.as_str()).collect::<Vec<_>>(),
        ["function", "container"],
        "{reports:?}"
    );
    for job in &jobs {
        assert_eq!(job.report["status"], "Complete", "{:#}", job.report);
        assert_eq!(job.report["num_nodes"], NODES, "{:#}", job.report);
        // the launcher is node-0, the node pods node-1.. (the SDK's MPI steps)
        let steps: BTreeSet<&str> = job.report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["name"].as_str())
            .collect();
        assert_eq!(
            steps,
            ["node-0", "node-1", "node-2"].into(),
            "{:#}",
            job.report
        );
        for key in ["logs", "followed"] {
            check_ranks(job, &job.kind, key);
        }
        assert!(
            reports.iter().any(|r| r["deleted"] == job.name.as_str()),
            "delete_job removed {}: {reports:?}",
            job.name
        );
    }
    // Nothing of either TrainJob is left once the garbage collector has been through.
    for job in &jobs {
        sb.wait_nothing_left(&job.name, 60)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
}
