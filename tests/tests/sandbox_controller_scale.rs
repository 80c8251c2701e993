//! `prrte-k8s controller` shared by every tenant, at scale: the process against a sandbox API
//! server of its own (no kubelet: MPIJobs suspended, or their Jobs made and never run), its
//! requests told from the test's by its user (`sandbox::harness::controller`).
//!
//! - MPIJobs of half a mebibyte it does not manage cost it no memory: its peak RSS stays below
//!   a bound a copy of them would pass.
//! - 200 MPIJobs at once, half another controller's, the controller killed with SIGKILL once
//!   half of its own are done and started again: each of its own gets its objects and status
//!   once, none twice, and nothing of the other controller's is touched.
//! - 10,000 idle connections to its metrics port: its `/readyz` answers and a new MPIJob still
//!   gets its Job and status.
#![forbid(unsafe_code)]
use anyhow::{bail, Result};
use sandbox::api::resources::JOBS;
use sandbox::api::{ApiOptions, ApiServer, Store};
use sandbox::harness::controller::scale::{self, ScaleOptions, OTHER};
use sandbox::harness::controller::{
    controller_kubeconfig, create_mpijob, mpijob, register_crd, ControllerProcess, MANAGED_BY,
};
use sandbox::harness::TestDir;
use std::time::{Duration, Instant};

const NS: &str = "default";

/// An API server of its own in `dir`, the MPIJob CRD registered, and a kubeconfig for the
/// controller.
async fn api(dir: &TestDir) -> Result<(ApiServer, std::path::PathBuf)> {
    let api = ApiServer::start(ApiOptions {
        dir: Some(dir.path().join("api")),
        ..Default::default()
    })
    .await?;
    register_crd(&api.store())?;
    let kubeconfig = controller_kubeconfig(&api, dir.path())?;
    Ok((api, kubeconfig))
}

/// The controller's arguments: each MPIJob the one Indexed Job, whose Job the tests await (the
/// API server serves JobSets, for which the default `--launcher-pod auto` would make JobSets).
const SHARED: &[&str] = &["--launcher-pod", "shared"];

