//! A DVM that grows: an elastic interactive Job of 4 agent pods (2 slots each) whose pod-0
//! agent runs the DVM; `prrte-k8s grow 2` from another pod raises the Job to 6, awaits the new
//! pods and adds them to the DVM (the k8s PLM starts a prted in each new pod only); `prrte-k8s
//! prun -n 12 hostname` then lands 2 ranks on each of the 6 pods, and no prted of the first 4
//! was restarted. Growing past --max-pods is refused, nothing changed; a host added that is not
//! a ready pod of the job is refused, named.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

const TOOL_LIMIT: Duration = Duration::from_secs(120);

fn spec(name: &str, pods: usize) -> JobSpec<'_> {
    let mut spec = JobSpec::persistent_dvm(name, pods);
    spec.cpus = vec!["2"];
    spec.agent_args = vec![vec!["--dvm-head".into(), "auto".into()]];
    spec
}

fn uri_file(job: &Job, i: usize) -> PathBuf {
    job.pod_tmp(i).join("dvm/dvm.uri")
}

fn prrte_k8s(job: &Job, i: usize, args: &[&str]) -> Output {
    let exe = harness::workspace_bin("prrte-k8s").unwrap();
    let exe = exe.to_str().unwrap();
    let mut argv = vec![exe];
    argv.extend(args);
    job.exec_in_pod(i, &argv, TOOL_LIMIT).unwrap()
}

/// The PRRTE daemon of pod `i`: prte in pod 0 (the DVM head), prted elsewhere.
fn prteds(job: &Job, i: usize) -> Vec<u32> {
    let comm = if i == 0 { "prte" } else { "prted" };
    job.pids_in_pod(i, comm).unwrap()
}

fn parallelism(job: &Job) -> i64 {
    let j = job
        .cluster
        .store()
        .get(&sandbox::api::resources::JOBS, NS, &job.name)
        .unwrap();
    assert_eq!(j["spec"]["completions"], j["spec"]["parallelism"]);
    j["spec"]["parallelism"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_adds_pods_to_the_running_dvm_and_prun_uses_them() {
    let mut job = ElasticJob::start(spec("grow", 4), 6).await.unwrap();
    for i in 0..4 {
        wait_for_text(&uri_file(&job, i), "tcp4://", Duration::from_secs(90)).unwrap();
    }
    let before: Vec<Vec<u32>> = (0..4).map(|i| prteds(&job, i)).collect();
    for (i, p) in before.iter().enumerate() {
        assert_eq!(p.len(), 1, "one PRRTE daemon in pod {i}: {p:?}");
    }

    let out = prrte_k8s(&job, 1, &["grow", "2"]);
    assert!(out.status.success(), "grow 2: {}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "grow-4\ngrow-5\n",
        "{}",
        text(&out)
    );
    assert_eq!(parallelism(&job), 6);
    job.refresh(6).await.unwrap();
    for i in 4..6 {
        assert_eq!(prteds(&job, i).len(), 1, "a prted in new pod {i}");
    }

    let out = prrte_k8s(&job, 3, &["prun", "-n", "12", "hostname"]);
    assert!(out.status.success(), "prun -n 12 hostname: {}", text(&out));
    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        *per_host.entry(l.trim().to_string()).or_default() += 1;
    }
    let want: BTreeMap<String, usize> = (0..6).map(|i| (format!("grow-{i}"), 2)).collect();
    assert_eq!(per_host, want, "{}", text(&out));
    for (i, p) in before.iter().enumerate() {
        assert_eq!(
            &prteds(&job, i),
            p,
            "the prted of pod {i} is the same process"
        );
    }

    // Past --max-pods: refused, nothing changed.
    let out = prrte_k8s(&job, 5, &["grow", "1"]);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("beyond its --max-pods 6") && t.contains("nothing was changed"),
        "{t}"
    );
    assert_eq!(parallelism(&job), 6);
    // A host that is not a ready pod of the job is refused, named.
    let out = prrte_k8s(
        &job,
        2,
        &["prun", "--add-host", "intruder:2", "-n", "1", "true"],
    );
    assert!(!out.status.success(), "{}", text(&out));
    // prte (pod 0's DVM head) says why, in the pod's log.
    let log = job.cluster.pod_log(NS, &job.pods[0]).expect("pod 0's log");
    let said = "host(s) intruder added to the DVM is not a ready pod of this job";
    wait_for_text(&log, said, Duration::from_secs(10)).unwrap();
    // The DVM keeps running on its 6 pods.
    let out = prrte_k8s(&job, 4, &["prun", "-n", "12", "hostname"]);
    assert!(
        out.status.success(),
        "prun after the refusal: {}",
        text(&out)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 12);
    let out = prrte_k8s(&job, 0, &["pterm"]);
    assert!(out.status.success(), "pterm: {}", text(&out));
}

/// `MPI_Comm_spawn` with Open MPI's `add-host` info key onto pods the Job was raised to (by a
/// patch, as Kubernetes scales it): the hosts join the running DVM, the PLM starts a daemon in
/// each new pod only, and the children run there (each checks its host name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpi_comm_spawn_with_add_host_runs_on_new_pods() {
    let mut job = ElasticJob::start(spec("spawn", 2), 4).await.unwrap();
    for i in 0..2 {
        wait_for_text(&uri_file(&job, i), "tcp4://", Duration::from_secs(90)).unwrap();
    }
    job.cluster
        .store()
        .patch(
            &sandbox::api::resources::JOBS,
            NS,
            "spawn",
            sandbox::api::Patch::Merge(
                serde_json::json!({"spec": {"parallelism": 4, "completions": 4}}),
            ),
            sandbox::api::Part::Main,
            false,
        )
        .unwrap();
    job.refresh(4).await.unwrap();
    let prog = harness::mpi_program("spawn_add_host").unwrap();
    let out = prrte_k8s(
        &job,
        1,
        &[
            "prun",
            "-n",
            "1",
            prog.to_str().unwrap(),
            "2",
            "spawn-2:1,spawn-3:1",
            "spawn-2,spawn-3",
        ],
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("spawn: parents=1 children=2 sum=3 OK"),
        "{t}"
    );
    // (The children's own output stays in the DVM; a child off the listed hosts would have
    // made the sum wrong.)
    for i in 2..4 {
        assert_eq!(prteds(&job, i).len(), 1, "a prted in new pod {i}");
    }
    let out = prrte_k8s(&job, 0, &["pterm"]);
    assert!(out.status.success(), "pterm: {}", text(&out));
}
