//! Liveness on the launcher's connection to an agent: a pod cut off from the network mid-run
//! (its packets silently dropped, nothing closed) is noticed by both ends through heartbeats,
//! within the limit the parameters give (10 s by default), and a quiet, busy job is not.
#![forbid(unsafe_code)]

mod agent_support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agent_support::*;
use prrte_k8s::launch::{
    ExitDesc, LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher,
};
use prrte_k8s::protocol::liveness::Heartbeat;

/// A TCP relay to `to` for one connection that can be cut off: then it neither reads nor
/// writes, as a partitioned network, keeping both sockets open.
struct Link {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Link {
    fn to(to: SocketAddr) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (c, d) = (cut.clone(), done.clone());
        let accept = std::thread::spawn(move || {
            listener.set_nonblocking(true).unwrap();
            let client = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        if d.load(Ordering::SeqCst) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            };
            client.set_nonblocking(false).unwrap();
            let server = TcpStream::connect(to).unwrap();
            let pumps = [
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    &c,
                    &d,
                ),
                pump(server, client, &c, &d),
            ];
            for p in pumps {
                p.join().unwrap();
            }
        });
        Link {
            addr,
            cut,
            done,
            threads: vec![accept],
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Copies `from` to `to` until either ends or the link is done; while cut, moves nothing.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    cut: &Arc<AtomicBool>,
    done: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let (cut, done) = (cut.clone(), done.clone());
    std::thread::spawn(move || {
        from.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut buf = [0u8; 16384];
        while !done.load(Ordering::SeqCst) {
            if cut.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
    })
}

fn opts(secret: &[u8], heartbeat: Heartbeat) -> LaunchOptions {
    LaunchOptions {
        secret: Some(secret.to_vec()),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_secs(1),
        heartbeat,
    }
}

fn start(addr: SocketAddr, opts: LaunchOptions) -> (Launcher, Receiver<LaunchEvent>) {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let target = LaunchTarget {
        id: 3,
        pod: "job-worker-3".into(),
        addr,
    };
    let request = LaunchRequest {
        argv: launch_args(&["--sleep"]),
        env: vec![],
        dvm_uri: None,
    };
    let launcher = Launcher::start(
        vec![(target, request)],
        opts,
        Box::new(move |e| {
            let _ = tx.lock().unwrap().send(e);
        }),
    );
    match rx.recv_timeout(WAIT).expect("no launcher event in time") {
        LaunchEvent::Started { id: 3, .. } => {}
        other => panic!("unexpected {other:?}"),
    }
    (launcher, rx)
}

/// An agent that logs at debug level (each heartbeat it hears).
fn debug_agent(td: &TestDir, extra: &[&str]) -> AgentProc {
    AgentProc::spawn_args(
        &AgentProc::test_args(td, extra),
        &[("PRRTE_K8S_LOG", "debug")],
    )
    .expect("agent did not start listening")
}

/// Cuts `link` once prted runs and the agent heard a heartbeat; returns when the launcher
/// reported the pod lost, how long after the cut, and the reason.
fn cut_and_wait_lost(
    td: &TestDir,
    agent: &AgentProc,
    link: &Link,
    rx: &Receiver<LaunchEvent>,
) -> (Duration, String) {
    td.wait_pid("prted.pid");
    agent
        .wait_log(WAIT, |v| v["message"] == "ping")
        .expect("no heartbeat reached the agent");
    link.cut();
    let t0 = Instant::now();
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(LaunchEvent::Exited {
            id: 3,
            pod,
            status: ExitDesc::ConnectionLost(why),
        }) => {
            assert_eq!(pod, "job-worker-3");
            (t0.elapsed(), why)
        }
        other => panic!("expected the pod lost, got {other:?}"),
    }
}

fn silent_launcher_logged(agent: &AgentProc, within: Duration) -> bool {
    agent
        .wait_log(within, |v| {
            v.to_string().contains("the launcher was silent for")
        })
        .is_some()
}

