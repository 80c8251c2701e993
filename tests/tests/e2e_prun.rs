//! `prrte-k8s prun` from any pod against a DVM started by the pod-0 agent (`--dvm-head auto`),
//! `prrte-k8s pterm`, and `prrte-k8s doctor` on a good job and on broken ones.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

/// Every prun/pterm/doctor gets this bound.
const TOOL_LIMIT: Duration = Duration::from_secs(90);

/// A job of agent pods with 4 slots each whose agents publish the DVM URI in
/// `$(TMPDIR)/dvm/dvm.uri` (a directory the agent has to create). Every pod has what a user's
/// pod spec would set: the PRRTE prefix, the components and the job's secret file.
fn spec(name: &str, pods: usize) -> JobSpec<'_> {
    let mut spec = JobSpec::persistent_dvm(name, pods);
    spec.cpus = vec!["4"; pods];
    spec
}

fn uri_file(job: &Job, i: usize) -> PathBuf {
    job.pod_tmp(i).join("dvm/dvm.uri")
}

fn cli() -> String {
    harness::workspace_bin("prrte-k8s")
        .unwrap()
        .display()
        .to_string()
}

/// `prrte-k8s ARGS` in pod `i` (bounded).
fn prrte_k8s(job: &Job, i: usize, args: &[&str]) -> Output {
    let exe = cli();
    let mut argv = vec![exe.as_str()];
    argv.extend(args);
    job.exec_in_pod(i, &argv, TOOL_LIMIT).unwrap()
}

fn pod_ip(job: &Job, i: usize) -> String {
    job.cluster
        .pod_exec_info(NS, &job.pods[i])
        .expect("exec info of a running pod")
        .ip
}

fn check_allreduce(out: &Output, n: usize, what: &str) {
    let t = text(out);
    assert!(out.status.success(), "{what} failed: {t}");
    let lines = allreduce_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(lines.len(), n, "{what}: {t}");
    assert!(
        lines.iter().all(|l| l.1 == n && l.3),
        "{what}: a rank got the wrong sum: {t}"
    );
    let ranks: BTreeSet<usize> = lines.iter().map(|l| l.0).collect();
    assert_eq!(ranks, (0..n).collect(), "{what}: {t}");
}

