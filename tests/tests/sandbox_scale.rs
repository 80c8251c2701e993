//! Scaling workloads as Kubernetes does, through the sandbox API server and its controllers
//! (no pods run): `kubectl patch` of an Indexed Job's parallelism and completions, `kubectl
//! scale` of a StatefulSet (the `scale` subresource), and kube-rs doing the same.
#![forbid(unsafe_code)]

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use sandbox::api::{ApiOptions, ApiServer};
use sandbox::harness::unique;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

async fn admin(server: &ApiServer) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(server.admin_kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// Runs kubectl against the server in `ns`; (success, stdout, stderr).
async fn kubectl(
    kubectl: &Path,
    server: &ApiServer,
    cache: &Path,
    ns: &str,
    args: &[&str],
) -> (bool, String, String) {
    let out = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(server.admin_kubeconfig())
        .arg("--cache-dir")
        .arg(cache)
        .args(["-n", ns])
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until the pods matching `selector` carry exactly the values `want` of `key` (a label).
async fn await_pod_labels(pods: &Api<Pod>, selector: &str, key: &str, want: &[&str]) {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut got: Vec<String> = pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(|p| p.metadata.labels.as_ref()?.get(key).cloned())
            .collect();
        got.sort_by_key(|s| s.parse::<i64>().unwrap_or(i64::MAX));
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pods {selector}: {key} = {got:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn indexed_job(name: &str, n: i64) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"completionMode": "Indexed", "completions": n, "parallelism": n,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "none", "command": ["sleep", "100"]}]}}}
    }))
    .unwrap()
}

fn parallel_sts(name: &str, n: i64) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": n, "podManagementPolicy": "Parallel", "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "c", "image": "none", "command": ["sleep", "100"]}]}}}
    }))
    .unwrap()
}

const INDEX: &str = "batch.kubernetes.io/job-completion-index";
const ORDINAL: &str = "apps.kubernetes.io/pod-index";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_grows_indexed_jobs_and_statefulsets() {
    let kubectl_bin = sandbox::harness::kubectl::all()
        .into_iter()
        .next_back()
        .expect("no kubectl found: set PRRTE_K8S_KUBECTL or put kubectl on PATH");
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let controllers = sandbox::cluster::controllers::spawn(server.store().clone());
    let c = admin(&server).await;
    let cache = tempfile::tempdir().unwrap();
    let ns = unique("scale");
    Api::<Namespace>::all(c.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(c.clone(), &ns);
    jobs.create(&PostParams::default(), &indexed_job("j", 4))
        .await
        .unwrap();
    await_pod_labels(&pods, "job-name=j", INDEX, &["0", "1", "2", "3"]).await;
    let run = |args: &'static [&'static str]| {
        let (k, s, cache, ns) = (
            kubectl_bin.clone(),
            &server,
            cache.path().to_path_buf(),
            ns.clone(),
        );
        async move { kubectl(&k, s, &cache, &ns, args).await }
    };

    // Completions alone cannot change, not even for an Indexed Job: only in tandem.
    let (ok, _, err) = run(&[
        "patch",
        "job",
        "j",
        "--type=merge",
        "-p",
        r#"{"spec":{"completions":6}}"#,
    ])
    .await;
    assert!(!ok, "completions alone changed");
    assert!(
        err.contains("spec.completions") && err.contains("in tandem with spec.parallelism"),
        "{err}"
    );
    // In tandem: the two missing indexes are made, the first four untouched.
    let before: Vec<String> = pods
        .list(&ListParams::default().labels("job-name=j"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    let (ok, _, err) = run(&[
        "patch",
        "job",
        "j",
        "--type=merge",
        "-p",
        r#"{"spec":{"parallelism":6,"completions":6}}"#,
    ])
    .await;
    assert!(ok, "kubectl patch: {err}");
    await_pod_labels(&pods, "job-name=j", INDEX, &["0", "1", "2", "3", "4", "5"]).await;
    let after: Vec<String> = pods
        .list(&ListParams::default().labels("job-name=j"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    assert!(
        before.iter().all(|u| after.contains(u)),
        "a first pod was replaced"
    );
    // kube-rs, a merge patch of both: one more.
    jobs.patch(
        "j",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"parallelism": 7, "completions": 7}})),
    )
    .await
    .unwrap();
    await_pod_labels(
        &pods,
        "job-name=j",
        INDEX,
        &["0", "1", "2", "3", "4", "5", "6"],
    )
    .await;
    // A non-indexed Job's completions are immutable.
    let mut plain = indexed_job("plain", 2);
    plain.spec.as_mut().unwrap().completion_mode = Some("NonIndexed".into());
    jobs.create(&PostParams::default(), &plain).await.unwrap();
    let (ok, _, err) = run(&[
        "patch",
        "job",
        "plain",
        "--type=merge",
        "-p",
        r#"{"spec":{"parallelism":3,"completions":3}}"#,
    ])
    .await;
    assert!(!ok && err.contains("field is immutable"), "{err}");

    // StatefulSet: kubectl scale (the scale subresource), then kube-rs's patch_scale.
    let sts: Api<StatefulSet> = Api::namespaced(c.clone(), &ns);
    sts.create(&PostParams::default(), &parallel_sts("s", 2))
        .await
        .unwrap();
    await_pod_labels(&pods, "app=s", ORDINAL, &["0", "1"]).await;
    let (ok, out, err) = run(&["scale", "statefulset", "s", "--replicas=4"]).await;
    assert!(ok, "kubectl scale: {err}");
    assert!(out.contains("scaled"), "{out}");
    await_pod_labels(&pods, "app=s", ORDINAL, &["0", "1", "2", "3"]).await;
    let (ok, _, err) = run(&[
        "scale",
        "statefulset",
        "s",
        "--current-replicas=3",
        "--replicas=5",
    ])
    .await;
    assert!(
        !ok && err.contains("Expected replicas to be 3"),
        "a wrong --current-replicas: {err}"
    );
    let scale = sts.get_scale("s").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(4));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=s"));
    sts.patch_scale(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    await_pod_labels(&pods, "app=s", ORDINAL, &["0", "1", "2", "3", "4"]).await;
    let e = sts
        .patch_scale(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -1}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 422 && s.message.contains("spec.replicas")),
        "{e:?}"
    );
    controllers.abort();
}