#[test]
fn a_cut_off_pod_is_noticed_by_both_ends_within_the_limit() {
    let td = TestDir::new();
    let agent = debug_agent(
        &td,
        &[
            "--heartbeat-timeout",
            "2",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let link = Link::to(agent.addr);
    let beat = Heartbeat {
        interval: Duration::from_millis(300),
        misses: 3,
    };
    let (launcher, rx) = start(link.addr, opts(&td.secret, beat));
    let prted = td.wait_pid("prted.pid");
    let (after, why) = cut_and_wait_lost(&td, &agent, &link, &rx);
    // Silent for more than 3 × 300 ms since the last answer (heard up to one interval before
    // the cut), noticed at the next beat: between 0.6 and 1.2 s after the cut.
    assert!(
        after >= Duration::from_millis(600) && after < Duration::from_secs(3),
        "{after:?}: {why}"
    );
    assert!(why.contains("silent") && why.contains("cut off"), "{why}");
    // The agent, hearing nothing for 2 s, stops prted (kill grace 1 s).
    assert!(
        silent_launcher_logged(&agent, Duration::from_secs(10)),
        "{:?}",
        agent.logs()
    );
    assert!(all_gone(&[prted], Duration::from_secs(5)), "prted survived");
    // Its metrics count the daemon and the launcher's missed heartbeats.
    let metrics = agent_support::scrape_metrics(agent.metrics.unwrap());
    for line in [
        "prrte_k8s_agent_daemons_started_total{via=\"launch\"} 1\n",
        "prrte_k8s_agent_heartbeats_missed_total{peer=\"launcher\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line:?} missing in {metrics}");
    }
    drop(launcher);
    drop(link);
}

#[test]
fn by_default_a_cut_off_pod_is_noticed_within_10_seconds() {
    let td = TestDir::new();
    let agent = debug_agent(&td, &[]);
    let link = Link::to(agent.addr);
    let (launcher, rx) = start(link.addr, opts(&td.secret, Heartbeat::default()));
    let prted = td.wait_pid("prted.pid");
    let (after, why) = cut_and_wait_lost(&td, &agent, &link, &rx);
    // More than 4 × 2 s since the last answer, which came at most one interval before the
    // cut: between 6 and 10 s.
    assert!(
        after >= Duration::from_secs(6) && after <= Duration::from_secs(10),
        "noticed after {after:?}: {why}"
    );
    let t0 = Instant::now();
    assert!(silent_launcher_logged(&agent, Duration::from_secs(10)));
    assert!(all_gone(&[prted], Duration::from_secs(5)), "prted survived");
    // The agent's limit (10 s) runs from the last ping it heard, before the cut.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(launcher);
    drop(link);
}

#[test]
fn a_quiet_job_on_a_busy_machine_is_not_taken_for_lost() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &["--heartbeat-timeout", "2"]);
    let beat = Heartbeat {
        interval: Duration::from_millis(500),
        misses: 4,
    };
    let (launcher, rx) = start(agent.addr, opts(&td.secret, beat));
    // A launcher without heartbeats is never watched by the agent.
    let td_off = TestDir::new();
    let agent_off = AgentProc::spawn(&td_off, &["--heartbeat-timeout", "1"]);
    let (launcher_off, rx_off) = start(agent_off.addr, opts(&td_off.secret, Heartbeat::OFF));
    let pids = [td.wait_pid("prted.pid"), td_off.wait_pid("prted.pid")];
    // Every core busy for several limits' worth.
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..std::thread::available_parallelism().map_or(2, |n| n.get()))
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            })
        })
        .collect();
    let quiet = rx.recv_timeout(Duration::from_secs(6));
    let quiet_off = rx_off.try_recv();
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert!(quiet.is_err(), "a spurious event: {quiet:?}");
    assert!(quiet_off.is_err(), "a spurious event: {quiet_off:?}");
    assert!(pids.iter().all(|p| alive(*p)), "a prted was stopped");
    assert!(!agent
        .logs()
        .iter()
        .chain(agent_off.logs().iter())
        .any(|l| l.contains("silent")));
    // Heartbeats are not logged one by one at the default level.
    assert!(
        !agent
            .logs()
            .iter()
            .any(|l| l.contains("\"request\":\"ping\"")),
        "{:?}",
        agent.logs()
    );
    launcher.shutdown(Duration::from_secs(5));
    launcher_off.shutdown(Duration::from_secs(5));
    assert!(all_gone(&pids, Duration::from_secs(10)));
}

const RSH: &str = env!("CARGO_BIN_EXE_prrte-k8s-rsh");

