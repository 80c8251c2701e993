//! PMIx allocation requests answered by Kubernetes (`ras k8s`'s `modify`, PRRTE patch 0003):
//! an elastic Indexed Job of 2 agent pods (2 slots each) whose pod-0 agent runs the DVM.
//! - Rank 0 of an MPI program (in pod 1: its request goes through that pod's prted to prte)
//!   asks for 2 nodes (`PMIX_ALLOC_EXTEND`), gets the 2 new pods' host names, spawns children
//!   there, and gives them back (`PMIX_ALLOC_RELEASE`): the Job is back at 2 pods, the pods are
//!   gone, `prun -n 4 hostname` runs 2 per pod on the 2 left, and 10 more jobs run.
//!   The released pods cannot come back into the same DVM: refused with the reason, the Job
//!   never raised.
//! - PMIx's own `palloc` does the same from a pod's shell, and `prrte-k8s shrink N`.
//! - Requests refused, each with its PMIx status and reason, the Job unchanged after each.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

const TOOL_LIMIT: Duration = Duration::from_secs(180);

fn spec(name: &str, pods: usize) -> JobSpec<'_> {
    let mut spec = JobSpec::persistent_dvm(name, pods);
    spec.cpus = vec!["2"];
    spec.agent_args = vec![vec!["--dvm-head".into(), "auto".into()]];
    spec
}

fn uri_file(job: &Job, i: usize) -> PathBuf {
    job.pod_tmp(i).join("dvm/dvm.uri")
}

