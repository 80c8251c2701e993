//! MPI TrainJobs run by `prrte-k8s controller --trainjobs` (no Trainer controller): the sandbox
//! of `common::trainer` (Trainer v2.3.0's CRDs as published, a runtime of
//! `prrte-config/trainer/` as shipped, the namespace's objects, the controller), and the
//! TrainJobs of `tests/golden/trainer/<case>/trainjob.yaml` (2 nodes of 2 processes running pi,
//! their `runtimePatches` left out: the controller refuses them and gives the node pods their
//! slots itself), changed per test:
//!
//! - on `prrte-k8s-openmpi` and on `prrte-k8s-mpich` (whose `mpiImplementation` is OpenMPI, the
//!   only one Trainer takes; the agent's `PRRTE_K8S_MPI=mpich` picks the MPI), the TrainJob
//!   completes with 4 ranks in the launcher's log, 2 on each node pod and none on the
//!   launcher's, no sshd started meanwhile; its status is Trainer's (`Complete` with the
//!   JobSet's reason, no other condition, `jobsStatus` of both replicated jobs with all six
//!   counts); once it is deleted nothing of it is left (no pod, Job, JobSet, Secret or
//!   ConfigMap);
//! - with `suspend: true` its Jobs are made suspended and no pod runs (`Suspended`, reason
//!   `Suspended`) until it is resumed (`Suspended` False, reason `Resumed`); then it completes;
//! - a launcher command that exits 3 ends the TrainJob `Failed`, the JobSet's reason, the
//!   message naming the launcher's pod and exit code 3; deleted, nothing of it is left.
#![forbid(unsafe_code)]
mod common;

