//! A worker pod of an interactive JobSet deleted by hand, end to end: the JobSet rendered by
//! `prrte-k8s manifest --kind jobset --max-restarts 1` (its pod template run on the host's
//! programs, as the other end-to-end tests' pods: the workspace's agent, the PRRTE prefix and
//! the components), both pods Ready and the DVM up (prte in pod 0, a prted in pod 1), then
//! `kubectl delete pod` of pod 1 (a plain delete: no eviction, its grace period): its agent
//! exits 143, the pod ends Failed, the Job's pod failure policy fails the Job, the JobSet
//! restarts (`restarts: 1`, a new DVM), and pod 0's log names the deleted pod.
#![forbid(unsafe_code)]
use anyhow::{bail, Context, Result};
use sandbox::api::resources::{JOBSETS, PODS};
use sandbox::cluster::{pod_ready, Cluster, ClusterOptions};
use sandbox::harness::batch_job::{condition, text, NS};
use sandbox::harness::{self, Guarded, TestDir};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";
const INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// `prrte-k8s manifest --name NAME --pods 2 --kind jobset --max-restarts 1`, its pods made to
/// run the host's programs: the workspace's agent with the prefix's prted (`--dvm-head auto`
/// as rendered), the components and the prefix in the environment; the pods run as root (the
/// host's build tree) and the NetworkPolicy is left out (the sandbox's API server listens on
/// a port of its own). Everything else (the Job's pod failure policy, the JobSet's failure
/// policy, the secret volume, the probes, the grace period) is as rendered.
fn manifest(name: &str, dir: &TestDir) -> Result<String> {
    let mut c = Command::new(harness::workspace_bin("prrte-k8s")?);
    c.args([
        "manifest",
        "--name",
        name,
        "--pods",
        "2",
        "--kind",
        "jobset",
        "--max-restarts",
        "1",
        "--image",
        "prrte-k8s/sandbox-host",
    ]);
    let out = harness::run_with_timeout(c, Duration::from_secs(30))?;
    if !out.status.success() {
        bail!("prrte-k8s manifest failed: {}", text(&out));
    }
    let rendered = String::from_utf8(out.stdout)?;
    let components = harness::component_dir(dir.path())?;
    let agent = harness::workspace_bin("prrte-k8s-agent")?;
    let prefix = harness::prefix();
    let mut docs = Vec::new();
    for d in serde_yaml::Deserializer::from_str(&rendered) {
        let mut v = Value::deserialize(d)?;
        if v.is_null() || v["kind"] == "NetworkPolicy" {
            continue;
        }
        if v["kind"] == "JobSet" {
            let pod = v
                .pointer_mut("/spec/replicatedJobs/0/template/spec/template/spec")
                .context("the JobSet's pod template")?;
            pod.as_object_mut().unwrap().remove("securityContext");
            let c = &mut pod["containers"][0];
            c.as_object_mut().unwrap().remove("securityContext");
            let cmd = c["command"].as_array_mut().context("the agent's command")?;
            if cmd[0] != "prrte-k8s-agent" || cmd[1] != "--prted" {
                bail!("unexpected command in the manifest: {cmd:?}");
            }
            cmd[0] = json!(agent.display().to_string());
            cmd[2] = json!(prefix.join("bin/prted").display().to_string());
            cmd.extend([json!("--kill-grace"), json!("2")]);
            let env = c["env"].as_array_mut().context("the agent's env")?;
            env.push(json!({"name": "PRTE_PKGLIBDIR", "value": components.display().to_string()}));
            env.push(json!({"name": "PRRTE_K8S_PREFIX", "value": prefix.display().to_string()}));
        }
        docs.push(serde_yaml::to_string(&v)?);
    }
    Ok(docs.join("---\n"))
}

fn kubectl(cluster: &Cluster, kubectl: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(kubectl);
    c.env("KUBECONFIG", cluster.kubeconfig()).args(args);
    c
}

/// The JobSet's pods of restart attempt `attempt`, by completion index.
fn pods_of(cluster: &Cluster, js: &str, attempt: &str) -> Vec<Arc<Value>> {
    let mut pods: Vec<Arc<Value>> = cluster
        .store()
        .list(&PODS, Some(NS), &Default::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            let l = &p["metadata"]["labels"];
            l["jobset.sigs.k8s.io/jobset-name"] == js && l[ATTEMPT] == attempt
        })
        .collect();
    pods.sort_by_key(|p| {
        p["metadata"]["labels"][INDEX]
            .as_str()
            .unwrap_or("")
            .to_string()
    });
    pods
}

fn name_of(p: &Value) -> String {
    p["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// Whether a process named `comm` runs in `pod`.
fn runs(cluster: &Cluster, pod: &str, comm: &str) -> bool {
    cluster
        .pod_host_pids(pod)
        .unwrap_or_default()
        .iter()
        .any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim_end() == comm)
        })
}

