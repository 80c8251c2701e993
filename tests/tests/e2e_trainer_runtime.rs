//! Kubeflow Trainer's MPI TrainJobs on our runtimes (`prrte-config/trainer/`), as Trainer
//! v2.3.0's own controller runs them: Trainer's CRDs installed as published, the
//! ClusterTrainingRuntime and the namespace's ServiceAccount, Role and `mpirun` scripts applied,
//! the TrainJob created, and then what Trainer's controller makes for it
//! (`tests/golden/trainer/<case>/`, derivation in its README) server-side applied with Trainer's
//! field manager. The JobSet completes with 4 ranks on the 2 node pods (2 each, none on the
//! launcher's), every rank's line in the launcher's log, the agent running in every node pod and
//! no sshd anywhere; on Open MPI and on MPICH. Without pods: every runtime, and the namespaced
//! TrainingRuntime form of it, is admitted by Trainer's CRDs with strict field validation.
#![forbid(unsafe_code)]
mod common;

use anyhow::{bail, Context, Result};
use common::jobset::{hostname, pod_name, JobSetSandbox};
use sandbox::app_images::{app_image, check_pi, AppImage};
use sandbox::harness;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const NS: &str = "default";
/// The golden objects of a case, in the order they are applied (Trainer's controller writes
/// the snapshot first, then the MPI plugin's objects, then the JobSet).
const OBJECTS: &[&str] = &[
    "configmap-runtime-snapshot.yaml",
    "secret-mpi-ssh-auth.yaml",
    "configmap-mpi-hostfile.yaml",
    "jobset.yaml",
];
/// The placeholder of the TrainJob's uid in the golden objects.
const UID_PLACEHOLDER: &str = "TRAINJOB-UID";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

fn trainer_config(file: &str) -> PathBuf {
    repo().join("prrte-config/trainer").join(file)
}

