//! Kubeflow Trainer's MPI TrainJobs on our runtimes (`prrte-config/trainer/`), as Trainer
//! v2.3.0's own controller runs them: Trainer's CRDs installed as published, the
//! ClusterTrainingRuntime and the namespace's ServiceAccount, Role and `mpirun` scripts applied,
//! the TrainJob created, and then what Trainer's controller makes for it
//! (`tests/golden/trainer/<case>/`, derivation in its README) server-side applied with Trainer's
//! field manager. The JobSet completes with 4 ranks on the 2 node pods (2 each, none on the
//! launcher's), every rank's line in the launcher's log, the agent running in every node pod and
//! no sshd anywhere; on Open MPI and on MPICH. A TrainJob of 3 processes on each of 2 nodes,
//! whose node pods have no slots annotation and request no CPU, runs 3 ranks on each node pod:
//! the launcher's `mpirun` script passes Trainer's numProcPerNode on as `ras_k8s_slots`. Without
//! pods: every runtime, and the namespaced TrainingRuntime form of it, is admitted by Trainer's
//! CRDs with strict field validation; the `mpirun` script finds numProcPerNode where Trainer puts
//! it (hostfile, else environment) and leaves a `ras_k8s_slots` of the user's alone.
#![forbid(unsafe_code)]
mod common;

use anyhow::{bail, Context, Result};
use common::jobset::{hostname, pod_name, JobSetSandbox};
use sandbox::app_images::{app_image, check_pi, AppImage};
use sandbox::harness;
use sandbox::harness::mpijob::repo;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
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

