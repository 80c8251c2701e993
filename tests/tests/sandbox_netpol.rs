//! NetworkPolicy enforcement on the sandbox's pod network (nftables, bridge family). Needs root
//! and nftables.
#![forbid(unsafe_code)]

use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::unique;
use sandbox::runtime::podnet;
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// A pod (host programs) that accepts connections on each of `ports` and answers "hi".
fn server_pod(ns: &str, name: &str, labels: &str, ports: &[u16]) -> String {
    let ports = ports
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let py = format!(
        "import socket, threading\n\
         def serve(p):\n\
         \x20   s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', p)); s.listen(16)\n\
         \x20   while True:\n\
         \x20       c, _ = s.accept(); c.sendall(b'hi'); c.close()\n\
         for p in [{ports}]:\n\
         \x20   threading.Thread(target=serve, args=(p,)).start()\n"
    );
    let py = serde_json::to_string(&py).unwrap();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\nspec:\n  containers:\n  - name: c\n    image: none\n    command: [python3, -c, {py}]\n    ports: [{{name: agent, containerPort: 7117}}]\n    readinessProbe: {{tcpSocket: {{port: 7117}}, periodSeconds: 1}}\n---\n"
    )
}

/// Whether a TCP connection from pod `from` to `ip:port` gets the server's answer.
fn connects(c: &Cluster, from: &str, ip: &str, port: u16, timeout_s: f32) -> bool {
    let py = format!(
        "import socket, sys\ntry:\n    s = socket.create_connection(('{ip}', {port}), {timeout_s}); s.settimeout({timeout_s}); sys.exit(0 if s.recv(2) == b'hi' else 2)\nexcept OSError:\n    sys.exit(1)\n"
    );
    let st = c
        .pod_exec(from, &["python3", "-c", &py])
        .unwrap()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    st.code() == Some(0)
}

/// Asserts an allowed connection (retrying briefly: rules follow pod changes asynchronously).
fn assert_open(c: &Cluster, from: &str, ip: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !connects(c, from, ip, port, 3.0) {
        assert!(
            Instant::now() < deadline,
            "{from} cannot connect to {ip}:{port}; rules:\n{:?}",
            c.sync_network_policies()
        );
    }
}