/// Waits up to `limit` until the MPIJob `name` has its Job, controlled by it, and the status
/// condition `Created`.
async fn await_reconciled(
    store: &Store,
    proc: &mut ControllerProcess,
    name: &str,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    let rt = store
        .kind_of("kubeflow.org/v2beta1", "MPIJob")
        .ok_or_else(|| anyhow::anyhow!("no MPIJob CRD"))?;
    loop {
        let m = store.get(rt, NS, name).ok();
        let created = m.as_ref().is_some_and(|m| {
            m["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Created" && c["status"] == "True")
            })
        });
        let owned = m.as_ref().is_some_and(|m| {
            store
                .get(&JOBS, NS, name)
                .is_ok_and(|j| j["metadata"]["ownerReferences"][0]["uid"] == m["metadata"]["uid"])
        });
        if created && owned {
            return Ok(());
        }
        if !proc.running() {
            bail!("the controller exited:\n{}", proc.log_tail(30));
        }
        if Instant::now() >= deadline {
            bail!(
                "MPIJob {name} not reconciled within {limit:?} (status {:?}, Job {owned}):\n{}",
                m.map(|m| m["status"].clone()),
                proc.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// MPIJobs the controller does not manage (another controller's), 300 of 512 KiB each (one
/// big environment value: 150 MiB in all), are listed and watched at no cost of theirs: the
/// controller's peak RSS, by the time the MPIJob of its own created after them has its Job and
/// status, stays below 96 MiB. Kept whole, as the store kept every MPIJob before, they alone
/// take more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijobs_it_does_not_manage_cost_the_controller_no_memory() {
    const COUNT: usize = 300;
    const SIZE: usize = 512 << 10;
    const BOUND_KIB: u64 = 96 << 10;
    let dir = TestDir::new("controller-memory").unwrap();
    let (api, kubeconfig) = api(&dir).await.unwrap();
    let store = api.store();
    for i in 0..COUNT {
        create_mpijob(
            &store,
            mpijob(NS, &format!("big-{i:03}"), Some(OTHER), true, SIZE),
        )
        .unwrap();
    }
    create_mpijob(&store, mpijob(NS, "mine", Some(MANAGED_BY), true, 0)).unwrap();
    let mut proc = ControllerProcess::start(dir.path(), &kubeconfig, "memory", SHARED).unwrap();
    proc.await_leading(&store, "memory", Duration::from_secs(60))
        .unwrap();
    await_reconciled(&store, &mut proc, "mine", Duration::from_secs(120))
        .await
        .unwrap();
    let used = proc.usage().unwrap();
    eprintln!(
        "{COUNT} MPIJobs of {} KiB not its own: the controller's RSS {} KiB, peak {} KiB",
        SIZE >> 10,
        used.rss_kib,
        used.peak_rss_kib
    );
    assert!(
        used.peak_rss_kib < BOUND_KIB,
        "the controller's peak RSS {} KiB is not below {BOUND_KIB} KiB",
        used.peak_rss_kib
    );
    // Nothing of the big ones was made or written.
    let big = api
        .requests()
        .into_iter()
        .filter(|r| r.user == sandbox::harness::controller::CONTROLLER_USER)
        .filter(|r| r.path.contains("/big-"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect::<Vec<_>>();
    assert_eq!(big, Vec::<String>::new());
}

/// 200 MPIJobs created at once, suspended, half the controller's and half another
/// controller's (each of those with a Job that controller made); the controller killed with
/// SIGKILL once half of its own have their objects and status, and started again. Every one
/// of its own ends with its Job and its status, no object twice, no object or status written
/// twice, and no request of the controller's names one of the other's MPIJobs or Jobs, which
/// keep their resourceVersions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_mpijobs_with_the_controller_killed_midway_are_each_done_once() {
    let dir = TestDir::new("controller-scale").unwrap();
    let report = scale::run(&ScaleOptions {
        mpijobs: 200,
        kill_midway: true,
        limit: Duration::from_secs(240),
        dir: dir.path().to_path_buf(),
    })
    .await
    .unwrap();
    eprintln!("{report:#?}");
    assert_eq!((report.managed, report.foreign), (100, 100));
    let (at, _) = report.killed_after.expect("the controller was killed");
    assert!(
        (50..100).contains(&at),
        "killed with {at} of 100 done, not midway"
    );
    assert_eq!(report.incomplete, Vec::<String>::new(), "not done");
    assert_eq!(report.duplicates, Vec::<String>::new(), "made twice");
    assert_eq!(report.written_twice, Vec::<String>::new(), "written twice");
    assert_eq!(report.foreign_touched, Vec::<String>::new(), "the other's");
    assert!(report.requests.get("patch").copied().unwrap_or(0) >= 100 * 7);
}

/// `GET /metrics` on `addr` from the source address `from`: the body of its 200 answer.
async fn scrape_from(from: &str, addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut c = tokio::time::timeout(Duration::from_secs(10), s.connect(addr))
        .await
        .expect("connected within 10 s")
        .unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut out))
        .await
        .expect("answered within 10 s")
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// Raises this process's soft limit of descriptors to its hard limit (the controller it
/// starts inherits it and raises its own likewise); the limit now.
fn raise_nofile() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// 10,000 idle TCP connections to the controller's metrics port (opened 500 at a time, held
/// until the end): meanwhile its `/readyz` answers 200 and a new MPIJob gets its Job and its
/// `Created` status; the controller still runs, and every connection is closed at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_connections_leave_the_controller_ready_and_reconciling() {
    const CONNECTIONS: usize = 10_000;
    let limit = raise_nofile();
    assert!(
        limit as usize > CONNECTIONS + 1_000,
        "RLIMIT_NOFILE {limit}: too low for {CONNECTIONS} connections"
    );
    let dir = TestDir::new("controller-idle").unwrap();
    let (api, kubeconfig) = api(&dir).await.unwrap();
    let store = api.store();
    let mut proc = ControllerProcess::start(dir.path(), &kubeconfig, "idle", SHARED).unwrap();
    proc.await_leading(&store, "idle", Duration::from_secs(60))
        .unwrap();
    let metrics = proc.metrics;
    let mut held = Vec::with_capacity(CONNECTIONS);
    while held.len() < CONNECTIONS {
        let batch = (CONNECTIONS - held.len()).min(500);
        let opened = futures::future::join_all((0..batch).map(|_| {
            tokio::time::timeout(
                Duration::from_secs(30),
                tokio::net::TcpStream::connect(metrics),
            )
        }))
        .await;
        for c in opened {
            match c {
                Ok(Ok(s)) => held.push(s),
                Ok(Err(e)) => panic!("connection {} refused: {e}", held.len()),
                Err(_) => panic!("connection {} not accepted within 30 s", held.len()),
            }
        }
    }
    eprintln!("{} idle connections to {metrics}", held.len());
    let (code, body) = tokio::task::block_in_place(|| proc.probe("/readyz")).unwrap();
    assert_eq!((code, body.trim()), (200, "ok"));
    create_mpijob(&store, mpijob(NS, "after", Some(MANAGED_BY), false, 0)).unwrap();
    await_reconciled(&store, &mut proc, "after", Duration::from_secs(60))
        .await
        .unwrap();
    let (code, _) = tokio::task::block_in_place(|| proc.probe("/readyz")).unwrap();
    assert_eq!(code, 200);
    // From an address of its own: the idle connections' address is the one the metrics port
    // drops first.
    let text = scrape_from("127.0.0.2", metrics).await;
    assert!(
        text.contains("prrte_k8s_controller_reconciles_total"),
        "{text}"
    );
    assert!(proc.running(), "{}", proc.log_tail(30));
    drop(held);
}
