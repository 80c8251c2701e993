//! A Deployment on a whole sandbox cluster, as a controller's is run: its pods run on the
//! node, `kubectl rollout status` waits for them, a deleted pod is replaced by a new one that
//! runs, and deleting the Deployment stops every pod and process of it. Needs root.
#![forbid(unsafe_code)]

use sandbox::api::resources::PODS;
use sandbox::api::ListQuery;
use sandbox::cluster::{pod_ready, Cluster, ClusterOptions};
use sandbox::harness::unique;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_keeps_its_pods_running() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let name = unique("deploy");
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - {{name: main, image: none, command: [sleep, infinity]}}
"#
        ))
        .unwrap();
    let selector = format!("app={name}");
    let pods = cluster
        .wait_ready("default", &selector, 2, WAIT)
        .await
        .unwrap();
    let (ok, out, err) = sandbox::harness::kubectl::run(
        &cluster,
        &[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=30s",
        ],
    );
    assert!(ok && out.contains("successfully rolled out"), "{out} {err}");
    let row = sandbox::harness::kubectl::get_row(&cluster, "deployment", &name);
    assert!(
        row.iter().any(|(h, v)| h == "READY" && v == "2/2"),
        "{row:?}"
    );

    // A pod deleted: it stops, and a new one runs in its place.
    let victim = pods[0]["metadata"]["name"].as_str().unwrap().to_string();
    let victim_pids = cluster.pod_host_pids(&victim).unwrap();
    assert!(!victim_pids.is_empty());
    sandbox::harness::kubectl::run_ok(&cluster, &["delete", "pod", &victim, "--wait=false"]);
    let now = sandbox::cluster::wait_pods(&cluster.store(), "default", &selector, WAIT, |ps| {
        let fresh: Vec<_> = ps
            .iter()
            .filter(|p| p["metadata"]["name"] != victim.as_str() && pod_ready(p))
            .cloned()
            .collect();
        (fresh.len() == 2).then_some(fresh)
    })
    .await
    .unwrap();
    assert_eq!(now.len(), 2);
    let deadline = Instant::now() + WAIT;
    while victim_pids
        .iter()
        .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    {
        assert!(
            Instant::now() < deadline,
            "the deleted pod's processes still run"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The Deployment deleted: its ReplicaSet and pods go, and so do their processes.
    let pids: Vec<u32> = now
        .iter()
        .flat_map(|p| {
            cluster
                .pod_host_pids(p["metadata"]["name"].as_str().unwrap())
                .unwrap()
        })
        .collect();
    sandbox::harness::kubectl::run_ok(&cluster, &["delete", "deployment", &name]);
    let deadline = Instant::now() + WAIT;
    loop {
        let left = cluster
            .store()
            .list(&PODS, Some("default"), &ListQuery::default())
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p["metadata"]["labels"]["app"] == name.as_str())
            .count();
        let running = pids
            .iter()
            .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
            .count();
        if left == 0 && running == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} pods and {running} processes of the deleted Deployment remain"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.shutdown().unwrap();
}
