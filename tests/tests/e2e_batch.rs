//! Batch MPI jobs as Kubernetes Jobs in the sandbox, the way a user runs them:
//! `prrte-k8s manifest --pods 4 --image ... -- mpirun -n 8 /home/mpi/allreduce | kubectl apply
//! -f -`, then `kubectl wait`, `kubectl logs`, the Job's status and its TTL. The pods run the
//! example application image (`make image`: localhost/prrte-k8s-allreduce:latest, the agent as
//! entrypoint, Open MPI on PRRTE with the k8s components) with everything the manifest renders:
//! uid 1000, a read-only root, every capability dropped, and the NetworkPolicy enforced (it
//! admits only the pinned ports, only from the job's pods).
#![forbid(unsafe_code)]
use sandbox::api::resources::{JOBS, PODS};
use sandbox::cluster::Cluster;
use sandbox::harness;
use sandbox::harness::batch_job::{condition, text, BatchJob, NS};
use sandbox::harness::mpijob::allreduce_lines;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Seconds the first test's finished Job is kept (`--ttl`).
const TTL: u64 = 15;

/// An MPI program that does its work (an allreduce) and then fails: rank 0 exits with 3.
const EXIT3: &str = "import sys\n\
from mpi4py import MPI\n\
c = MPI.COMM_WORLD\n\
s = c.allreduce(1)\n\
print(f'exitcode rank={c.rank} size={c.size} sum={s}', flush=True)\n\
sys.exit(3 if c.rank == 0 else 0)\n";

/// Issue acceptance: 4 pods, 8 ranks; `kubectl wait --for=condition=complete` succeeds,
/// `kubectl logs` of pod 0 shows 8 correct ranks, every pod Succeeded, the TTL removes the Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_allreduce_completes_logs_and_ttl_removes_it() {
    let job = BatchJob::start(
        "bar",
        4,
        &["--cpu", "2", "--ttl", &TTL.to_string()],
        &["mpirun", "-n", "8", "/home/mpi/allreduce"],
    )
    .await
    .unwrap();
    job.wait_for_condition("complete", 180);
    let pods = job.pods();
    assert_eq!(pods.len(), 4, "{}", job.describe());
    let pod0 = BatchJob::pod_name(&pods[0]);
    let logs = job
        .kubectl(&["logs", &pod0], Duration::from_secs(30))
        .unwrap();
    assert!(logs.status.success(), "kubectl logs: {}", text(&logs));
    let lines = allreduce_lines(&String::from_utf8_lossy(&logs.stdout));
    assert_eq!(lines.len(), 8, "8 ranks in pod 0's log: {}", text(&logs));
    assert!(
        lines.iter().all(|l| l.1 == 8 && l.3),
        "a rank got a wrong sum: {}",
        text(&logs)
    );
    assert_eq!(
        lines.iter().map(|l| l.0).collect::<BTreeSet<_>>(),
        (0..8).collect()
    );
    let hosts: BTreeSet<String> = lines.iter().map(|l| l.2.clone()).collect();
    assert_eq!(hosts.len(), 4, "ranks on all 4 pods: {}", text(&logs));
    for p in &pods {
        assert_eq!(
            p["status"]["phase"],
            "Succeeded",
            "every pod Succeeded:\n{}",
            job.describe()
        );
        assert_eq!(
            p.pointer("/status/containerStatuses/0/state/terminated/exitCode")
                .and_then(Value::as_i64),
            Some(0)
        );
    }
    let j = job.cluster.store().get(&JOBS, NS, "bar").unwrap();
    assert!(
        condition(&j, "Complete").is_some() && condition(&j, "SuccessCriteriaMet").is_some(),
        "{}",
        j["status"]
    );
    // The TTL removes the Job, and with it its pods.
    let deadline = Instant::now() + Duration::from_secs(TTL + 30);
    while job.cluster.store().get(&JOBS, NS, "bar").is_ok() || !job.pods().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the TTL ({TTL} s) did not remove the Job:\n{}",
            job.describe()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = job
        .kubectl(&["get", "job", "bar"], Duration::from_secs(30))
        .unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound"),
        "{}",
        text(&out)
    );
}

