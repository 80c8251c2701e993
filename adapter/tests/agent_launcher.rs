//! The launcher client library against real agents (and against addresses where none listens).
#![forbid(unsafe_code)]

mod agent_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agent_support::*;
use nix::sys::signal::Signal;
use prrte_k8s::launch::{
    ExitDesc, LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher,
};
use prrte_k8s::protocol;

fn opts(secret: Option<&[u8]>) -> LaunchOptions {
    LaunchOptions {
        secret: secret.map(|s| s.to_vec()),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_secs(2),
        heartbeat: Default::default(),
    }
}

fn target(id: u32, addr: SocketAddr) -> LaunchTarget {
    LaunchTarget {
        id,
        pod: format!("job-worker-{id}"),
        addr,
    }
}

fn request(args: &[&str]) -> LaunchRequest {
    LaunchRequest {
        argv: launch_args(args),
        env: vec![],
        dvm_uri: None,
    }
}

/// Starts a launcher whose events arrive on a channel.
fn start(
    targets: Vec<(LaunchTarget, LaunchRequest)>,
    opts: LaunchOptions,
) -> (Launcher, Receiver<LaunchEvent>) {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let launcher = Launcher::start(
        targets,
        opts,
        Box::new(move |e| {
            let _ = tx.lock().unwrap().send(e);
        }),
    );
    (launcher, rx)
}

fn next(rx: &Receiver<LaunchEvent>) -> LaunchEvent {
    rx.recv_timeout(WAIT).expect("no launcher event in time")
}

#[test]
fn launcher_reports_started_then_exit_code() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let (launcher, rx) = start(
        vec![(target(7, agent.addr), request(&["--exit", "42"]))],
        opts(Some(&td.secret)),
    );
    let pid = match next(&rx) {
        LaunchEvent::Started { id: 7, pod, pid } => {
            assert_eq!(pod, "job-worker-7");
            pid
        }
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(
        next(&rx),
        LaunchEvent::Exited {
            id: 7,
            pod: "job-worker-7".into(),
            status: ExitDesc::Code(42)
        }
    );
    assert!(!alive(pid as i32));
    launcher.shutdown(Duration::from_secs(5));
    assert!(rx.try_recv().is_err(), "no events after Exited");
}

