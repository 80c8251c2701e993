//! The Kubeflow SDK (PyPI `kubeflow`, in the venv `prrte-config/setup.sh` makes) against the
//! sandbox API server alone, Trainer v2.3.0's CRDs installed as published: its calls give what
//! they give against a Kubernetes API server. `tests/python/trainer_sdk_api.py` plays the
//! controller and the kubelet with the official Python client (pods labelled as a TrainJob's
//! JobSet labels them, their phases, an event, the TrainJob's `Complete` condition) between the
//! SDK's calls, and reports each; the pod log is a file the server serves.
#![forbid(unsafe_code)]

mod common;

use common::api::{admin, make_ns};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use sandbox::api::{ApiOptions, ApiServer};
use sandbox::harness::unique;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Kubeflow SDK prrte-config/setup.sh installs (keep equal to its KUBEFLOW_SDK).
const KUBEFLOW_SDK: &str = "0.5.0";
const RUNTIME: &str = "sdk-openmpi";

fn kubeflow_python() -> PathBuf {
    PathBuf::from(std::env::var("PRRTE_K8S_ROOT").unwrap_or_else(|_| "/opt/prrte-k8s".into()))
        .join(format!("venv-kubeflow-{KUBEFLOW_SDK}"))
        .join("bin/python")
}

/// A ClusterTrainingRuntime of the shape of prrte-k8s's: MPI, a launcher with the ancestor
/// label and a `node` job, both with a `node` container.
fn runtime() -> Value {
    let job = |name: &str, ancestor: bool| {
        let labels = if ancestor {
            json!({"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"})
        } else {
            json!({})
        };
        json!({"name": name, "template": {"metadata": {"labels": labels}, "spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "localhost/prrte-k8s-app/trixie-openmpi-python:latest"}]
        }}}}})
    };
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {"trainer.kubeflow.org/framework": "openmpi"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 2, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/etc/prrte-k8s/ssh-auth"}},
            "template": {"spec": {"replicatedJobs": [job("launcher", true), job("node", false)]}},
        },
    })
}

async fn install(c: &kube::Client) {
    let crds: Api<DynamicObject> = Api::all_with(
        c.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    for f in sandbox::harness::trainer::trainer_crds().expect("Trainer's CRDs") {
        let text = std::fs::read_to_string(&f).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc).unwrap();
            if !v.is_null() {
                crds.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            }
        }
    }
    let runtimes: Api<DynamicObject> = Api::all_with(
        c.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"),
            "clustertrainingruntimes",
        ),
    );
    runtimes
        .create(
            &PostParams::default(),
            &serde_json::from_value(runtime()).unwrap(),
        )
        .await
        .unwrap();
}

/// Runs the SDK script; its reports by call.
async fn run_script(python: &Path, kubeconfig: &Path, ns: &str) -> BTreeMap<String, Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/trainer_sdk_api.py");
    let mut cmd = std::process::Command::new(python);
    cmd.arg(script).arg(kubeconfig).args([ns, RUNTIME]);
    let out = tokio::task::spawn_blocking(move || {
        sandbox::harness::run_with_timeout(cmd, Duration::from_secs(120))
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            (v["call"].as_str().unwrap().to_string(), v["value"].clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_calls_against_the_api_server() {
    let python = kubeflow_python();
    if !python.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing: prrte-config/setup.sh installs the Kubeflow SDK",
            python.display()
        );
        eprintln!(
            "skipped: {} is missing (prrte-config/setup.sh installs the Kubeflow SDK {KUBEFLOW_SDK})",
            python.display()
        );
        return;
    }
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("launcher.log");
    std::fs::write(&log, "rank 0\nrank 1\nrank 2\nrank 3\n").unwrap();
    let served = log.clone();
    server.set_log_source(move |_, name, container| {
        (name.contains("-launcher-") && container == "node").then(|| served.clone())
    });
    let c = admin(&server).await;
    install(&c).await;
    let ns = unique("sdk");
    make_ns(&c, &ns).await;
    let r = run_script(&python, server.admin_kubeconfig(), &ns).await;

    assert_eq!(r["list_runtimes"], json!([[RUNTIME, "openmpi", 1]]));
    assert_eq!(
        r["get_runtime"],
        json!([
            RUNTIME,
            "mpirun",
            "localhost/prrte-k8s-app/trixie-openmpi-python:latest"
        ])
    );
    let name = r["train"]["name"].as_str().unwrap().to_string();
    let spec = &r["train"]["spec"];
    // the API server defaulted what the SDK left out, as the CRD says
    assert_eq!(
        spec["managedBy"],
        "trainer.kubeflow.org/trainjob-controller"
    );
    assert_eq!(spec["runtimeRef"]["apiGroup"], "trainer.kubeflow.org");
    assert_eq!(spec["runtimeRef"]["kind"], "ClusterTrainingRuntime");
    assert_eq!(spec["trainer"]["numNodes"], 2);
    assert_eq!(
        spec["trainer"]["command"].as_array().unwrap()[..3],
        ["mpirun", "--hostfile", "/etc/mpi/hostfile"]
    );
    assert_eq!(r["list_jobs"], json!([name]));
    assert_eq!(
        r["get_job created"],
        json!({"status": "Created", "steps": []})
    );
    // the set-based selector takes the launcher and node pods, not another replicated job's or
    // another JobSet's; the launcher is node-0, the node pods node-1 and node-2
    let launcher = format!("{name}-launcher-0-0");
    let steps = |phase: &str| {
        json!([
            ["node-0", launcher, phase],
            ["node-1", format!("{name}-node-0-0"), phase],
            ["node-2", format!("{name}-node-0-1"), phase],
        ])
    };
    // (the SDK counts the launcher, node-0, among the nodes: with a launcher of its own beside
    // numNodes node pods, 3 running steps are not its 2 nodes, and the job stays "Created"
    // until a condition says more, as against any cluster)
    assert_eq!(
        r["get_job running"],
        json!({"status": "Created", "steps": steps("Running")})
    );
    assert_eq!(r["get_job_events"], json!([[launcher, "Started"]]));
    assert_eq!(
        r["wait_for_job_status"],
        json!({"status": "Complete", "steps": steps("Succeeded")})
    );
    let ranks = json!(["rank 0", "rank 1", "rank 2", "rank 3"]);
    assert_eq!(r["get_job_logs"], ranks);
    assert_eq!(r["get_job_logs follow"], ranks);
    assert!(
        r["get_job deleted"]
            .as_str()
            .is_some_and(|e| e.contains("Failed to get TrainJob")),
        "{}",
        r["get_job deleted"]
    );
    assert_eq!(r["list_jobs deleted"], json!([]));
    // the pods were the script's: they stay (no controller owns them here)
    let pods: Api<Pod> = Api::namespaced(c, &ns);
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 5);
}