use anyhow::{Context, Result};
use common::jobset::{hostname, pod_name};
use common::trainer::{condition, is_true, runtime_file, TrainerSandbox};
use sandbox::api::resources::{JOBSETS, PODS};
use sandbox::app_images::{app_image, check_pi, AppImage};
use sandbox::harness;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const NS: &str = "default";
/// Node pods and processes per node pod of the golden TrainJobs.
const NODES: usize = 2;
const PROCS: usize = 2;
/// Bound of a TrainJob's run.
const RUN_SECS: u64 = 240;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// The golden TrainJob of `case`, named `name`, without its `runtimePatches`.
fn trainjob(case: &str, name: &str) -> Result<Value> {
    let path = repo().join(format!("tests/golden/trainer/{case}/trainjob.yaml"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut tj: Value = serde_yaml::from_str(&text)?;
    tj["metadata"]["name"] = json!(name);
    if let Some(spec) = tj["spec"].as_object_mut() {
        spec.remove("runtimePatches");
    }
    Ok(tj)
}

/// The sandbox with the runtime `prrte-k8s-<case>` as shipped, its image built.
async fn sandbox(test: &str, case: &str, image: AppImage) -> TrainerSandbox {
    app_image(image).unwrap_or_else(|e| panic!("{e:#}"));
    let rt = runtime_file(&format!("prrte-k8s-{case}")).unwrap();
    TrainerSandbox::start(test, NS, &rt)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn finished(tj: &Value) -> bool {
    is_true(tj, "Complete") || is_true(tj, "Failed")
}

/// The host names of the node pods of the TrainJob `name` seen so far, by pod (a finished
/// JobSet's running Jobs are deleted, their pods with them: they are noted while they run).
fn note_nodes(sb: &TrainerSandbox, name: &str, seen: &mut BTreeMap<String, String>) {
    for p in sb.pods(name, "node") {
        seen.insert(pod_name(&p), hostname(&p));
    }
}

/// The TrainJob's `jobsStatus`: every entry has its six counts; by name.
fn jobs_status(tj: &Value) -> BTreeMap<String, Value> {
    let entries = tj["status"]["jobsStatus"]
        .as_array()
        .unwrap_or_else(|| panic!("no jobsStatus: {tj:#}"));
    entries
        .iter()
        .map(|e| {
            for k in ["ready", "succeeded", "failed", "active", "suspended"] {
                assert!(e[k].is_i64(), "jobsStatus entry without {k}: {e}");
            }
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e.clone(),
            )
        })
        .collect()
}

/// pi's 4 ranks in the launcher's log, 2 on each node pod, none on the launcher's.
fn check_ranks(sb: &TrainerSandbox, name: &str, nodes: &BTreeMap<String, String>) {
    let launchers = sb.pods(name, "launcher");
    assert_eq!(
        launchers.len(),
        1,
        "one launcher pod\n{}",
        sb.describe(name)
    );
    let log = sb.logs(&pod_name(&launchers[0]));
    let pi =
        check_pi(&log, NODES * PROCS).unwrap_or_else(|e| panic!("{e:#}\n{}", sb.describe(name)));
    assert!(
        !pi.hosts.contains(&hostname(&launchers[0])),
        "a rank on the launcher: {:?}",
        pi.hosts
    );
    assert_eq!(nodes.len(), NODES, "node pods seen: {nodes:?}");
    for host in nodes.values() {
        assert_eq!(
            pi.hosts.iter().filter(|h| *h == host).count(),
            PROCS,
            "{PROCS} ranks on {host}: {:?}\n{log}",
            pi.hosts
        );
    }
}

/// The TrainJob of `case` completes with its ranks on the node pods, with Trainer's status;
/// deleted, nothing of it is left.
async fn completes_and_leaves_nothing(case: &str, image: AppImage) {
    let sb = sandbox(&format!("trainjob-{case}"), case, image).await;
    let name = format!("pi-{case}");
    sb.create(&trainjob(case, &name).unwrap()).unwrap();
    let mut nodes = BTreeMap::new();
    let sshd_before: BTreeSet<u32> = harness::pids_named("sshd").into_iter().collect();
    let mut sshd = BTreeSet::new();
    let tj = sb
        .wait_trainjob(&name, "finished", RUN_SECS, finished, |sb| {
            note_nodes(sb, &name, &mut nodes);
            sshd.extend(
                harness::pids_named("sshd")
                    .into_iter()
                    .filter(|p| !sshd_before.contains(p)),
            );
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(sshd.is_empty(), "an sshd ran: pids {sshd:?}");
    let describe = sb.describe_trainjob(&name).await;
    let complete = condition(&tj, "Complete")
        .unwrap_or_else(|| panic!("not Complete:\n{describe}"))
        .clone();
    assert_eq!(complete["status"], "True", "{describe}");
    let js = sb.cluster.store().get(&JOBSETS, NS, &name).unwrap();
    let completed = condition(&js, "Completed").expect("the JobSet Completed");
    assert_eq!(complete["reason"], completed["reason"], "{describe}");
    assert_eq!(complete["reason"], "AllJobsCompleted", "{describe}");
    let types: Vec<&Value> = tj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["type"])
        .collect();
    assert_eq!(types, ["Complete"], "no other condition: {describe}");
    let jobs = jobs_status(&tj);
    assert_eq!(
        jobs.keys().map(String::as_str).collect::<Vec<_>>(),
        ["launcher", "node"],
        "{describe}"
    );
    assert_eq!(jobs["launcher"]["succeeded"], 1, "{describe}");
    assert_eq!(jobs["launcher"]["failed"], 0, "{describe}");
    check_ranks(&sb, &name, &nodes);

    sb.delete_trainjob(&name).unwrap();
    sb.wait_nothing_left(&name, 60)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmpi_trainjob_completes_with_its_ranks_on_the_node_pods() {
    completes_and_leaves_nothing("openmpi", AppImage::TrixieOpenmpi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpich_trainjob_completes_with_its_ranks_on_the_node_pods() {
    let rt = runtime_file("prrte-k8s-mpich").unwrap();
    assert_eq!(
        rt["spec"]["mlPolicy"]["mpi"]["mpiImplementation"], "OpenMPI",
        "Trainer's CRD and the renderer take only OpenMPI"
    );
    completes_and_leaves_nothing("mpich", AppImage::TrixieMpich).await;
}

/// The pods of the TrainJob `name` (any replicated job).
fn all_pods(sb: &TrainerSandbox, name: &str) -> Vec<String> {
    sb.cluster
        .store()
        .list(&PODS, Some(NS), &Default::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|p| p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == name)
        .map(|p| pod_name(p))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_trainjob_runs_no_pod_until_resumed() {
    let sb = sandbox("trainjob-suspend", "openmpi", AppImage::TrixieOpenmpi).await;
    let name = "pi-suspended";
    let mut tj = trainjob("openmpi", name).unwrap();
    tj["spec"]["suspend"] = json!(true);
    sb.create(&tj).unwrap();
    // Suspended, its Jobs made and suspended (the JobSet counts them), and still no pod.
    let tj = sb
        .wait_trainjob(
            name,
            "suspended with its Jobs suspended",
            60,
            |tj| {
                is_true(tj, "Suspended")
                    && tj["status"]["jobsStatus"].as_array().is_some_and(|js| {
                        js.len() == 2 && js.iter().all(|j| j["suspended"].as_i64() >= Some(1))
                    })
            },
            |sb| {
                let pods = all_pods(sb, name);
                assert!(pods.is_empty(), "pods of a suspended TrainJob: {pods:?}");
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let suspended = condition(&tj, "Suspended").unwrap();
    assert_eq!(suspended["reason"], "Suspended", "{tj:#}");
    let js = sb.cluster.store().get(&JOBSETS, NS, name).unwrap();
    assert_eq!(js["spec"]["suspend"], true, "the JobSet is suspended");
    let types: BTreeSet<&str> = tj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["Suspended"].into(), "{tj:#}");
    assert!(all_pods(&sb, name).is_empty(), "no pod while suspended");

    let ns = NS.to_string();
    sb.kubectl_ok(
        &[
            "patch",
            "trainjob",
            name,
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":false}}"#,
        ],
        None,
    )
    .unwrap();
    let mut nodes = BTreeMap::new();
    let tj = sb
        .wait_trainjob(name, "finished", RUN_SECS, finished, |sb| {
            note_nodes(sb, name, &mut nodes)
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let describe = sb.describe_trainjob(name).await;
    assert!(is_true(&tj, "Complete"), "{describe}");
    let resumed = condition(&tj, "Suspended").unwrap();
    assert_eq!(
        (&resumed["status"], &resumed["reason"]),
        (&json!("False"), &json!("Resumed")),
        "{describe}"
    );
    check_ranks(&sb, name, &nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launcher_that_exits_3_fails_the_trainjob_naming_its_pod_and_code() {
    let sb = sandbox("trainjob-fails", "openmpi", AppImage::TrixieOpenmpi).await;
    let name = "pi-fails";
    let mut tj = trainjob("openmpi", name).unwrap();
    tj["spec"]["trainer"]["command"] = json!(["sh", "-c", "echo giving up; exit 3"]);
    sb.create(&tj).unwrap();
    let tj = sb
        .wait_trainjob(name, "finished", RUN_SECS, finished, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let describe = sb.describe_trainjob(name).await;
    let failed = condition(&tj, "Failed").unwrap_or_else(|| panic!("not Failed:\n{describe}"));
    assert_eq!(failed["status"], "True", "{describe}");
    assert!(condition(&tj, "Complete").is_none(), "{describe}");
    let js = sb.cluster.store().get(&JOBSETS, NS, name).unwrap();
    let js_failed = condition(&js, "Failed").expect("the JobSet Failed");
    assert_eq!(failed["reason"], js_failed["reason"], "{describe}");
    let launchers = sb.pods(name, "launcher");
    assert_eq!(launchers.len(), 1, "{describe}");
    let launcher = pod_name(&launchers[0]);
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&launcher) && message.contains("exit code 3"),
        "the message names the pod {launcher} and exit code 3: {message:?}"
    );
    assert!(
        sb.logs(&launcher).contains("giving up"),
        "{}",
        sb.logs(&launcher)
    );

    sb.delete_trainjob(name).unwrap();
    sb.wait_nothing_left(name, 60)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}