/// Wait (bounded) until no prte and no prted runs in any pod.
fn wait_no_prrte(job: &Job, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let mut left = Vec::new();
        for i in 0..job.pods.len() {
            for comm in ["prte", "prted"] {
                for pid in job.pids_in_pod(i, comm).unwrap() {
                    left.push(format!("{comm} {pid} in pod {i}"));
                }
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running after {limit:?}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue acceptance: the pod-0 agent runs the DVM; `prrte-k8s prun` from two other pods at the
/// same time; `prrte-k8s pterm` from a third stops the DVM and nothing of PRRTE is left, while
/// the agents keep serving. `prrte-k8s doctor` passes every check in this job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prun_from_any_pod_against_the_pod0_dvm_head() {
    let mut spec = spec("prun", 6);
    spec.agent_args = vec![vec!["--dvm-head".into(), "auto".into()]];
    let job = Job::start(spec).await.unwrap();
    let prog = harness::mpi_program("allreduce").unwrap();
    let prog = prog.to_str().unwrap();

    // The DVM is up once its URI reached every pod (prte writes pod 0's, the agents the others').
    for i in 0..6 {
        wait_for_text(&uri_file(&job, i), "tcp4://", Duration::from_secs(90)).unwrap();
    }
    let uri = std::fs::read_to_string(uri_file(&job, 0)).unwrap();
    let ip0 = pod_ip(&job, 0);
    assert!(
        uri.contains(&format!("tcp4://{ip0}:7120")),
        "prte's tool listener is on pod 0's address: {uri}"
    );
    // prte's --report-uri file holds the URI, then the PMIx version.
    let uri = uri.lines().next().unwrap().to_string();
    for i in 1..6 {
        assert_eq!(
            std::fs::read_to_string(uri_file(&job, i)).unwrap(),
            format!("{uri}\n"),
            "pod {i}'s URI"
        );
    }
    let out = prrte_k8s(&job, 3, &["dvm-uri"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{uri}\n"));

    let doctor = prrte_k8s(&job, 3, &["doctor"]);
    let t = text(&doctor);
    eprintln!("{t}");
    assert!(
        doctor.status.success(),
        "doctor must pass in a good job: {t}"
    );
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    assert!(!stdout.contains("[FAIL]"), "{t}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("[ok]") && l.contains("agent of pod"))
            .count(),
        6,
        "{t}"
    );

    // Two pruns at the same time, from pods 4 and 2.
    let exe = cli();
    let cmd = |i: usize| {
        job.cluster
            .pod_exec(&job.pods[i], &[exe.as_str(), "prun", "-n", "12", prog])
            .unwrap()
    };
    let (c4, c2) = (cmd(4), cmd(2));
    let (o4, o2) = std::thread::scope(|s| {
        let a = s.spawn(move || harness::run_with_timeout(c4, TOOL_LIMIT));
        let b = s.spawn(move || harness::run_with_timeout(c2, TOOL_LIMIT));
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    check_allreduce(&o4, 12, "prun from pod 4");
    check_allreduce(&o2, 12, "prun from pod 2");

    let out = prrte_k8s(&job, 5, &["pterm"]);
    assert!(out.status.success(), "pterm from pod 5: {}", text(&out));
    wait_no_prrte(&job, Duration::from_secs(30));
    for i in 0..6 {
        assert!(
            !job.pids_in_pod(i, "prrte-k8s-agent").unwrap().is_empty(),
            "the agent of pod {i} keeps running"
        );
    }
    // The URI is withdrawn everywhere, and the CLI says what to do.
    let deadline = Instant::now() + Duration::from_secs(10);
    while (0..6).any(|i| uri_file(&job, i).exists()) {
        assert!(Instant::now() < deadline, "DVM URI files left after pterm");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = prrte_k8s(&job, 3, &["prun", "-n", "1", "true"]);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("no DVM URI") && t.contains("--dvm-head auto"),
        "names cause and remedy: {t}"
    );
}

fn fail_lines(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("[FAIL]") || l.contains("remedy:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `prrte-k8s doctor` names each failure with its remedy: an agent holding another secret, a pod
/// whose agent is not listening (here: on another port), components not installed, and then the
/// RoleBinding gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_failures_and_remedies() {
    let dir = harness::TestDir::new("doctor-other").unwrap();
    let other = dir.secret("other").unwrap();
    let empty = dir.sub("empty-pkglibdir").unwrap();
    let mut spec = spec("doc", 3);
    spec.agent_secret = vec![None, Some(other), None];
    spec.agent_args = vec![vec![], vec![], vec!["--port".into(), "7119".into()]];
    let job = Job::start(spec).await.unwrap();
    let exe = cli();
    let pkglib = format!("PRTE_PKGLIBDIR={}", empty.display());
    let out = job
        .exec_in_pod(
            0,
            &["env", &pkglib, &exe, "doctor", "--agent-timeout", "3"],
            TOOL_LIMIT,
        )
        .unwrap();
    let t = text(&out);
    eprintln!("{t}");
    assert!(!out.status.success(), "doctor must fail: {t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fails = fail_lines(&out);
    assert!(stdout.contains("[ok]   in-cluster config"), "{t}");
    assert!(stdout.contains("[ok]   RBAC"), "{t}");
    assert!(stdout.contains("[ok]   pods: 3 ready pods"), "{t}");
    assert!(
        stdout.contains(&format!("[ok]   agent of pod {}", job.pods[0])),
        "{t}"
    );
    assert!(
        fails.contains(&format!("[FAIL] agent of pod {}", job.pods[1]))
            && fails.contains("authentication failed"),
        "wrong secret named: {fails}"
    );
    assert!(
        fails.contains("mount the same Secret"),
        "secret remedy: {fails}"
    );
    assert!(
        fails.contains(&format!("[FAIL] agent of pod {}", job.pods[2]))
            && fails.contains("cannot reach"),
        "agent down named: {fails}"
    );
    assert!(fails.contains("entrypoint"), "agent remedy: {fails}");
    assert!(
        fails.contains("[FAIL] k8s components: not installed")
            && fails.contains("prte_mca_ras_k8s.so"),
        "{fails}"
    );
    assert!(
        fails.contains("PRTE_PKGLIBDIR") && fails.contains("install-components.sh"),
        "{fails}"
    );
    assert_eq!(
        stdout.matches("[FAIL]").count(),
        3,
        "exactly the three broken things: {t}"
    );

    let kubectl =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let mut c = std::process::Command::new(&kubectl);
    c.arg("--kubeconfig").arg(job.cluster.kubeconfig()).args([
        "delete",
        "rolebinding",
        ROLEBINDING,
    ]);
    let del = harness::run_with_timeout(c, Duration::from_secs(30)).unwrap();
    assert!(
        del.status.success(),
        "kubectl delete rolebinding: {}",
        text(&del)
    );
    let out = job
        .exec_in_pod(0, &[&exe, "doctor", "--timeout", "5"], TOOL_LIMIT)
        .unwrap();
    let t = text(&out);
    eprintln!("{t}");
    assert!(!out.status.success(), "{t}");
    let fails = fail_lines(&out);
    assert!(
        fails.contains("[FAIL] RBAC: the service account may not get, list, watch pods"),
        "{t}"
    );
    assert!(
        fails.contains("rbac.yaml") && fails.contains("resources: [\"pods\"]"),
        "RBAC remedy: {t}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[ok]   in-cluster config"),
        "{t}"
    );
}
