//! The controller with the launcher in a pod of its own (`--launcher-pod jobset`), end to end:
//! each MPIJob with workers gets a JobSet (replicated jobs `launcher` and `worker`), the
//! launcher's pod from the Launcher's template and the workers' from the Worker's. The usual
//! GPU MPIJob (a small launcher of another image, workers with more) succeeds with each pod as
//! its template says, its `replicaStatuses` selecting by replicated job. The controller runs
//! as a process of this build against a sandbox of its own, which serves JobSets
//! (`common::controller`); `kubectl` is the real one.
#![forbid(unsafe_code)]
mod common;

use common::controller::{container, counts, pi, tag, Sandbox};
use sandbox::app_images::AppImage;
use serde_json::{json, Value};

/// The launcher's image in the GPU-style MPIJob: the tests' Open MPI image under another name.
const LAUNCHER_IMAGE: &str = "docker.io/example/mpi-launcher:cpu";
const REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// The image and cpu limit of the pod's application container (the one of the MPIJob's
/// image, not the runtime's init container).
fn app(p: &Value) -> (String, String) {
    let c = p["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "mpi"))
        .cloned()
        .unwrap_or_default();
    (
        c["image"].as_str().unwrap_or("").to_string(),
        c["resources"]["limits"]["cpu"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// A GPU-style MPIJob (launcher `cpu: 1` of another image, workers `cpu: 2`): a JobSet whose
/// launcher pod is the Launcher's template and whose workers are the Worker's; `Succeeded`,
/// pi's output in the launcher's log, the counts mpi-operator's, the selectors naming the
/// replicated job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_style_mpijob_gets_its_launchers_own_pod_and_succeeds() {
    let sb = Sandbox::start_with("ctl-js-gpu", "jobset").await;
    tag(AppImage::TrixieOpenmpi, LAUNCHER_IMAGE).unwrap();
    sb.apply(&pi("gpu", |v| {
        let l = container(v, "Launcher");
        l["image"] = json!(LAUNCHER_IMAGE);
        l["resources"]["limits"] = json!({"cpu": "1", "memory": "1Gi"});
        container(v, "Worker")["resources"]["limits"] = json!({"cpu": "2", "memory": "2Gi"});
    }));
    let done = sb.wait("gpu", "Succeeded", 300);
    assert!(Sandbox::condition(&done, "Failed").is_none());
    let js = sb.kubectl_ok(&["get", "jobset", "gpu", "-o", "json"], None);
    let js: Value = serde_json::from_str(&js).unwrap();
    assert_eq!(js["metadata"]["ownerReferences"][0]["kind"], "MPIJob");
    assert!(
        sb.kubectl(&["get", "job", "gpu"], None)
            .is_ok_and(|o| !o.status.success()),
        "no Indexed Job of the MPIJob's name"
    );
    let pods = sb.pod_objects("gpu");
    let role = |p: &Value| {
        p["metadata"]["labels"][REPLICATED_JOB]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let launchers: Vec<&Value> = pods.iter().filter(|p| role(p) == "launcher").collect();
    let workers: Vec<&Value> = pods.iter().filter(|p| role(p) == "worker").collect();
    assert_eq!(launchers.len(), 1, "{}", sb.describe("gpu"));
    assert_eq!(workers.len(), 2, "{}", sb.describe("gpu"));
    assert_eq!(
        app(launchers[0]),
        (LAUNCHER_IMAGE.to_string(), "1".to_string())
    );
    for w in &workers {
        let (image, cpu) = app(w);
        assert_ne!(image, LAUNCHER_IMAGE);
        assert_eq!(cpu, "2");
    }
    let launcher_pod = launchers[0]["metadata"]["name"].as_str().unwrap();
    let log = sb.logs(launcher_pod);
    assert!(log.contains("pi is approximately"), "{log}");
    let settled = sb.wait_counts("gpu", [(0, 1, 0), (0, 0, 0)]);
    let sel = |r: &str| settled["status"]["replicaStatuses"][r]["selector"].clone();
    assert_eq!(
        sel("Launcher"),
        json!(format!("prrte-k8s.io/job=gpu,{REPLICATED_JOB}=launcher"))
    );
    assert_eq!(
        sel("Worker"),
        json!(format!("prrte-k8s.io/job=gpu,{REPLICATED_JOB}=worker"))
    );
    assert_eq!(counts(&settled), [(0, 1, 0), (0, 0, 0)]);
    sb.shutdown();
}