/// Waits until both pods of attempt `attempt` are Ready and the DVM is up (prte in pod 0, a
/// prted in pod 1); their names.
fn wait_dvm_up(cluster: &Cluster, js: &str, attempt: &str, within: Duration) -> (String, String) {
    let deadline = Instant::now() + within;
    loop {
        let pods = pods_of(cluster, js, attempt);
        if pods.len() == 2 && pods.iter().all(|p| pod_ready(p)) {
            let (p0, p1) = (name_of(&pods[0]), name_of(&pods[1]));
            if runs(cluster, &p0, "prte") && runs(cluster, &p1, "prted") {
                return (p0, p1);
            }
        }
        assert!(
            Instant::now() < deadline,
            "attempt {attempt}: the pods were not Ready with the DVM up within {within:?}:\n{}",
            sandbox::cluster::describe_pods(&pods)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_worker_pod_restarts_the_interactive_jobset_and_pod_0_names_it() {
    harness::require_prrte().unwrap();
    let js = harness::unique("idel");
    let dir = TestDir::new(&js).unwrap();
    let kubectl_bin =
        sandbox::harness::kubectl::find().expect("no kubectl; run prrte-config/setup.sh");
    let cluster = Cluster::start(ClusterOptions {
        dir: Some(dir.path().join("cluster")),
        ..Default::default()
    })
    .await
    .unwrap();
    let yaml = manifest(&js, &dir).unwrap();
    let mut apply = kubectl(&cluster, &kubectl_bin, &["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = apply.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}\n{yaml}",
        text(&out)
    );

    let (pod0, victim) = wait_dvm_up(&cluster, &js, "0", Duration::from_secs(180));
    // Pod 0's log, followed until its container ends (the restart deletes it).
    let follow = kubectl(&cluster, &kubectl_bin, &["logs", "-f", &pod0]);
    let mut log0 = Guarded::spawn(follow, "pod0-log", dir.path()).unwrap();
    // Every change of the stored objects from now on (to see how the deleted pod ended).
    let mut events = cluster.store().subscribe();
    let out = harness::run_with_timeout(
        kubectl(
            &cluster,
            &kubectl_bin,
            &["delete", "pod", &victim, "--wait=false"],
        ),
        Duration::from_secs(30),
    )
    .unwrap();
    assert!(out.status.success(), "kubectl delete pod: {}", text(&out));

    // The JobSet restarts once: a new DVM on the pods of attempt 1.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let j = cluster.store().get(&JOBSETS, NS, &js).unwrap();
        if j["status"]["restarts"] == 1 {
            break;
        }
        assert!(
            condition(&j, "Failed").is_none() && condition(&j, "Completed").is_none(),
            "the JobSet ended instead of restarting: {}",
            j["status"]
        );
        assert!(
            Instant::now() < deadline,
            "the JobSet did not restart: {}\n{}",
            j["status"],
            sandbox::cluster::describe_pods(&pods_of(&cluster, &js, "0"))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_dvm_up(&cluster, &js, "1", Duration::from_secs(180));
    let j = cluster.store().get(&JOBSETS, NS, &js).unwrap();
    assert!(condition(&j, "Failed").is_none(), "{}", j["status"]);

    // The deleted pod ended Failed with its agent's 143, which failed the attempt: the first
    // state of it with a terminal phase says so (later ones, as the restart removes it, keep it).
    let mut seen = Vec::new();
    loop {
        match events.try_recv() {
            Ok(ev) if std::ptr::eq(ev.resource, &PODS) && ev.name == victim => {
                seen.push(ev.object.clone());
            }
            Ok(_) => {}
            // The subscription fell behind: the oldest events were dropped, later ones remain.
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    let ended = seen
        .iter()
        .find(|p| matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded")))
        .unwrap_or_else(|| {
            panic!(
                "no terminal phase among the deleted pod's {} states; the last: {}",
                seen.len(),
                seen.last().map(|p| p["status"].clone()).unwrap_or_default()
            )
        });
    assert_eq!(ended["status"]["phase"], "Failed", "{}", ended["status"]);
    assert_eq!(
        ended
            .pointer("/status/containerStatuses/0/state/terminated/exitCode")
            .and_then(Value::as_i64),
        Some(143),
        "{}",
        ended["status"]
    );

    // Pod 0's log (its container has ended with the restart) names the deleted pod.
    let st = log0.wait_timeout(Duration::from_secs(60)).unwrap();
    let log = std::fs::read_to_string(dir.path().join("pod0-log.out")).unwrap();
    assert!(
        st.is_some(),
        "kubectl logs -f did not end with pod 0:\n{log}"
    );
    assert!(
        log.contains(&format!("PRRTE's daemon in pod {victim} ended")),
        "pod 0's log does not name the deleted pod {victim}:\n{log}"
    );
    let out = harness::run_with_timeout(
        kubectl(
            &cluster,
            &kubectl_bin,
            &["delete", "jobset", &js, "--wait=false"],
        ),
        Duration::from_secs(30),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "kubectl delete jobset: {}",
        text(&out)
    );
}