/// The DVM's URI (the first line of the file the agent publishes).
fn dvm_uri(job: &Job) -> String {
    std::fs::read_to_string(uri_file(job, 0))
        .unwrap()
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

fn prrte_k8s(job: &Job, i: usize, args: &[&str]) -> Output {
    let exe = harness::workspace_bin("prrte-k8s").unwrap();
    let exe = exe.to_str().unwrap();
    let mut argv = vec![exe];
    argv.extend(args);
    job.exec_in_pod(i, &argv, TOOL_LIMIT)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", head_log(job)))
}

fn run(job: &Job, i: usize, argv: &[&str]) -> Output {
    job.exec_in_pod(i, argv, TOOL_LIMIT)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", head_log(job)))
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

/// The Job's `metadata.generation` (each change of its spec counts one).
fn generation(job: &Job) -> i64 {
    let j = job
        .cluster
        .store()
        .get(&sandbox::api::resources::JOBS, NS, &job.name)
        .unwrap();
    j["metadata"]["generation"].as_i64().unwrap_or(0)
}

/// The names of the Job's pods in the API, by completion index.
fn pod_indexes(job: &Job) -> Vec<String> {
    let pods = job
        .cluster
        .store()
        .list(
            &sandbox::api::resources::PODS,
            Some(NS),
            &sandbox::api::ListQuery::default(),
        )
        .unwrap();
    let mut idx: Vec<String> = pods
        .items
        .iter()
        .filter(|p| {
            p["metadata"]["labels"]["batch.kubernetes.io/job-name"].as_str() == Some(&job.name)
        })
        .filter_map(|p| {
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .map(String::from)
        })
        .collect();
    idx.sort();
    idx
}

/// The name of the Job's pod of completion index `index`, if there is one.
fn pod_named(job: &Job, index: &str) -> Option<String> {
    let pods = job
        .cluster
        .store()
        .list(
            &sandbox::api::resources::PODS,
            Some(NS),
            &sandbox::api::ListQuery::default(),
        )
        .ok()?;
    pods.items
        .iter()
        .find(|p| {
            p["metadata"]["labels"]["batch.kubernetes.io/job-name"].as_str() == Some(&job.name)
                && p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"].as_str()
                    == Some(index)
        })
        .and_then(|p| p["metadata"]["name"].as_str().map(String::from))
}

fn wait_pods(job: &Job, want: &[&str], limit: Duration) {
    let start = Instant::now();
    loop {
        let have = pod_indexes(job);
        if have == want {
            return;
        }
        if start.elapsed() > limit {
            let pods = job
                .cluster
                .store()
                .list(
                    &sandbox::api::resources::PODS,
                    Some(NS),
                    &sandbox::api::ListQuery::default(),
                )
                .unwrap();
            let extra: Vec<String> = pods
                .items
                .iter()
                .filter(|p| {
                    let i = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                        .as_str()
                        .unwrap_or("");
                    !want.contains(&i)
                })
                .map(|p| {
                    format!(
                        "{}: metadata {} status {}",
                        p["metadata"]["name"], p["metadata"], p["status"]
                    )
                })
                .collect();
            panic!(
                "the Job's pods are {have:?}, want {want:?}: {}\n{}",
                extra.join("\n"),
                head_log(job)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The end of pod 0's log (the DVM head's output), for failure messages.
fn head_log(job: &Job) -> String {
    let log = job
        .cluster
        .pod_log(NS, &job.pods[0])
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let cut = log.len().saturating_sub(6000);
    let cut = (cut..log.len())
        .find(|i| log.is_char_boundary(*i))
        .unwrap_or(0);
    format!("--- pod 0's log (end)\n{}", &log[cut..])
}

fn hosts_of(out: &Output) -> BTreeMap<String, usize> {
    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        *per_host.entry(l.trim().to_string()).or_default() += 1;
    }
    per_host
}

/// Kills a spawned command's process group when the test ends, however it ends.
struct KillGroupOnDrop(u32);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The pmix tool sending one request (tests/programs/alloc_request.c).
fn request_tool(dir: &Path) -> PathBuf {
    harness::pmix_program(dir, "alloc_request", &["-O1", "-Wall", "-Werror"]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_extends_spawns_onto_the_new_pods_and_releases_them() {
    let mut job = ElasticJob::start(spec("alloc", 2), 4).await.unwrap();
    for i in 0..2 {
        wait_for_text(&uri_file(&job, i), "tcp4://", Duration::from_secs(90)).unwrap();
    }
    let prog = harness::mpi_pmix_program("alloc_spawn").unwrap();
    // Rank 0 in pod 1: its prted relays the requests to prte.
    let out = prrte_k8s(
        &job,
        1,
        &[
            "prun",
            "-n",
            "1",
            "--host",
            "alloc-1:2",
            prog.to_str().unwrap(),
            "2",
        ],
    );
    let t = format!("{}\n{}", text(&out), head_log(&job));
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("EXTEND status=PMIX_SUCCESS nodes=alloc-2,alloc-3 id=alloc#"),
        "{t}"
    );
    assert!(t.contains("SPAWN children=2 sum=3 OK"), "{t}");
    assert!(
        t.contains("RELEASE status=PMIX_SUCCESS nodes=alloc-2,alloc-3"),
        "{t}"
    );
    assert_eq!(parallelism(&job), 2);
    wait_pods(&job, &["0", "1"], Duration::from_secs(30));
    job.refresh(2).await.unwrap();
    assert_eq!(job.pids_in_pod(1, "prted").unwrap().len(), 1);
    let out = prrte_k8s(&job, 1, &["prun", "-n", "4", "hostname"]);
    assert!(out.status.success(), "prun -n 4 hostname: {}", text(&out));
    let want: BTreeMap<String, usize> = (0..2).map(|i| (format!("alloc-{i}"), 2)).collect();
    assert_eq!(hosts_of(&out), want, "{}", text(&out));
    for n in 0..10 {
        let out = prrte_k8s(&job, n % 2, &["prun", "-n", "4", "true"]);
        assert!(
            out.status.success(),
            "job {n} after the release: {}",
            text(&out)
        );
    }
    // Standard input still reaches rank 0.
    let exe = harness::workspace_bin("prrte-k8s").unwrap();
    let line = format!("echo stdin-after-release | {} prun -n 1 cat", exe.display());
    let out = run(&job, 1, &["/bin/sh", "-c", &line]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stdin-after-release"),
        "{}\n{}",
        text(&out),
        head_log(&job)
    );

    // The released pods cannot come back into this DVM (PRRTE 3.0.8 keeps their nodes with
    // their ended daemons): refused with the reason before the Job is raised (no pod made).
    let dir = harness::TestDir::new("alloc-again").unwrap();
    let tool = request_tool(dir.path());
    let before = generation(&job);
    let (got, t) = ask(&job, &tool, &["extend", "nodes=1"]);
    assert_eq!(got, "PMIX_ERR_NOT_SUPPORTED", "{t}");
    let log = job.cluster.pod_log(NS, &job.pods[0]).expect("pod 0's log");
    wait_for_text(
        &log,
        "cannot take a released node back",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(generation(&job), before, "the Job was raised");
    assert_eq!(parallelism(&job), 2);
    wait_pods(&job, &["0", "1"], Duration::from_secs(30));
    let out = prrte_k8s(&job, 1, &["prun", "-n", "4", "hostname"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = prrte_k8s(&job, 0, &["pterm"]);
    assert!(out.status.success(), "pterm: {}", text(&out));
}

/// PMIx's `palloc` from a pod's shell, and `prrte-k8s shrink`: the same requests as a rank's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn palloc_and_prrte_k8s_shrink_grow_and_shrink_the_dvm() {
    let mut job = ElasticJob::start(spec("palloc", 2), 4).await.unwrap();
    for i in 0..2 {
        wait_for_text(&uri_file(&job, i), "tcp4://", Duration::from_secs(90)).unwrap();
    }
    let palloc = harness::prefix().join("bin/palloc");
    let uri = dvm_uri(&job);
    let out = run(
        &job,
        1,
        &[
            palloc.to_str().unwrap(),
            "--uri",
            &uri,
            "--extend",
            "--nodes",
            "2",
        ],
    );
    let t = text(&out);
    assert!(
        t.contains("granted"),
        "palloc --extend: {t}\n{}",
        head_log(&job)
    );
    assert_eq!(parallelism(&job), 4);
    job.refresh(4).await.unwrap();
    let out = prrte_k8s(&job, 1, &["prun", "-n", "8", "hostname"]);
    assert!(
        out.status.success(),
        "prun -n 8 hostname: {}\n{}",
        text(&out),
        head_log(&job)
    );
    let want: BTreeMap<String, usize> = (0..4).map(|i| (format!("palloc-{i}"), 2)).collect();
    assert_eq!(hosts_of(&out), want, "{}", text(&out));
    // `prrte-k8s shrink 1` takes the highest pod, palloc --shrink the one named.
    let out = prrte_k8s(&job, 1, &["shrink", "1"]);
    assert!(
        out.status.success(),
        "shrink 1: {}\n{}",
        text(&out),
        head_log(&job)
    );
    assert_eq!(parallelism(&job), 3);
    wait_pods(&job, &["0", "1", "2"], Duration::from_secs(30));
    let out = run(
        &job,
        0,
        &[
            palloc.to_str().unwrap(),
            "--uri",
            &uri,
            "--shrink",
            "--nodelist",
            "palloc-2",
        ],
    );
    let t = text(&out);
    assert!(
        t.contains("granted"),
        "palloc --shrink: {t}\n{}",
        head_log(&job)
    );
    assert_eq!(parallelism(&job), 2);
    wait_pods(&job, &["0", "1"], Duration::from_secs(30));
    job.refresh(2).await.unwrap();
    // Past what can be given back: refused, named by prrte-k8s shrink.
    let out = prrte_k8s(&job, 1, &["shrink", "2"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("PMIX_ERR_OUT_OF_RESOURCE"),
        "{}",
        text(&out)
    );
    let out = prrte_k8s(&job, 1, &["prun", "-n", "4", "hostname"]);
    assert!(out.status.success(), "{}", text(&out));
    let want: BTreeMap<String, usize> = (0..2).map(|i| (format!("palloc-{i}"), 2)).collect();
    assert_eq!(hosts_of(&out), want, "{}", text(&out));
    let out = prrte_k8s(&job, 0, &["pterm"]);
    assert!(out.status.success(), "pterm: {}", text(&out));
}

/// Points the readiness probe of the Job's pod template (new pods only) at `port`.
fn probe_port(job: &Job, port: u16) {
    let store = job.cluster.store();
    let j = store
        .get(&sandbox::api::resources::JOBS, NS, &job.name)
        .unwrap();
    let mut template = j["spec"]["template"].clone();
    template["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = port.into();
    store
        .patch(
            &sandbox::api::resources::JOBS,
            NS,
            &job.name,
            sandbox::api::Patch::Merge(serde_json::json!({"spec": {"template": template}})),
            sandbox::api::Part::Main,
            false,
        )
        .unwrap();
}

/// One request through the tool: its answer's status line and the whole output.
fn ask(job: &Job, tool: &Path, args: &[&str]) -> (String, String) {
    let uri = dvm_uri(job);
    let mut argv = vec![tool.to_str().unwrap(), uri.as_str()];
    argv.extend(args);
    let out = run(job, 1, &argv);
    let t = text(&out);
    let status = t
        .lines()
        .find_map(|l| l.strip_prefix("ANSWER status="))
        .unwrap_or("none")
        .to_string();
    (status, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_say_why_and_change_nothing() {
    let job = ElasticJob::start(spec("refuse", 2), 3).await.unwrap();
    for i in 0..2 {
        wait_for_text(&uri_file(&job, i), "tcp4://", Duration::from_secs(90)).unwrap();
    }
    let dir = harness::TestDir::new("alloc-refuse").unwrap();
    let tool = request_tool(dir.path());
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["extend", "nodes=2"],
            "PMIX_ERR_OUT_OF_RESOURCE",
            "beyond its --max-pods 3",
        ),
        (
            &["extend"],
            "PMIX_ERR_BAD_PARAM",
            "needs PMIX_ALLOC_NUM_NODES",
        ),
        (
            &["extend", "nodes=1", "time=10"],
            "PMIX_ERR_BAD_PARAM",
            "cannot honour pmix.alloc.time",
        ),
        (
            &["new", "nodes=1"],
            "PMIX_ERR_NOT_SUPPORTED",
            "PMIX_ALLOC_NEW is not served",
        ),
        (
            &["release", "nodes=2"],
            "PMIX_ERR_OUT_OF_RESOURCE",
            "at most 1 can be released",
        ),
        (
            &["release", "nodelist=refuse-0"],
            "PMIX_ERR_BAD_PARAM",
            "highest pods only",
        ),
        (
            &["cancel", "reqid=nothing"],
            "PMIX_ERR_NOT_FOUND",
            "no allocation request \"nothing\"",
        ),
    ];
    // PMIx 5.0.5's client drops the info of an error answer: the reason is in prte's output
    // (pod 0's log), one line per refusal naming the requester.
    let log = job.cluster.pod_log(NS, &job.pods[0]).expect("pod 0's log");
    for (args, status, reason) in cases {
        let (got, t) = ask(&job, &tool, args);
        assert_eq!(&got, status, "{args:?}: {t}");
        wait_for_text(&log, reason, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{args:?}: {e}\n{}", head_log(&job)));
        assert_eq!(parallelism(&job), 2, "{args:?} changed the Job");
    }
    // New pods that never become Ready (their readiness probe points where nothing listens):
    // an extension waits for them, so what happens meanwhile is certain.
    probe_port(&job, 7999);
    let uri = dvm_uri(&job);
    // The first request's own process cancels it, once its standard input ends.
    let mut first = job
        .cluster
        .pod_exec(
            &job.pods[1],
            &[
                tool.to_str().unwrap(),
                &uri,
                "extend",
                "nodes=1",
                "reqid=one",
                "then=cancel",
            ],
        )
        .unwrap();
    std::os::unix::process::CommandExt::process_group(&mut first, 0);
    first
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut first = first.spawn().unwrap();
    let _group = KillGroupOnDrop(first.id());
    let go = first.stdin.take().unwrap();
    let (tx, first_done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(first.wait_with_output());
    });
    let start = Instant::now();
    while parallelism(&job) != 3 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the first extension raised nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its pod's agent up (a pod deleted before its PID 1 handles SIGTERM waits out its grace
    // period, as on any node).
    let start = Instant::now();
    let pod2 =
        loop {
            if let Some(p) = pod_named(&job, "2") {
                if job.cluster.pod_log(NS, &p).is_some_and(|l| {
                    std::fs::read_to_string(l).is_ok_and(|t| t.contains("listening"))
                }) {
                    break p;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the new pod's agent never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
    // Another request meanwhile: refused, busy.
    let (got, t) = ask(&job, &tool, &["extend", "nodes=1"]);
    assert_eq!(got, "PMIX_ERR_RESOURCE_BUSY", "{t}");
    wait_for_text(&log, "request one is being served", Duration::from_secs(10)).unwrap();
    // Another process cannot cancel it: refused, the request kept.
    let (got, t) = ask(&job, &tool, &["cancel", "reqid=one"]);
    assert_eq!(got, "PMIX_ERR_NO_PERMISSIONS", "{t}");
    wait_for_text(
        &log,
        "only the process that made it may cancel it",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(parallelism(&job), 3);
    // The first one cancelled by its own process: the cancel succeeds, the extension ends
    // cancelled, the Job is back at 2 pods and the pod that never came is gone.
    drop(go);
    let first = first_done
        .recv_timeout(TOOL_LIMIT)
        .expect("the first request's tool ended")
        .unwrap();
    let t1 = text(&first);
    assert!(t1.contains("CANCEL status=PMIX_SUCCESS"), "{t1}");
    assert!(t1.contains("ANSWER status=PMIX_ERR_JOB_CANCELED"), "{t1}");
    assert_eq!(parallelism(&job), 2);
    wait_pods(&job, &["0", "1"], Duration::from_secs(30));
    assert!(pod_named(&job, "2").is_none(), "{pod2} is still there");
    // Pods that never come: the request's own timeout (PMIX_TIMEOUT) ends it, naming them.
    let (got, t) = ask(&job, &tool, &["extend", "nodes=1", "timeout=3"]);
    assert_eq!(got, "PMIX_ERR_TIMEOUT", "{t}");
    wait_for_text(
        &log,
        "refuse was lowered back to 2 pods",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(parallelism(&job), 2);
    wait_pods(&job, &["0", "1"], Duration::from_secs(30));
    // Pods that come: the extension succeeds, and the DVM uses the new pod.
    probe_port(&job, 7118);
    let (got, t) = ask(&job, &tool, &["extend", "nodes=1"]);
    assert_eq!(got, "PMIX_SUCCESS", "{t}");
    assert!(t.contains("INFO pmix.alloc.nlist=refuse-2"), "{t}");
    assert_eq!(parallelism(&job), 3);
    let out = prrte_k8s(&job, 0, &["prun", "-n", "6", "hostname"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(hosts_of(&out).len(), 3, "{}", text(&out));
    // A Job that is not elastic (no max-pods annotation): refused with the remedy.
    job.cluster
        .store()
        .patch(
            &sandbox::api::resources::JOBS,
            NS,
            &job.name,
            sandbox::api::Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"prrte-k8s.io/max-pods": null}}}),
            ),
            sandbox::api::Part::Main,
            false,
        )
        .unwrap();
    let (got, t) = ask(&job, &tool, &["extend", "nodes=1"]);
    assert_eq!(got, "PMIX_ERR_NOT_SUPPORTED", "{t}");
    wait_for_text(&log, "--elastic --max-pods", Duration::from_secs(10)).unwrap();
    assert_eq!(parallelism(&job), 3);
    let out = prrte_k8s(&job, 0, &["pterm"]);
    assert!(out.status.success(), "pterm: {}", text(&out));
}