/// Issue acceptance: a program that exits 3 fails the Job; pod 0 is terminated with exit code
/// 3; no pod is left running and nothing is left in any pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_failure_fails_the_job_with_the_exit_code() {
    let job = BatchJob::start(
        "bfail",
        4,
        &["--cpu", "2"],
        &["mpirun", "-n", "8", "python3", "-c", EXIT3],
    )
    .await
    .unwrap();
    job.wait_for_condition("failed", 180);
    let j = job.cluster.store().get(&JOBS, NS, "bfail").unwrap();
    let failed = condition(&j, "Failed").expect("Failed condition").clone();
    assert!(condition(&j, "FailureTarget").is_some(), "{}", j["status"]);
    assert!(condition(&j, "Complete").is_none(), "{}", j["status"]);
    assert_eq!(failed["reason"], "PodFailurePolicy", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or("")
            .contains("exit code 3"),
        "{failed}"
    );
    let pods = job.pods();
    let pod0 = pods.first().expect("pod 0 is kept");
    assert_eq!(
        pod0["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
        "0"
    );
    assert_eq!(pod0["status"]["phase"], "Failed", "{}", job.describe());
    assert_eq!(
        pod0.pointer("/status/containerStatuses/0/state/terminated/exitCode")
            .and_then(Value::as_i64),
        Some(3),
        "{}",
        job.describe()
    );
    let logs = job
        .kubectl(
            &["logs", &BatchJob::pod_name(pod0)],
            Duration::from_secs(30),
        )
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&logs.stdout)
            .lines()
            .filter(|l| l.starts_with("exitcode rank="))
            .count(),
        8,
        "{}",
        text(&logs)
    );
    job.assert_nothing_left(Duration::from_secs(20));
}

/// Issue acceptance: a pod evicted mid-run fails the Job within 30 s and nothing is left
/// running in any pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_pod_fails_the_job_quickly() {
    let job = BatchJob::start(
        "bevict",
        4,
        &["--cpu", "2"],
        &["mpirun", "-n", "8", "sleep", "600"],
    )
    .await
    .unwrap();
    // Every pod runs its two ranks.
    let sleeps = job
        .wait_for_procs("sleep", &[2, 2, 2, 2], Duration::from_secs(120))
        .unwrap();
    let victim = BatchJob::pod_name(&job.pods()[2]);
    let t0 = Instant::now();
    job.cluster.evict(&victim).unwrap();
    job.wait_for_condition("failed", 30);
    assert!(t0.elapsed() < Duration::from_secs(30));
    let j = job.cluster.store().get(&JOBS, NS, "bevict").unwrap();
    let failed = condition(&j, "Failed").unwrap();
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or("")
            .contains("DisruptionTarget"),
        "{failed}"
    );
    // It names the evicted pod, so the user knows which one ended the job.
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{NS}/{victim}")),
        "the Failed condition names {victim}: {failed}"
    );
    job.assert_nothing_left(Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(20);
    while sleeps
        .iter()
        .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    {
        assert!(
            Instant::now() < deadline,
            "ranks still running after the Job failed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = &job.yaml;
}

/// The TCP ports pod `pod` listens on (from its network namespace's /proc/net/tcp, read on the
/// node: nothing connects to find out).
fn listening(cluster: &Cluster, pod: &str) -> BTreeSet<u16> {
    let Some(pid) = cluster
        .pod_host_pids(pod)
        .ok()
        .and_then(|p| p.into_iter().next())
    else {
        return BTreeSet::new();
    };
    std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local_address is IP:PORT in hex; state 0A is LISTEN
            (f.get(3) == Some(&"0A"))
                .then(|| f.get(1)?.rsplit(':').next())
                .flatten()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
        })
        .collect()
}