fn assert_blocked(c: &Cluster, from: &str, ip: &str, port: u16) {
    assert!(
        !connects(c, from, ip, port, 1.5),
        "{from} connected to {ip}:{port}, which the policy does not admit; rules:\n{:?}",
        c.sync_network_policies()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policy_admits_only_the_jobs_pods_on_listed_ports() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let (ns, other_ns, job) = (unique("np"), unique("np-other"), unique("job"));
    let (a, b, outsider, foreign) = (
        format!("{job}-0"),
        format!("{job}-1"),
        unique("outsider"),
        unique("foreign"),
    );
    let mut yaml = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {other_ns}, labels: {{team: blue}}}}\n---\n");
    yaml += &server_pod(&ns, &a, &format!("{{job: {job}}}"), &[7117, 7200]);
    yaml += &server_pod(&ns, &b, &format!("{{job: {job}}}"), &[7117, 7200]);
    yaml += &server_pod(&ns, &outsider, "{app: other}", &[7117]);
    yaml += &server_pod(&other_ns, &foreign, &format!("{{job: {job}}}"), &[7117]);
    cluster.apply_yaml(&yaml).unwrap();
    cluster
        .wait_ready(&ns, &format!("job={job}"), 2, WAIT)
        .await
        .unwrap();
    cluster.wait_ready(&ns, "app=other", 1, WAIT).await.unwrap();
    cluster
        .wait_ready(&other_ns, &format!("job={job}"), 1, WAIT)
        .await
        .unwrap();
    let ip_of = |ns: &str, name: &str| {
        cluster
            .store()
            .get(&sandbox::api::resources::PODS, ns, name)
            .unwrap()["status"]["podIP"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (ip_a, ip_out) = (ip_of(&ns, &a), ip_of(&ns, &outsider));
    let (a, b, outsider, foreign) = (
        format!("{ns}/{a}"),
        format!("{ns}/{b}"),
        format!("{ns}/{outsider}"),
        format!("{other_ns}/{foreign}"),
    );

    // No policy: everything is open and no table exists.
    assert_eq!(cluster.sync_network_policies().unwrap(), None);
    assert!(podnet::leftovers(&prefix).nft_tables.is_empty());
    for from in [&b, &outsider, &foreign] {
        assert_open(&cluster, from, &ip_a, 7117);
    }
    assert_open(&cluster, &b, &ip_a, 7200);

    // The job's policy: its own pods, the agent port (by name) only.
    cluster
        .apply_yaml(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {job}, namespace: {ns}}}\nspec:\n  podSelector: {{matchLabels: {{job: {job}}}}}\n  policyTypes: [Ingress]\n  ingress:\n  - from: [{{podSelector: {{matchLabels: {{job: {job}}}}}}}]\n    ports: [{{port: agent, protocol: TCP}}]\n"
        ))
        .unwrap();
    let rules = cluster.sync_network_policies().unwrap().expect("rules");
    let kubectl =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let cache = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["-n", &ns, "get", "networkpolicy"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && table.contains("POD-SELECTOR")
            && table.contains(&format!("job={job}")),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rules.contains(&format!("ip daddr {ip_a} ")), "{rules}");
    assert_eq!(
        podnet::leftovers(&prefix).nft_tables,
        vec![cluster.network_policy_table().to_string()]
    );
    assert_open(&cluster, &b, &ip_a, 7117);
    assert_blocked(&cluster, &b, &ip_a, 7200);
    assert_blocked(&cluster, &outsider, &ip_a, 7117);
    // Same labels in another namespace: a podSelector alone means the policy's namespace.
    assert_blocked(&cluster, &foreign, &ip_a, 7117);
    // Pods the policy does not select stay open; the node (the gateway) is never filtered.
    assert_open(&cluster, &b, &ip_out, 7117);
    let from_node = TcpStream::connect_timeout(
        &SocketAddr::new(ip_a.parse().unwrap(), 7200),
        Duration::from_secs(5),
    );
    assert!(
        from_node.is_ok(),
        "node-to-pod traffic is allowed: {from_node:?}"
    );
    // Connections the isolated pod opens itself still work (their replies pass).
    assert_open(&cluster, &a, &ip_out, 7117);
    // A job pod that appears later is admitted without anyone calling sync: the rules follow
    // the pods.
    let late = format!("{job}-2");
    cluster
        .apply_yaml(&server_pod(&ns, &late, &format!("{{job: {job}}}"), &[7117]))
        .unwrap();
    cluster
        .wait_ready(&ns, &format!("job={job}"), 3, WAIT)
        .await
        .unwrap();
    let late = format!("{ns}/{late}");
    assert_open(&cluster, &late, &ip_a, 7117);
    assert_blocked(&cluster, &late, &ip_a, 7200);

    // A second policy admits the namespaces labelled team=blue (on every port).
    cluster
        .apply_yaml(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: blue, namespace: {ns}}}\nspec:\n  podSelector: {{}}\n  ingress:\n  - from: [{{namespaceSelector: {{matchLabels: {{team: blue}}}}}}]\n"
        ))
        .unwrap();
    cluster.sync_network_policies().unwrap();
    assert_open(&cluster, &foreign, &ip_a, 7117);
    assert_open(&cluster, &foreign, &ip_a, 7200);
    assert_blocked(&cluster, &outsider, &ip_a, 7117);

    // Deleting the policies restores traffic, and the table goes.
    for p in [job.as_str(), "blue"] {
        cluster
            .store()
            .delete(
                &sandbox::api::resources::NETWORKPOLICIES,
                &ns,
                p,
                &Default::default(),
            )
            .unwrap();
    }
    assert_eq!(cluster.sync_network_policies().unwrap(), None);
    assert!(podnet::leftovers(&prefix).nft_tables.is_empty());
    assert_open(&cluster, &outsider, &ip_a, 7117);
    assert_open(&cluster, &b, &ip_a, 7200);

    // A policy left in place is removed with the cluster.
    cluster
        .apply_yaml(&format!("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: deny, namespace: {ns}}}\nspec:\n  podSelector: {{}}\n"))
        .unwrap();
    cluster.sync_network_policies().unwrap();
    assert_blocked(&cluster, &b, &ip_a, 7117);
    cluster.shutdown().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !podnet::leftovers(&prefix).is_empty() {
        assert!(Instant::now() < deadline, "{}", podnet::leftovers(&prefix));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_test_leaves_no_rules_behind() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let ns = unique("np-fail");
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n{}apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: deny, namespace: {ns}}}\nspec:\n  podSelector: {{}}\n",
            server_pod(&ns, "p", "{app: p}", &[7117])
        ))
        .unwrap();
    cluster.wait_ready(&ns, "app=p", 1, WAIT).await.unwrap();
    assert!(cluster.sync_network_policies().unwrap().is_some());
    assert_eq!(podnet::leftovers(&prefix).nft_tables.len(), 1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _owned = cluster;
        panic!("the test body fails");
    }));
    assert!(r.is_err());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !podnet::leftovers(&prefix).is_empty() {
        assert!(Instant::now() < deadline, "{}", podnet::leftovers(&prefix));
        std::thread::sleep(Duration::from_millis(50));
    }
}
