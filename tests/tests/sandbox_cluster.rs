//! The sandbox cluster with real pods (network namespaces): needs root.
#![forbid(unsafe_code)]

use sandbox::api::Obj;
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::unique;
use sandbox::runtime::podnet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn name(p: &Obj) -> String {
    p["metadata"]["name"].as_str().unwrap().to_string()
}

/// Waits until none of `pids` exists any more.
fn wait_gone(pids: &[u32], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: processes {alive:?} still alive after 20s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_no_leftovers(prefix: &str) {
    let l = podnet::leftovers(prefix);
    assert!(l.is_empty(), "left behind after teardown: {l}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_pods_run_see_themselves_and_talk() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let job = unique("job");
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: {job}
spec:
  completionMode: Indexed
  completions: 8
  parallelism: 8
  template:
    spec:
      subdomain: {job}
      restartPolicy: Never
      containers:
      - name: main
        image: none
        command: ["sleep", "600"]
        env:
        - name: MY_POD_IP
          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
        - name: MY_NAME
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        - name: GREETING
          value: "hi-$(MY_NAME)"
"#
        ))
        .unwrap();
    let pods = cluster
        .wait_ready("default", &format!("job-name={job}"), 8, WAIT)
        .await
        .unwrap();
    assert_eq!(pods.len(), 8);
    let mut seen_idx = std::collections::BTreeSet::new();
    let mut ips = std::collections::BTreeSet::new();
    for p in &pods {
        let n = name(p);
        let idx = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap()
            .to_string();
        let ip = p["status"]["podIP"].as_str().unwrap().to_string();
        assert!(seen_idx.insert(idx.clone()));
        assert!(ips.insert(ip.clone()), "pod IPs are unique");
        let (code, host, err) = cluster.pod_run(&n, &["hostname"]).unwrap();
        assert_eq!(
            (code, host.as_str()),
            (0, format!("{job}-{idx}").as_str()),
            "{err}"
        );
        let (_, addr, _) = cluster
            .pod_run(&n, &["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
            .unwrap();
        assert!(
            addr.contains(&format!("inet {ip}/23")),
            "pod {n} has {ip}: {addr}"
        );
        let (_, env, _) = cluster
            .pod_run(
                &n,
                &[
                    "sh",
                    "-c",
                    "echo $JOB_COMPLETION_INDEX $MY_POD_IP $GREETING $HOSTNAME",
                ],
            )
            .unwrap();
        assert_eq!(env, format!("{idx} {ip} hi-{n} {job}-{idx}"));
    }
    assert_eq!(seen_idx.len(), 8);

    // The API server is reachable from a pod with the pod's service-account token.
    let p0 = name(&pods[0]);
    let sa = sandbox::cluster::SA_MOUNT;
    let script = format!(
        "test -r {sa}/token && test -r {sa}/ca.crt && cat {sa}/namespace && echo && echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT && \
         curl -sS --cacert {sa}/ca.crt -H \"Authorization: Bearer $(cat {sa}/token)\" https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/default/pods"
    );
    let (code, out, err) = cluster.pod_run(&p0, &["sh", "-c", &script]).unwrap();
    assert_eq!(code, 0, "{out}\n{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("default"));
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "{}:{}",
            cluster.network().gateway(),
            cluster.api().addr().port()
        )
    );
    let body: serde_json::Value =
        serde_json::from_str(&lines.collect::<Vec<_>>().join("\n")).unwrap();
    assert_eq!(
        body["code"], 403,
        "the default service account may not list pods: {body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("system:serviceaccount:default:default"),
        "{body}"
    );

    // A TCP connection from one pod to another's IP.
    let (a, b) = (name(&pods[0]), name(&pods[1]));
    let a_ip = pods[0]["status"]["podIP"].as_str().unwrap().to_string();
    let mut server = cluster
        .pod_exec(
            &a,
            &[
                "python3",
                "-c",
                "import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',7777))\ns.listen(1)\nprint('listening',flush=True)\nc,addr=s.accept()\nprint(c.recv(100).decode(),addr[0],flush=True)",
            ],
        )
        .unwrap()
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "listening");
    let (code, _, err) = cluster.pod_run(&b,
        &["python3", "-c", &format!("import socket\ns=socket.create_connection(('{a_ip}',7777),timeout=10)\ns.sendall(b'hello-from-b')")],
    ).unwrap();
    assert_eq!(code, 0, "{err}");
    line.clear();
    out.read_line(&mut line).unwrap();
    let b_ip = pods[1]["status"]["podIP"].as_str().unwrap();
    assert_eq!(line.trim(), format!("hello-from-b {b_ip}"));
    assert!(server.wait().unwrap().success());

    drop(cluster);
    assert_no_leftovers(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_lifecycle_exit_restart_probe_delete_evict() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let t = unique("t");
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Secret
metadata: {{name: {t}-sec}}
stringData: {{password: s3cret, file.txt: from-secret}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {t}-ok}}
spec:
  restartPolicy: Never
  containers: [{{name: c, command: [sh, -c, "exit 0"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {t}-bad}}
spec:
  restartPolicy: Never
  containers: [{{name: c, command: [sh, -c, "echo failing; exit 3"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {t}-retry}}
spec:
  restartPolicy: OnFailure
  volumes: [{{name: data, emptyDir: {{}}}}]
  containers:
  - name: c
    command: [sh, -c, "if [ -e /mnt/data/once ]; then exit 0; fi; touch /mnt/data/once; exit 1"]
    volumeMounts: [{{name: data, mountPath: /mnt/data}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {t}-probe, labels: {{app: {t}}}}}
spec:
  volumes: [{{name: sec, secret: {{secretName: {t}-sec}}}}]
  containers:
  - name: c
    command: [python3, -c, "import socket,time\ntime.sleep(1)\ns=socket.socket()\ns.bind(('0.0.0.0',8080))\ns.listen(5)\nwhile True: s.accept()[0].close()"]
    readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
    env:
    - name: PASSWORD
      valueFrom: {{secretKeyRef: {{name: {t}-sec, key: password}}}}
    volumeMounts: [{{name: sec, mountPath: /etc/sec}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {t}-sleeper, labels: {{app: {t}}}}}
spec:
  containers: [{{name: c, command: [sleep, "600"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {t}-victim, labels: {{app: {t}}}}}
spec:
  containers: [{{name: c, command: [sleep, "600"]}}]
"#
        ))
        .unwrap();
    let ok = cluster
        .wait_phase(
            "default",
            &format!("{t}-ok"),
            &["Succeeded", "Failed"],
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(ok["status"]["phase"], "Succeeded");
    assert_eq!(
        ok["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let bad = cluster
        .wait_phase(
            "default",
            &format!("{t}-bad"),
            &["Succeeded", "Failed"],
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(bad["status"]["phase"], "Failed");
    let term = &bad["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(3), Some("Error"))
    );
    let log =
        std::fs::read_to_string(cluster.pod_log("default", &format!("{t}-bad")).unwrap()).unwrap();
    assert_eq!(log.trim(), "failing");
    let retry = cluster
        .wait_phase(
            "default",
            &format!("{t}-retry"),
            &["Succeeded", "Failed"],
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        retry["status"]["phase"], "Succeeded",
        "OnFailure restarts in place, keeping emptyDir: {retry}"
    );
    assert_eq!(retry["status"]["containerStatuses"][0]["restartCount"], 1);
    assert_eq!(
        retry["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        1
    );

    // Readiness follows the probe: not Ready before the listener is up, Ready after.
    let ready = cluster
        .wait_ready("default", &format!("app={t}"), 3, WAIT)
        .await
        .unwrap();
    assert_eq!(ready.len(), 3);
    let probe = cluster
        .store()
        .get(
            &sandbox::api::resources::PODS,
            "default",
            &format!("{t}-probe"),
        )
        .unwrap();
    let conds = probe["status"]["conditions"].as_array().unwrap();
    let ready_cond = conds.iter().find(|c| c["type"] == "Ready").unwrap();
    let started: k8s_openapi::jiff::Timestamp = probe["status"]["startTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let became: k8s_openapi::jiff::Timestamp = ready_cond["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        became.as_second() > started.as_second(),
        "Ready only after the listener came up (start {started}, ready {became})"
    );
    let (_, out, _) = cluster
        .pod_run(
            &format!("{t}-probe"),
            &["sh", "-c", "echo $PASSWORD; cat /etc/sec/file.txt"],
        )
        .unwrap();
    assert_eq!(out, "s3cret\nfrom-secret");

    // Deleting a pod (with kubectl, as a user would) kills its processes.
    let sleeper = format!("{t}-sleeper");
    let pids = cluster.pod_host_pids(&sleeper).unwrap();
    assert!(!pids.is_empty());
    if let Some(kubectl) = sandbox::harness::kubectl::find() {
        let out = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig())
            .args(["delete", "pod", &sleeper, "--wait=true"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl delete: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        cluster
            .store()
            .delete(
                &sandbox::api::resources::PODS,
                "default",
                &sleeper,
                &Default::default(),
            )
            .unwrap();
    }
    wait_gone(&pids, "deleted pod");

    // Eviction kills the processes and leaves a Failed/Evicted pod.
    let victim = format!("{t}-victim");
    let pids = cluster.pod_host_pids(&victim).unwrap();
    cluster.evict(&victim).unwrap();
    wait_gone(&pids, "evicted pod");
    let v = cluster
        .store()
        .get(&sandbox::api::resources::PODS, "default", &victim)
        .unwrap();
    assert_eq!(
        (
            v["status"]["phase"].as_str(),
            v["status"]["reason"].as_str()
        ),
        (Some("Failed"), Some("Evicted"))
    );
    assert!(cluster.pod_exec(&victim, &["true"]).is_err());

    drop(cluster);
    assert_no_leftovers(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_beyond_capacity_wait_and_other_nodes_pods_are_left_alone() {
    let cluster = Cluster::start(ClusterOptions {
        max_pods: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let prefix = cluster.network().prefix();
    let t = unique("cap");
    let pod = |n: &str, extra: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {t}-{n}, labels: {{app: {t}}}}}\nspec:\n  {extra}containers: [{{name: c, command: [sleep, \"600\"]}}]\n")
    };
    cluster
        .apply_yaml(&[pod("a", ""), pod("b", "")].join("---\n"))
        .unwrap();
    cluster
        .wait_ready("default", &format!("app={t}"), 2, WAIT)
        .await
        .unwrap();
    cluster
        .apply_yaml(&[pod("c", ""), pod("elsewhere", "nodeName: another-node\n  ")].join("---\n"))
        .unwrap();
    let store = cluster.store();
    let c = sandbox::cluster::wait_pods(&store, "default", "", WAIT, |pods| {
        pods.iter()
            .find(|p| {
                p["metadata"]["name"] == format!("{t}-c").as_str()
                    && p["status"]["conditions"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|c| c["reason"] == "Unschedulable"))
            })
            .cloned()
    })
    .await
    .unwrap();
    assert_eq!(c["status"]["phase"], "Pending");
    // Room again (a pod deleted at once, grace period 0): the waiting pod starts.
    store
        .delete(
            &sandbox::api::resources::PODS,
            "default",
            &format!("{t}-a"),
            &sandbox::api::DeleteOptions {
                grace_period: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    let ready = cluster
        .wait_ready("default", &format!("app={t}"), 2, WAIT)
        .await
        .unwrap();
    assert!(ready
        .iter()
        .any(|p| p["metadata"]["name"] == format!("{t}-c").as_str()));
    // A pod bound to another node is never run here.
    let e = store
        .get(
            &sandbox::api::resources::PODS,
            "default",
            &format!("{t}-elsewhere"),
        )
        .unwrap();
    assert_eq!(
        (
            e["status"]["phase"].as_str(),
            e["spec"]["nodeName"].as_str()
        ),
        (Some("Pending"), Some("another-node"))
    );
    assert!(cluster
        .pod_exec(&format!("{t}-elsewhere"), &["true"])
        .is_err());
    // Room for one more pod: a pod naming a scheduler that does not run here stays
    // unscheduled (no node, no condition) and leaves the room to the pod made after it.
    store
        .delete(
            &sandbox::api::resources::PODS,
            "default",
            &format!("{t}-b"),
            &sandbox::api::DeleteOptions {
                grace_period: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    let gang = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {t}-gang}}\nspec:\n  schedulerName: volcano\n  containers: [{{name: c, command: [sleep, \"600\"]}}]\n");
    cluster
        .apply_yaml(&[gang, pod("d", "")].join("---\n"))
        .unwrap();
    let ready = cluster
        .wait_ready("default", &format!("app={t}"), 2, WAIT)
        .await
        .unwrap();
    assert!(ready
        .iter()
        .any(|p| p["metadata"]["name"] == format!("{t}-d").as_str()));
    let g = store
        .get(
            &sandbox::api::resources::PODS,
            "default",
            &format!("{t}-gang"),
        )
        .unwrap();
    assert_eq!(g["status"]["phase"], "Pending", "{g}");
    assert!(g["spec"]["nodeName"].is_null(), "{g}");
    assert!(g["status"]["conditions"].is_null(), "{g}");
    drop(cluster);
    assert_no_leftovers(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_completes_and_statefulset_comes_up_in_order() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let t = unique("ctl");
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: {t}-job}}
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, command: [sh, -c, "test -n \"$JOB_COMPLETION_INDEX\""]}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {t}-sts}}
spec:
  replicas: 3
  serviceName: {t}-svc
  selector: {{matchLabels: {{app: {t}-sts}}}}
  template:
    metadata: {{labels: {{app: {t}-sts}}}}
    spec:
      containers: [{{name: c, command: [sleep, "600"]}}]
"#
        ))
        .unwrap();
    let store = cluster.store();
    let job = format!("{t}-job");
    let j = sandbox::cluster::wait_pods(&store, "default", "", WAIT, |_| {
        let j = store
            .get(&sandbox::api::resources::JOBS, "default", &job)
            .ok()?;
        j["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Complete" && c["status"] == "True")
            .then_some(j)
    })
    .await
    .unwrap();
    assert_eq!(j["status"]["succeeded"], 3);
    assert_eq!(j["status"]["completedIndexes"], "0-2");
    assert!(j["status"]["completionTime"].is_string());

    let ready = cluster
        .wait_ready("default", &format!("app={t}-sts"), 3, WAIT)
        .await
        .unwrap();
    let mut names: Vec<String> = ready.iter().map(name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            format!("{t}-sts-0"),
            format!("{t}-sts-1"),
            format!("{t}-sts-2")
        ]
    );
    for p in &ready {
        let n = name(p);
        let (_, host, _) = cluster.pod_run(&n, &["hostname"]).unwrap();
        assert_eq!(host, n);
        assert_eq!(p["spec"]["subdomain"], format!("{t}-svc"));
        assert_eq!(
            p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            n.as_str()
        );
    }
    // OrderedReady: pod i+1 was created only after pod i became Ready.
    let ready_at = |n: &str| -> String {
        let p = ready.iter().find(|p| name(p) == n).unwrap();
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()["lastTransitionTime"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let created_at = |n: &str| {
        ready.iter().find(|p| name(p) == n).unwrap()["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .to_string()
    };
    for i in 0..2 {
        assert!(created_at(&format!("{t}-sts-{}", i + 1)) >= ready_at(&format!("{t}-sts-{i}")));
    }
    let sts = store
        .get(
            &sandbox::api::resources::STATEFULSETS,
            "default",
            &format!("{t}-sts"),
        )
        .unwrap();
    assert_eq!(sts["status"]["readyReplicas"], 3);
    drop(cluster);
    assert_no_leftovers(&prefix);
}
