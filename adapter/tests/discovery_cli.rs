//! `prrte-k8s pods` against the sandbox API server.
#![forbid(unsafe_code)]

mod discovery_support;

use std::process::Output;

use discovery_support::Fixture;
use prrte_k8s::discovery::Allocation;
use serde_json::json;

async fn run(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_prrte-k8s"))
            .args(&args)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("PRRTE_K8S_LOG", "off")
            .output()
            .expect("run prrte-k8s")
    })
    .await
    .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn fixture_with_pods() -> Fixture {
    let f = Fixture::new("cli").await;
    for (i, slots) in [(0, "2"), (1, "3"), (10, "1"), (2, "4")] {
        let name = format!("rank-{i}");
        f.create_pod(
            &name,
            json!({"app": "cli"}),
            json!({"metadata": {"annotations": {"prrte.k8s.io/slots": slots}}}),
        )
        .await;
        f.make_ready(&name, &format!("10.20.0.{}", i + 1)).await;
    }
    f
}

fn base_args(f: &Fixture) -> Vec<String> {
    vec![
        "pods".into(),
        "--kubeconfig".into(),
        f.server.admin_kubeconfig().display().to_string(),
        "--namespace".into(),
        "cli".into(),
        "--selector".into(),
        "app=cli".into(),
        "--timeout".into(),
        "20".into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostfile_json_and_table_outputs() {
    let f = fixture_with_pods().await;

    let mut args = base_args(&f);
    args.push("--hostfile".into());
    let out = run(args).await;
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "10.20.0.1 slots=2\n10.20.0.2 slots=3\n10.20.0.3 slots=4\n10.20.0.11 slots=1\n"
    );

    let mut args = base_args(&f);
    args.extend(["--json".into(), "--self-pod".into(), "rank-2".into()]);
    let out = run(args).await;
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let alloc: Allocation = serde_json::from_slice(&out.stdout).expect("JSON allocation");
    assert_eq!(alloc.namespace, "cli");
    assert_eq!(
        alloc
            .nodes
            .iter()
            .map(|n| n.pod.as_str())
            .collect::<Vec<_>>(),
        ["rank-0", "rank-1", "rank-2", "rank-10"]
    );
    assert_eq!(
        alloc.nodes.iter().map(|n| n.is_self).collect::<Vec<_>>(),
        [false, false, true, false]
    );

    let mut args = base_args(&f);
    args.extend([
        "--slots".into(),
        "one".into(),
        "--self-pod".into(),
        "rank-10".into(),
    ]);
    let out = run(args).await;
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 6, "{table}");
    assert!(lines[0].contains("slots 4"), "{table}");
    assert_eq!(
        lines[5].split_whitespace().collect::<Vec<_>>(),
        ["3", "rank-10", "rank-10", "10.20.0.11", "1", "-", "*"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_print_the_paragraph_and_exit_with_the_kind_code() {
    let f = fixture_with_pods().await;
    let mut args = base_args(&f);
    args[2] = f.kubeconfig_for("bogus-token").display().to_string();
    let out = run(args).await;
    assert_eq!(out.status.code(), Some(5), "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("prrte-k8s: error: ") && err.contains("401"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    let mut args = base_args(&f);
    args[8] = "1".into();
    args.extend(["--expected".into(), "5".into()]);
    let out = run(args).await;
    assert_eq!(out.status.code(), Some(9), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("4 of 5 ready"),
        "{}",
        text(&out.stderr)
    );

    let mut args = base_args(&f);
    args.extend(["--slots".into(), "cores".into()]);
    let out = run(args).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("auto")
            && err.contains("annotation")
            && err.contains("gpu")
            && err.contains("cpu")
            && err.contains("one"),
        "{err}"
    );

    let mut args = base_args(&f);
    args[6] = "app=(".into();
    let out = run(args).await;
    assert_eq!(out.status.code(), Some(2), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Invalid label selector"),
        "{}",
        text(&out.stderr)
    );
}

/// `manifest --api-server-from-cluster` lets the pods reach the API server only at the
/// addresses and ports of the endpoints of Service `kubernetes` in `default` (what a
/// NetworkPolicy sees), not at 0.0.0.0/0; without such endpoints it fails, saying what to give
/// instead, and prints nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_asks_the_cluster_for_the_api_servers_endpoints() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let f = Fixture::new("apiep").await;
    let kubeconfig = f.server.admin_kubeconfig().to_path_buf();
    let manifest = |kc: std::path::PathBuf| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_prrte-k8s"))
                .args(["manifest", "--name", "ep", "--api-server-from-cluster"])
                .env("KUBECONFIG", kc)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .output()
                .expect("run prrte-k8s")
        })
    };
    let out = manifest(kubeconfig.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert!(
        err.contains("no ready endpoint") && err.contains("--api-server-cidr"),
        "{err}"
    );
    let slices: kube::Api<EndpointSlice> = kube::Api::namespaced(f.client.clone(), "default");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["172.18.0.2"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }))
    .unwrap();
    slices
        .create(&kube::api::PostParams::default(), &slice)
        .await
        .unwrap();
    let out = manifest(kubeconfig).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let yaml = text(&out.stdout);
    let policy = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|o| o["kind"] == "NetworkPolicy")
        .expect("a NetworkPolicy");
    assert_eq!(
        policy["spec"]["egress"][2],
        json!({"to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}],
               "ports": [{"protocol": "TCP", "port": 6443}]}),
        "{yaml}"
    );
    assert!(!yaml.contains("0.0.0.0/0"), "{yaml}");
}