/// How a TCP connection from pod `from` to `ip:port` ends: "open", "refused" (no listener:
/// the packet got through) or "timeout" (dropped on the way: filtered).
fn probe(cluster: &Cluster, from: &str, ip: &str, port: u16) -> String {
    let py = format!(
        "import socket\n\
         s = socket.socket()\n\
         s.settimeout(2)\n\
         try:\n    s.connect(('{ip}', {port})); print('open')\n\
         except ConnectionRefusedError:\n    print('refused')\n\
         except OSError as e:\n    print('timeout' if isinstance(e, socket.timeout) else 'error ' + repr(e))\n"
    );
    let out = harness::run_with_timeout(
        cluster.pod_exec(from, &["python3", "-c", &py]).unwrap(),
        Duration::from_secs(30),
    )
    .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn pod_ip(p: &Value) -> String {
    p["status"]["podIP"].as_str().unwrap_or("").to_string()
}

/// Issue acceptance: with the job's NetworkPolicy enforced the job works (prun across the pods
/// of an interactive job: PRRTE's OOB, the PMIx tool port, Open MPI's TCP BTL), a pod outside
/// the job cannot connect to the agent, tool or OOB ports of the job's pods, and the policy is
/// real: a port it does not list is blocked even between the job's own pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policy_keeps_other_pods_out_and_the_job_works() {
    let job = BatchJob::start("bnp", 2, &["--cpu", "2"], &[])
        .await
        .unwrap();
    // A pod of another workload in the same namespace (the host's programs, python3 among them).
    job.cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: outsider, namespace: {NS}, labels: {{app: outsider}}}}\nspec:\n  containers:\n  - name: c\n    image: {}\n    command: [sleep, infinity]\n",
            sandbox::images::HOST_IMAGE_REPO
        ))
        .unwrap();
    job.cluster
        .wait_ready(NS, "app=outsider", 1, Duration::from_secs(60))
        .await
        .unwrap();
    let ready = job
        .cluster
        .wait_ready(
            NS,
            "batch.kubernetes.io/job-name=bnp",
            2,
            Duration::from_secs(120),
        )
        .await;
    ready.unwrap_or_else(|e| panic!("{e:#}\n{}", job.describe()));
    let pods = job.pods();
    let (pod0, pod1) = (BatchJob::pod_name(&pods[0]), BatchJob::pod_name(&pods[1]));
    let (ip0, ip1) = (pod_ip(&pods[0]), pod_ip(&pods[1]));
    assert!(
        job.cluster.sync_network_policies().unwrap().is_some(),
        "the manifest's NetworkPolicy is in force"
    );

    // The DVM is up: pod 0 listens on the agent, tool and OOB ports, pod 1 on agent and OOB.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (l0, l1) = (
            listening(&job.cluster, &pod0),
            listening(&job.cluster, &pod1),
        );
        if [7117, 7120, 7121].iter().all(|p| l0.contains(p))
            && [7117, 7121].iter().all(|p| l1.contains(p))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the DVM is not up: pod 0 listens on {l0:?}, pod 1 on {l1:?}\n{}",
            job.describe()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The job works through the policy: a prun from pod 1 into pod 0's DVM, ranks on both pods.
    let out = harness::run_with_timeout(
        job.cluster
            .pod_exec(
                &pod1,
                &["prrte-k8s", "prun", "-n", "4", "/home/mpi/allreduce"],
            )
            .unwrap(),
        Duration::from_secs(120),
    )
    .unwrap();
    let lines = allreduce_lines(&String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success() && lines.len() == 4 && lines.iter().all(|l| l.1 == 4 && l.3),
        "prun through the policy: {}\n{}",
        text(&out),
        job.describe()
    );
    assert_eq!(
        lines
            .iter()
            .map(|l| l.2.clone())
            .collect::<BTreeSet<_>>()
            .len(),
        2,
        "ranks on both pods: {}",
        text(&out)
    );

    // From the job's own pods the listed ports are open; from the outsider every one of them
    // is filtered (the connection attempt is dropped, not refused).
    let targets = [
        (&ip0, 7117, "agent"),
        (&ip0, 7120, "tool"),
        (&ip0, 7121, "OOB"),
        (&ip1, 7117, "agent"),
        (&ip1, 7121, "OOB"),
    ];
    for (ip, port, what) in targets {
        let insider = if *ip == ip0 { &pod1 } else { &pod0 };
        // (a few tries: on a loaded machine one 2 s attempt may not be enough)
        let got: Vec<String> = (0..3)
            .map(|_| probe(&job.cluster, insider, ip, port))
            .take_while(|r| r != "open")
            .collect();
        assert!(
            got.len() < 3,
            "a job pod reaches the {what} port {ip}:{port}: {got:?}"
        );
        assert_eq!(
            probe(&job.cluster, "outsider", ip, port),
            "timeout",
            "the outsider must not reach the {what} port {ip}:{port}; rules:\n{:?}",
            job.cluster.sync_network_policies()
        );
    }

    // The policy is real: a listener on a port it does not list (7400, in pod 1) is reachable
    // from the node, which is never filtered, but not from pod 0 of the same job.
    let mut listener = job
        .cluster
        .pod_exec(
            &pod1,
            &[
                "python3",
                "-c",
                "import socket, time\ns = socket.socket(); s.bind(('0.0.0.0', 7400)); s.listen(4)\ntime.sleep(120)\n",
            ],
        )
        .unwrap()
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listening(&job.cluster, &pod1).contains(&7400) {
        assert!(Instant::now() < deadline, "no listener on 7400 in pod 1");
        std::thread::sleep(Duration::from_millis(100));
    }
    let from_node = std::net::TcpStream::connect_timeout(
        &format!("{ip1}:7400").parse().unwrap(),
        Duration::from_secs(5),
    );
    assert!(
        from_node.is_ok(),
        "the node reaches pod 1:7400: {from_node:?}"
    );
    assert_eq!(
        probe(&job.cluster, &pod0, &ip1, 7400),
        "timeout",
        "an unlisted port is blocked between the job's pods too"
    );
    // ... while the outsider, which no policy selects, is open to the job's pods.
    assert_eq!(
        probe(
            &job.cluster,
            &pod0,
            &pod_ip(&job.cluster.store().get(&PODS, NS, "outsider").unwrap()),
            7117
        ),
        "refused",
        "traffic to a pod no policy selects passes (nothing listens there: refused)"
    );
    let _ = listener.kill();
    let _ = listener.wait();
}