#[test]
fn argv_and_env_arrive_exactly() {
    let td = TestDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let tmp_arg = tmp.path().display().to_string();
    // The agent's own environment: PRTE_* passes through, other variables do not.
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--health-listen",
        "off",
        "--log-format",
        "json",
        "--prted",
        td.prted.to_str().unwrap(),
        "--secret-file",
        td.secret_file.to_str().unwrap(),
        "--tmpdir",
        &tmp_arg,
        "--pass-env",
        "SITE_EXTRA",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push("--kill-grace".into());
    args.push("1".into());
    let agent = AgentProc::spawn_args(
        &args,
        &[
            ("PRTE_MCA_site_default", "from-pod-spec"),
            ("PRTE_MCA_odls_base_num_threads", "4"),
            ("AGENT_ONLY_SECRET", "must-not-leak"),
            ("SITE_EXTRA", "passed"),
            ("LANG", "C.UTF-8"),
        ],
    )
    .unwrap();

    // What a launcher may send, of every kind: flags, MCA pairs of both projects, values
    // with the punctuation their shapes admit.
    let mut argv = launch_args(&["--exit", "0"]);
    argv.extend(
        [
            "--debug-daemons",
            "--prtemca",
            "rmaps_default_mapping_policy",
            "ppr:2:node:PE=2",
            "--pmixmca",
            "ptl_base_if_include",
            "10.0.0.0/24,eth0",
            "--prtemca",
            "oob_tcp_dynamic_ipv4_ports",
            "7121,7200-7299",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let env = vec![
        (
            "PRTE_MCA_odls_base_max_threads".to_string(),
            "0".to_string(),
        ),
        (
            "PMIX_MCA_ptl_base_if_include".to_string(),
            "eth0,lo".to_string(),
        ),
        ("OMPI_MCA_btl".to_string(), "^openib,self,tcp".to_string()),
        (
            "PRTE_MCA_odls_base_num_threads".to_string(),
            "2".to_string(),
        ),
    ];
    let (launcher, rx) = start(
        vec![(
            target(0, agent.addr),
            LaunchRequest {
                argv: argv.clone(),
                env: env.clone(),
                dvm_uri: None,
            },
        )],
        opts(Some(&td.secret)),
    );
    assert!(matches!(next(&rx), LaunchEvent::Started { .. }));
    assert!(matches!(
        next(&rx),
        LaunchEvent::Exited {
            status: ExitDesc::Code(0),
            ..
        }
    ));
    launcher.shutdown(Duration::from_secs(5));

    // The agent adds --leave-session-attached (prted must not daemonize out of its reach) and
    // --set-sid (a session of its own, without a fork).
    let mut expected = argv.clone();
    expected.push("--leave-session-attached".into());
    expected.push("--set-sid".into());
    assert_eq!(td.argv(), expected);
    let got: BTreeMap<String, String> = td.env().into_iter().collect();
    for (k, v) in &env {
        assert_eq!(got.get(k), Some(v), "{k}");
    }
    assert_eq!(got["TMPDIR"], tmp_arg);
    assert_eq!(got["PRTE_MCA_site_default"], "from-pod-spec");
    assert_eq!(
        got["PRTE_MCA_odls_base_num_threads"], "2",
        "the request's value wins"
    );
    assert_eq!(got["SITE_EXTRA"], "passed");
    assert_eq!(got["LANG"], "C.UTF-8");
    assert!(got.contains_key("PATH") && got.contains_key("HOME"));
    assert!(!got.contains_key("AGENT_ONLY_SECRET"));
    assert!(!got.keys().any(|k| k.starts_with("PRRTE_K8S_")), "{got:?}");
    // Nothing beyond the documented base and the request (`sh` itself adds PWD).
    let allowed = [
        "PATH",
        "HOME",
        "HOSTNAME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "TZ",
        "USER",
        "LD_LIBRARY_PATH",
        "SITE_EXTRA",
        "PWD",
    ];
    for k in got.keys() {
        assert!(
            allowed.contains(&k.as_str())
                || ["PRTE_", "PMIX_", "OMPI_"].iter().any(|p| k.starts_with(p)),
            "unexpected variable {k} in prted's environment"
        );
    }
}

#[test]
fn wrong_secret_fails_naming_the_mismatch_and_starts_nothing() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let (launcher, rx) = start(
        vec![(target(3, agent.addr), request(&["--sleep"]))],
        opts(Some(b"wrong secret")),
    );
    match next(&rx) {
        LaunchEvent::Failed { id: 3, reason, .. } => {
            assert!(reason.contains("secret does not match"), "{reason}");
            assert!(reason.contains("mount the same Secret in both"), "{reason}");
            assert!(reason.contains("job-worker-3"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    launcher.shutdown(Duration::from_secs(5));
    assert!(rx.try_recv().is_err());
    assert_eq!(td.launches(), 0);
    assert!(
        !td.path("prted.pid").exists(),
        "the fake prted ran despite the wrong secret"
    );

    // Launcher without a secret against an agent that has one.
    let (launcher, rx) = start(
        vec![(target(4, agent.addr), request(&["--sleep"]))],
        opts(None),
    );
    match next(&rx) {
        LaunchEvent::Failed { reason, .. } => {
            assert!(reason.contains("requires authentication"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(launcher);
    assert_eq!(td.launches(), 0);
}

#[test]
fn insecure_mode_needs_both_sides() {
    let td = TestDir::new();
    std::fs::remove_file(&td.secret_file).unwrap();
    let agent = AgentProc::spawn(&td, &["--insecure-no-auth"]);
    let (launcher, rx) = start(
        vec![(target(1, agent.addr), request(&["--exit", "0"]))],
        opts(None),
    );
    assert!(matches!(next(&rx), LaunchEvent::Started { id: 1, .. }));
    assert!(matches!(
        next(&rx),
        LaunchEvent::Exited {
            status: ExitDesc::Code(0),
            ..
        }
    ));
    drop(launcher);

    let (launcher, rx) = start(
        vec![(target(2, agent.addr), request(&["--exit", "0"]))],
        opts(Some(b"k")),
    );
    match next(&rx) {
        LaunchEvent::Failed { reason, .. } => {
            assert!(reason.contains("without authentication"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(launcher);
    assert_eq!(td.launches(), 1);
}

#[test]
fn unreachable_agent_fails_fast_naming_the_address() {
    // An address where nothing listens: bind an ephemeral port, then close it.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let t0 = Instant::now();
    let (launcher, rx) = start(
        vec![(target(9, addr), request(&["--sleep"]))],
        opts(Some(b"k")),
    );
    match next(&rx) {
        LaunchEvent::Failed { id: 9, reason, .. } => {
            assert!(reason.contains(&addr.to_string()), "{reason}");
            assert!(reason.contains("is the agent running"), "{reason}");
            assert!(reason.contains("NetworkPolicy"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    launcher.shutdown(Duration::from_secs(1));
    assert!(rx.try_recv().is_err());
}

#[test]
fn stalled_peer_fails_within_the_request_timeout() {
    // Accepts connections but never says anything.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let mut o = opts(Some(b"k"));
    o.request_timeout = Duration::from_millis(500);
    let t0 = Instant::now();
    let (launcher, rx) = start(vec![(target(5, addr), request(&["--sleep"]))], o);
    match next(&rx) {
        LaunchEvent::Failed { id: 5, reason, .. } => {
            assert!(reason.contains("did not answer"), "{reason}");
            assert!(reason.contains(&addr.to_string()), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(5),
        "{took:?}"
    );
    drop(launcher);
    drop(silent);
}

#[test]
fn sixteen_agents_in_parallel_then_shutdown() {
    const N: u32 = 16;
    let dirs: Vec<TestDir> = (0..N).map(|_| TestDir::new()).collect();
    // One secret for the whole job, mounted in every pod.
    let secret = b"one secret for the whole job, 32+ bytes".to_vec();
    for td in &dirs {
        std::fs::write(&td.secret_file, &secret).unwrap();
    }
    let agents: Vec<AgentProc> = dirs.iter().map(|td| AgentProc::spawn(td, &[])).collect();

    let targets = agents
        .iter()
        .enumerate()
        .map(|(i, a)| (target(i as u32, a.addr), request(&["--sleep"])))
        .collect();
    let (launcher, rx) = start(targets, opts(Some(&secret)));
    let mut started = BTreeSet::new();
    while started.len() < N as usize {
        match next(&rx) {
            LaunchEvent::Started { id, .. } => {
                assert!(started.insert(id), "second Started for {id}")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let pids: Vec<i32> = dirs
        .iter()
        .flat_map(|td| [td.wait_pid("prted.pid"), td.wait_pid("child.pid")])
        .collect();
    assert!(pids.iter().all(|p| alive(*p)));

    let t0 = Instant::now();
    launcher.shutdown(Duration::from_secs(20));
    assert!(t0.elapsed() < Duration::from_secs(20));
    let mut exited = BTreeSet::new();
    while let Ok(e) = rx.try_recv() {
        match e {
            LaunchEvent::Exited {
                id,
                status: ExitDesc::Signal(15),
                ..
            } => {
                assert!(exited.insert(id), "second Exited for {id}")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        exited.len(),
        N as usize,
        "every target reports Exited before shutdown returns"
    );
    assert!(
        all_gone(&pids, Duration::from_secs(5)),
        "processes left after shutdown"
    );
    for a in &agents {
        assert!(a
            .wait_log(WAIT, |v| v["message"] == "prted stopped")
            .is_some());
    }
}

#[test]
fn dropping_the_launcher_makes_agents_stop_prted() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &["--kill-grace", "5"]);
    let (launcher, rx) = start(
        vec![(target(0, agent.addr), request(&["--sleep"]))],
        opts(Some(&td.secret)),
    );
    assert!(matches!(next(&rx), LaunchEvent::Started { .. }));
    let pids = [td.wait_pid("prted.pid"), td.wait_pid("child.pid")];
    let t0 = Instant::now();
    drop(launcher);
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "drop took {:?}",
        t0.elapsed()
    );
    assert!(
        all_gone(&pids, Duration::from_secs(10)),
        "prted survived the launcher"
    );
    assert!(rx.try_recv().is_err(), "no events after drop");
    assert!(
        agent
            .wait_log(WAIT, |v| v["message"]
                .as_str()
                .is_some_and(|m| m.contains("connection ended while prted runs")))
            .is_some(),
        "{:#?}",
        agent.logs()
    );
}

#[test]
fn agent_shutdown_is_reported_as_exit() {
    let td = TestDir::new();
    let mut agent = AgentProc::spawn(&td, &[]);
    let (launcher, rx) = start(
        vec![(target(0, agent.addr), request(&["--sleep"]))],
        opts(Some(&td.secret)),
    );
    assert!(matches!(next(&rx), LaunchEvent::Started { .. }));
    let pids = [td.wait_pid("prted.pid"), td.wait_pid("child.pid")];
    agent.signal(Signal::SIGTERM);
    // The agent stopped prted because its pod was told to end, and says so: not PRRTE's doing,
    // whatever prted's status.
    match next(&rx) {
        LaunchEvent::Exited {
            status: ExitDesc::PodToldToEnd { signal: 15, prted },
            ..
        } => assert_eq!(*prted, ExitDesc::Signal(15)),
        other => panic!("unexpected {other:?}"),
    }
    // Told to end while its prted ran: 128 + SIGTERM, so that the pod ends Failed.
    assert_eq!(agent.wait_exit(WAIT), Some(143));
    assert!(pids.iter().all(|p| !alive(*p)));
    drop(launcher);
}

#[test]
fn agent_killed_outright_is_reported_as_connection_lost() {
    let td = TestDir::new();
    let mut agent = AgentProc::spawn(&td, &[]);
    let (launcher, rx) = start(
        vec![(target(0, agent.addr), request(&["--sleep"]))],
        opts(Some(&td.secret)),
    );
    assert!(matches!(next(&rx), LaunchEvent::Started { .. }));
    td.wait_pid("prted.pid");
    agent.signal(Signal::SIGKILL);
    agent.wait_exit(WAIT).expect("agent did not die");
    match next(&rx) {
        LaunchEvent::Exited {
            status: status @ ExitDesc::ConnectionLost(_),
            ..
        } => {
            assert!(
                status.to_string().starts_with("agent connection lost: "),
                "{status}"
            )
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(launcher);
    // TestDir's drop kills the orphaned fake prted (the agent had no chance to).
}

#[test]
fn shutdown_is_bounded_when_agents_are_slow_to_report() {
    let td = TestDir::new();
    // prted ignores SIGTERM and the agent waits 3 s before SIGKILL; the launcher waits only 1 s.
    let agent = AgentProc::spawn(&td, &["--kill-grace", "3"]);
    let mut o = opts(Some(&td.secret));
    o.kill_grace = Duration::from_secs(30);
    let (launcher, rx) = start(vec![(target(0, agent.addr), request(&["--stubborn"]))], o);
    assert!(matches!(next(&rx), LaunchEvent::Started { .. }));
    let pids = [td.wait_pid("prted.pid"), td.wait_pid("child.pid")];
    let t0 = Instant::now();
    launcher.shutdown(Duration::from_secs(1));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    match rx
        .try_recv()
        .expect("Exited must be reported before shutdown returns")
    {
        LaunchEvent::Exited {
            status: status @ ExitDesc::ClosedByLauncher,
            ..
        } => {
            assert!(
                status
                    .to_string()
                    .contains("launcher closed the connection"),
                "{status}"
            )
        }
        other => panic!("unexpected {other:?}"),
    }
    // The agent still finishes the job: SIGKILL after its grace period.
    assert!(
        all_gone(&pids, Duration::from_secs(15)),
        "stubborn prted survived"
    );
    drop(launcher);
}

#[test]
fn shutdown_abandons_targets_that_have_not_started() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let mut o = opts(Some(b"k"));
    o.request_timeout = Duration::from_secs(60);
    let (launcher, rx) = start(vec![(target(8, addr), request(&["--sleep"]))], o);
    // Let the connection be accepted (by the kernel) before shutting down.
    let (_conn, _) = silent.accept().unwrap();
    let t0 = Instant::now();
    launcher.shutdown(Duration::from_secs(1));
    assert!(t0.elapsed() < Duration::from_secs(4));
    match rx
        .try_recv()
        .expect("Failed must be reported before shutdown returns")
    {
        LaunchEvent::Failed { id: 8, reason, .. } => {
            assert!(
                reason.contains("shut down before prted was started"),
                "{reason}"
            )
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A fake agent on a thread of its own: accepts one connection and hands it to `serve`.
fn fake_agent<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            serve(stream).await;
        });
    });
    addr
}

#[test]
fn oversized_frame_before_authentication_is_refused() {
    use tokio::io::AsyncWriteExt;
    // Far below the post-handshake limit, above what an unauthenticated peer may send.
    let addr = fake_agent(|mut s| async move {
        let body = vec![b' '; protocol::HANDSHAKE_MAX_FRAME + 1];
        let _ = s.write_all(&protocol::encode_frame(&body)).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let (launcher, rx) = start(
        vec![(target(6, addr), request(&["--sleep"]))],
        opts(Some(b"k")),
    );
    match next(&rx) {
        LaunchEvent::Failed { id: 6, reason, .. } => {
            let max = protocol::HANDSHAKE_MAX_FRAME.to_string();
            assert!(reason.contains(&max), "{reason}");
            assert!(
                reason.contains("does not speak the prrte-k8s agent protocol"),
                "{reason}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(launcher);
}

#[test]
fn the_launch_answer_is_bounded_even_if_the_agent_keeps_talking() {
    use protocol::{Plain, Reply};
    let secret = b"job secret".to_vec();
    let key = secret.clone();
    // Authenticates properly, then answers the launch request only with pongs, forever.
    let addr = fake_agent(move |s| async move {
        let mut conn = protocol::framed(s, protocol::DEFAULT_MAX_FRAME);
        let na = protocol::new_nonce();
        let challenge = Plain::Challenge {
            auth: protocol::AuthMode::HmacSha256,
            nonce: hex::encode(na),
            agent: "fake".into(),
        };
        let t = Duration::from_secs(5);
        protocol::send_frame(&mut conn, protocol::encode_message(&challenge), t)
            .await
            .unwrap();
        let frame = protocol::recv_frame(&mut conn, Some(t)).await.unwrap();
        let Ok(Plain::Response { nonce, noise, .. }) = protocol::decode_message::<Plain>(&frame)
        else {
            panic!("no response");
        };
        let nc = protocol::parse_nonce(&nonce).unwrap();
        let client_msg = protocol::parse_noise_field(noise.as_deref(), "the launcher").unwrap();
        let (agent_msg, mut session) =
            protocol::agent_noise(Some(&key), &na, &nc, &client_msg).unwrap();
        let welcome = Plain::Welcome {
            mac: Some(protocol::agent_proof(&key, &na, &nc)),
            noise: Some(hex::encode(agent_msg)),
        };
        protocol::send_frame(&mut conn, protocol::encode_message(&welcome), t)
            .await
            .unwrap();
        while protocol::send_frame(&mut conn, session.seal(&Reply::Pong {}), t)
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut o = opts(Some(&secret));
    o.request_timeout = Duration::from_millis(800);
    let t0 = Instant::now();
    let (launcher, rx) = start(vec![(target(2, addr), request(&["--sleep"]))], o);
    match next(&rx) {
        LaunchEvent::Failed { id: 2, reason, .. } => {
            assert!(
                reason.contains("did not answer the launch request"),
                "{reason}"
            )
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(launcher);
}