fn golden(case: &str, file: &str) -> PathBuf {
    repo().join("tests/golden/trainer").join(case).join(file)
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

/// Trainer's CRDs (`kubectl create`: too large for client-side apply's annotation).
fn install_trainer_crds(sb: &JobSetSandbox) -> Result<()> {
    for f in harness::trainer::trainer_crds()? {
        let f = f.display().to_string();
        sb.kubectl_ok(&["create", "-f", &f], None)?;
    }
    Ok(())
}

/// `kubectl apply --server-side` of `yaml` as `manager`, with strict field validation.
fn apply(sb: &JobSetSandbox, yaml: &str, manager: &str) -> Result<String> {
    sb.kubectl_ok(
        &[
            "apply",
            "--server-side",
            "--validate=strict",
            "--field-manager",
            manager,
            "-n",
            NS,
            "-f",
            "-",
        ],
        Some(yaml),
    )
}

/// The sandbox with Trainer's CRDs, the runtime of `case` and the namespace's objects.
async fn sandbox_with_runtime(case: &str) -> Result<JobSetSandbox> {
    let sb = JobSetSandbox::start(
        &format!("trainer-{case}"),
        NS,
        &["launcher", "node"],
        "node",
    )
    .await?;
    install_trainer_crds(&sb)?;
    apply(
        &sb,
        &read(&trainer_config(&format!("prrte-k8s-{case}.yaml")))?,
        "kubectl",
    )?;
    apply(&sb, &read(&trainer_config("namespace.yaml"))?, "kubectl")?;
    Ok(sb)
}

/// What a TrainJob's run left to check.
struct Finished {
    sb: JobSetSandbox,
    name: String,
    launcher: Value,
    nodes: Vec<Value>,
}

/// Creates the TrainJob of `case`, applies Trainer's objects for it and runs it to its end,
/// checking while it runs that no sshd runs and that the node pods run the agent.
async fn run_case(case: &str, image: AppImage) -> Result<Finished> {
    app_image(image)?;
    let sb = sandbox_with_runtime(case).await?;
    let trainjob = read(&golden(case, "trainjob.yaml"))?;
    sb.kubectl_ok(&["create", "-f", "-"], Some(&trainjob))?;
    let tj: Value = serde_yaml::from_str(&trainjob)?;
    let name = tj["metadata"]["name"]
        .as_str()
        .context("the TrainJob has a name")?
        .to_string();
    let uid = sb.kubectl_ok(
        &[
            "get",
            "trainjob",
            &name,
            "-n",
            NS,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    )?;
    if uid.trim().is_empty() {
        bail!("TrainJob {name} has no uid");
    }
    for file in OBJECTS {
        let text = read(&golden(case, file))?;
        if !text.contains(UID_PLACEHOLDER) {
            bail!("{file} names no owner {UID_PLACEHOLDER}");
        }
        apply(&sb, &text.replace(UID_PLACEHOLDER, uid.trim()), "trainer")?;
    }
    let sshd_before: BTreeSet<u32> = harness::pids_named("sshd").into_iter().collect();
    let mut agents_seen = BTreeSet::new();
    let ended = sb.wait_finished_checking(&name, 240, || {
        let new_sshd: Vec<u32> = harness::pids_named("sshd")
            .into_iter()
            .filter(|p| !sshd_before.contains(p))
            .collect();
        if !new_sshd.is_empty() {
            bail!("an sshd runs: pids {new_sshd:?}");
        }
        for p in sb.pods(&name, "node") {
            let pod = pod_name(&p);
            for pid in sb.cluster.pod_host_pids(&pod).unwrap_or_default() {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                match comm.trim_end() {
                    "sshd" => bail!("sshd in pod {pod}"),
                    "prrte-k8s-agent" => {
                        agents_seen.insert(pod.clone());
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    })?;
    if ended != "Completed" {
        bail!("JobSet {name} ended {ended}\n{}", sb.describe(&name));
    }
    let launchers = sb.pods(&name, "launcher");
    let nodes = sb.pods(&name, "node");
    if (launchers.len(), nodes.len()) != (1, 2) {
        bail!(
            "{} launcher and {} node pods\n{}",
            launchers.len(),
            nodes.len(),
            sb.describe(&name)
        );
    }
    let seen: Vec<String> = agents_seen.into_iter().collect();
    let node_names: Vec<String> = nodes.iter().map(|p| pod_name(p)).collect();
    if seen != node_names {
        bail!("the agent was seen running in {seen:?}, not in every node pod {node_names:?}");
    }
    Ok(Finished {
        launcher: (*launchers[0]).clone(),
        nodes: nodes.iter().map(|p| (**p).clone()).collect(),
        name,
        sb,
    })
}

/// 4 ranks in the launcher's log, 2 on each node pod, none on the launcher's; the pods carry
/// what the Kubeflow SDK reads (the JobSet's labels, the completion index, a `node` container).
fn check_ranks(f: &Finished) {
    let log = f.sb.logs(&pod_name(&f.launcher));
    let pi = check_pi(&log, 4).unwrap_or_else(|e| panic!("{e:#}\n{}", f.sb.describe(&f.name)));
    assert!(
        !pi.hosts.contains(&hostname(&f.launcher)),
        "a rank on the launcher: {:?}",
        pi.hosts
    );
    for n in &f.nodes {
        assert_eq!(
            pi.hosts.iter().filter(|h| **h == hostname(n)).count(),
            2,
            "2 ranks on {}: {:?}\n{log}",
            hostname(n),
            pi.hosts
        );
    }
    for p in f.nodes.iter().chain([&f.launcher]) {
        let labels = &p["metadata"]["labels"];
        assert_eq!(labels["jobset.sigs.k8s.io/jobset-name"], f.name.as_str());
        assert!(
            labels["batch.kubernetes.io/job-completion-index"].is_string(),
            "{labels}"
        );
        assert_eq!(p["spec"]["containers"][0]["name"], "node");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmpi_trainjob_runs_its_ranks_on_the_node_pods_without_sshd() {
    let f = run_case("openmpi", AppImage::TrixieOpenmpi).await.unwrap();
    check_ranks(&f);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpich_trainjob_runs_its_ranks_on_the_node_pods_without_sshd() {
    let f = run_case("mpich", AppImage::TrixieMpich).await.unwrap();
    check_ranks(&f);
}

/// Every runtime we ship, and its namespaced TrainingRuntime form (the same object with
/// `kind: TrainingRuntime` in a namespace), is admitted by Trainer's CRDs with strict field
/// validation; the SDK's conditions for listing it hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_are_admitted_by_trainers_crds() {
    let sb = JobSetSandbox::start("trainer-runtimes", NS, &[], "node")
        .await
        .unwrap();
    install_trainer_crds(&sb).unwrap();
    for case in ["openmpi", "mpich", "intelmpi"] {
        let text = read(&trainer_config(&format!("prrte-k8s-{case}.yaml"))).unwrap();
        let rt: Value = serde_yaml::from_str(&text).unwrap();
        let framework = &rt["metadata"]["labels"]["trainer.kubeflow.org/framework"];
        assert!(framework.is_string() && framework != "torchtune", "{case}");
        assert!(rt["spec"]["mlPolicy"]["mpi"].is_object(), "{case}");
        let trainer_jobs: Vec<&Value> = rt["spec"]["template"]["spec"]["replicatedJobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| {
                j["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"]
                    == "trainer"
            })
            .collect();
        assert_eq!(trainer_jobs.len(), 1, "{case}");
        let c = &trainer_jobs[0]["template"]["spec"]["template"]["spec"]["containers"][0];
        assert!(c["name"] == "node" && c["image"].is_string(), "{case}");
        apply(&sb, &text, "kubectl").unwrap();
        let namespaced = text.replace("kind: ClusterTrainingRuntime", "kind: TrainingRuntime");
        assert_ne!(namespaced, text);
        apply(&sb, &namespaced, "kubectl").unwrap();
        let got = sb
            .kubectl_ok(
                &[
                    "get",
                    "trainingruntime",
                    &format!("prrte-k8s-{case}"),
                    "-n",
                    NS,
                    "-o",
                    "jsonpath={.spec.mlPolicy.mpi.sshAuthMountPath}",
                ],
                None,
            )
            .unwrap();
        assert_eq!(got, "/etc/prrte-k8s/ssh-auth", "{case}");
    }
    // A field the schema does not know is refused, as a real API server refuses it.
    let text = read(&trainer_config("prrte-k8s-openmpi.yaml")).unwrap();
    let bad = text.replace(
        "runLauncherAsNode: false",
        "runLauncherAsNode: false\n      launcher: sshd",
    );
    assert_ne!(bad, text);
    let e = apply(&sb, &bad, "kubectl").unwrap_err();
    assert!(format!("{e:#}").contains("launcher"), "{e:#}");
    apply(
        &sb,
        &read(&trainer_config("namespace.yaml")).unwrap(),
        "kubectl",
    )
    .unwrap();
}