/// An exec'd program (through the real `prrte-k8s-rsh`) whose pod is cut off mid-run: the
/// client, hearing no answer to its heartbeats, exits 255 saying the pod is cut off, and the
/// agent, hearing no heartbeats, stops the program's whole process group; a quiet program is
/// left alone while the link is up.
#[test]
fn an_exec_cut_off_mid_run_is_ended_by_both_ends() {
    use std::os::unix::fs::PermissionsExt;
    let td = TestDir::new();
    let dir = td.dir.path().display().to_string();
    let prog = td.path("prog");
    let script = format!(
        "#!/bin/sh\necho $$ > {dir}/prog.tmp; mv {dir}/prog.tmp {dir}/prog.pid\nsleep 1000 & echo $! > {dir}/sleep.tmp; mv {dir}/sleep.tmp {dir}/sleep.pid\nwait\n"
    );
    std::fs::write(&prog, script).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = prog.display().to_string();
    let agent = debug_agent(&td, &["--heartbeat-timeout", "4", "--exec-allow", &prog]);
    let link = Link::to(agent.addr);
    let mut rsh = std::process::Command::new(RSH)
        .args(["-n", "127.0.0.1", &prog])
        .env("PRRTE_K8S_SECRET_FILE", &td.secret_file)
        .env("PRRTE_K8S_AGENT_PORT", link.addr.port().to_string())
        .env("PRTE_MCA_plm_k8s_heartbeat_interval", "1")
        .env("PRTE_MCA_plm_k8s_heartbeat_misses", "3")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pids = [td.wait_pid("prog.pid"), td.wait_pid("sleep.pid")];
    agent
        .wait_log(WAIT, |v| {
            v["message"] == "exec: the client sends heartbeats"
        })
        .expect("no heartbeat reached the agent");
    // Quiet for longer than both limits: heartbeats keep it alive.
    std::thread::sleep(Duration::from_secs(5));
    assert!(rsh.try_wait().unwrap().is_none(), "the client ended early");
    assert!(pids.iter().all(|p| alive(*p)), "the program was stopped");
    link.cut();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = rsh.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = rsh.kill();
            panic!("prrte-k8s-rsh did not notice the cut");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    rsh.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(255), "{err}");
    assert!(err.contains("silent") && err.contains("cut off"), "{err}");
    // Silent for more than 3 × 1 s since the last answer: noticed 2 to 4 s after the cut
    // (the bound leaves room for a loaded machine).
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert!(
        agent
            .wait_log(Duration::from_secs(10), |v| v
                .to_string()
                .contains("the client was silent"))
            .is_some(),
        "{:?}",
        agent.logs()
    );
    assert!(
        all_gone(&pids, Duration::from_secs(10)),
        "the program survived"
    );
    drop(link);
}

/// A batch worker's agent whose attached launcher pinged and then fell silent (its pod cut
/// off) takes the launcher for gone and exits with 1 (as when the connection ends); one whose
/// launcher never pings is not watched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_worker_whose_launcher_falls_silent_exits() {
    use prrte_k8s::protocol::{Reply, Request};
    let worker = |td: &TestDir| {
        AgentProc::spawn(
            td,
            &[
                "--run",
                "--batch-role",
                "worker",
                "--heartbeat-timeout",
                "2",
            ],
        )
    };
    let (td, td_off) = (TestDir::new(), TestDir::new());
    let (mut agent, mut agent_off) = (worker(&td), worker(&td_off));
    let mut beating = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let mut quiet = RawClient::connect(agent_off.addr, Some(&td_off.secret))
        .await
        .unwrap();
    for c in [&mut beating, &mut quiet] {
        let r = c.request(&Request::Attach {}).await;
        assert!(matches!(r, Reply::Ack {}), "{r:?}");
    }
    let r = beating.request(&Request::Ping {}).await;
    assert!(matches!(r, Reply::Pong {}), "{r:?}");
    let t0 = Instant::now();
    let code = tokio::task::block_in_place(|| agent.wait_exit(Duration::from_secs(20)));
    assert_eq!(code, Some(1), "{:?}", agent.logs());
    assert!(t0.elapsed() >= Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("the launcher was silent")),
        "{:?}",
        agent.logs()
    );
    // Longer than its limit too: still attached, still running.
    assert_eq!(
        tokio::task::block_in_place(|| agent_off.wait_exit(Duration::from_secs(3))),
        None,
        "{:?}",
        agent_off.logs()
    );
    drop(quiet);
    assert_eq!(
        tokio::task::block_in_place(|| agent_off.wait_exit(WAIT)),
        Some(1)
    );
}