/// The sandbox with Trainer's CRDs, the runtime `prrte-k8s-<runtime>` and the namespace's
/// objects.
async fn sandbox_with_runtime(case: &str, runtime: &str) -> Result<JobSetSandbox> {
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
        &read(&trainer_config(&format!("prrte-k8s-{runtime}.yaml")))?,
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

/// Creates the TrainJob of `case` (on the runtime `prrte-k8s-<runtime>`), applies Trainer's
/// objects for it and runs it to its end, checking while it runs that no sshd runs and that the
/// node pods run the agent.
async fn run_case(case: &str, runtime: &str, image: AppImage) -> Result<Finished> {
    app_image(image)?;
    let sb = sandbox_with_runtime(case, runtime).await?;
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

/// `per_node` ranks on each of the 2 node pods in the launcher's log, none on the launcher's;
/// the pods carry what the Kubeflow SDK reads (the JobSet's labels, the completion index, a
/// `node` container).
fn check_ranks(f: &Finished, per_node: usize) {
    let log = f.sb.logs(&pod_name(&f.launcher));
    let pi = check_pi(&log, 2 * per_node)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", f.sb.describe(&f.name)));
    assert!(
        !pi.hosts.contains(&hostname(&f.launcher)),
        "a rank on the launcher: {:?}",
        pi.hosts
    );
    for n in &f.nodes {
        assert_eq!(
            pi.hosts.iter().filter(|h| **h == hostname(n)).count(),
            per_node,
            "{per_node} ranks on {}: {:?}\n{log}",
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
    let f = run_case("openmpi", "openmpi", AppImage::TrixieOpenmpi)
        .await
        .unwrap();
    check_ranks(&f, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpich_trainjob_runs_its_ranks_on_the_node_pods_without_sshd() {
    let f = run_case("mpich", "mpich", AppImage::TrixieMpich)
        .await
        .unwrap();
    check_ranks(&f, 2);
}

/// numProcPerNode 3 on node pods that would offer 1 slot each by their CPU requests (none) and
/// carry no slots annotation: 3 ranks on each, as Trainer's hostfile says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn num_proc_per_node_ranks_run_on_each_node_pod_whatever_their_cpu_requests() {
    let tj: Value =
        serde_yaml::from_str(&read(&golden("openmpi-procs", "trainjob.yaml")).unwrap()).unwrap();
    assert_eq!(tj["spec"]["trainer"]["numProcPerNode"], 3);
    assert!(tj["spec"]["runtimePatches"].is_null());
    let js: Value =
        serde_yaml::from_str(&read(&golden("openmpi-procs", "jobset.yaml")).unwrap()).unwrap();
    let node = js["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "node")
        .unwrap();
    let pod = &node["template"]["spec"]["template"];
    assert!(pod["metadata"]["annotations"].is_null(), "{pod}");
    for c in pod["spec"]["containers"].as_array().unwrap() {
        assert!(c["resources"].is_null(), "{c}");
    }
    let f = run_case("openmpi-procs", "openmpi", AppImage::TrixieOpenmpi)
        .await
        .unwrap();
    check_ranks(&f, 3);
}

/// The launcher's `mpirun` script of namespace.yaml with its absolute paths moved under `dir`:
/// the agent a script that prints the `ras_k8s_slots` it gets and its arguments, the hostfile
/// `dir/hostfile`, and an `mpirun` of the image next on PATH.
fn wrapper_in(dir: &Path) -> PathBuf {
    let text = read(&trainer_config("namespace.yaml")).unwrap();
    let script = serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "ConfigMap")
        .and_then(|cm| cm["data"]["mpirun"].as_str().map(str::to_owned))
        .expect("namespace.yaml has the mpirun script");
    let hostfile = dir.join("hostfile").display().to_string();
    let agent = dir.join("agent").display().to_string();
    assert!(script.contains("/etc/mpi/hostfile") && script.contains("/opt/prrte-k8s/bin/"));
    let script = script
        .replace("/etc/mpi/hostfile", &hostfile)
        .replace("/opt/prrte-k8s/bin/prrte-k8s-agent", &agent);
    let write = |path: PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    write(
        dir.join("agent"),
        "#!/bin/sh\necho \"slots=${PRTE_MCA_ras_k8s_slots-unset} $*\"\n",
    );
    write(dir.join("image/mpirun"), "#!/bin/sh\n");
    write(dir.join("wrap/mpirun"), &script)
}

/// What the agent got from the script: `slots=<PRTE_MCA_ras_k8s_slots or unset> <arguments>`.
fn through_wrapper(
    dir: &Path,
    hostfile: Option<&str>,
    env: &[(&str, &str)],
    args: &[&str],
) -> String {
    let path = dir.join("hostfile");
    match hostfile {
        Some(text) => std::fs::write(&path, text).unwrap(),
        None => {
            let _ = std::fs::remove_file(&path);
        }
    }
    let out = std::process::Command::new(dir.join("wrap/mpirun"))
        .args(args)
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}:/usr/bin:/bin",
                dir.join("wrap").display(),
                dir.join("image").display()
            ),
        )
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

#[test]
fn the_mpirun_script_passes_num_proc_per_node_on_as_ras_k8s_slots() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    wrapper_in(dir);
    let hostfile = dir.join("hostfile").display().to_string();
    let mpirun = dir.join("image/mpirun").display().to_string();
    let default_slots = [("OMPI_MCA_orte_set_default_slots", "4")];
    let agreeing = "a.t slots=3\nb.t slots=3\n";
    // Trainer's hostfile, whose lines agree, wins over its environment; the option naming it
    // is dropped.
    assert_eq!(
        through_wrapper(
            dir,
            Some(agreeing),
            &default_slots,
            &["--hostfile", &hostfile, "-n", "6", "pi"]
        ),
        format!("slots=3 --run -- {mpirun} -n 6 pi")
    );
    // Hydra's `HOST:N` lines, comments and blank lines.
    assert_eq!(
        through_wrapper(dir, Some("a.t:5\n\n# all\nb.t:5 # b\n"), &[], &["pi"]),
        format!("slots=5 --run -- {mpirun} pi")
    );
    // Lines that disagree, or one without a count: the environment's count, else none.
    for text in [
        "a.t slots=3\nb.t slots=2\n",
        "a.t slots=3\nb.t\n",
        "a.t slots=0\n",
        "",
    ] {
        assert_eq!(
            through_wrapper(dir, Some(text), &default_slots, &["pi"]),
            format!("slots=4 --run -- {mpirun} pi"),
            "{text:?}"
        );
        assert_eq!(
            through_wrapper(dir, Some(text), &[], &["pi"]),
            format!("slots=unset --run -- {mpirun} pi"),
            "{text:?}"
        );
    }
    assert_eq!(
        through_wrapper(dir, None, &default_slots, &["pi"]),
        format!("slots=4 --run -- {mpirun} pi")
    );
    // A glob in the hostfile is not expanded.
    assert_eq!(
        through_wrapper(dir, Some("* slots=2\n/* slots=2\n"), &[], &["pi"]),
        format!("slots=2 --run -- {mpirun} pi")
    );
    // The user's ras_k8s_slots, in the environment or on the command line, stays.
    assert_eq!(
        through_wrapper(
            dir,
            Some(agreeing),
            &[("PRTE_MCA_ras_k8s_slots", "cpu")],
            &["pi"]
        ),
        format!("slots=cpu --run -- {mpirun} pi")
    );
    assert_eq!(
        through_wrapper(
            dir,
            Some(agreeing),
            &[],
            &["--prtemca", "ras_k8s_slots", "one", "pi"]
        ),
        format!("slots=unset --run -- {mpirun} --prtemca ras_k8s_slots one pi")
    );
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
