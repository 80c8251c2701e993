//! The agent channel is encrypted: a TCP relay between the clients (the launcher `plm k8s`
//! drives, `prrte-k8s-rsh`, the raw protocol client) and the real agent records every byte and
//! finds none of a launch's or an exec's markers in clear; a byte changed on the way ends the
//! connection with an error that says so, in either direction; a wrong secret is refused.
#![forbid(unsafe_code)]

mod agent_support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::*;
use prrte_k8s::launch::{LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher};
use prrte_k8s::protocol::{self, Reply};

const RSH: &str = env!("CARGO_BIN_EXE_prrte-k8s-rsh");

/// The exec'd program: prints its argument, then copies stdin to stdout.
const PROG: &str = "#!/bin/sh\necho \"out $1\"; cat\n";

/// Which frame a relay changes one byte of: the `n`-th (from 0) in one direction.
#[derive(Clone, Copy)]
enum Tamper {
    None,
    ToAgent(usize),
    ToClient(usize),
}

/// A relay on 127.0.0.1 in front of the agent, recording what crosses it both ways.
struct Relay {
    addr: SocketAddr,
    wire: Arc<Mutex<Vec<u8>>>,
}

impl Relay {
    fn start(agent: SocketAddr, tamper: Tamper) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let wire = Arc::new(Mutex::new(Vec::new()));
        let w = wire.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(upstream) = TcpStream::connect(agent) else {
                    return;
                };
                let (to_agent, to_client) = match tamper {
                    Tamper::None => (None, None),
                    Tamper::ToAgent(n) => (Some(n), None),
                    Tamper::ToClient(n) => (None, Some(n)),
                };
                pump(&client, &upstream, to_agent, w.clone());
                pump(&upstream, &client, to_client, w.clone());
            }
        });
        Relay { addr, wire }
    }

    /// Whether `needle` crossed the relay in clear, in either direction.
    fn saw(&self, needle: &str) -> bool {
        let wire = self.wire.lock().unwrap();
        wire.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    fn bytes(&self) -> usize {
        self.wire.lock().unwrap().len()
    }
}

/// Copies frames from `from` to `to` (recording them), flipping one byte in the middle of the
/// `tamper`-th frame's body; when either side ends, both are shut down.
fn pump(from: &TcpStream, to: &TcpStream, tamper: Option<usize>, wire: Arc<Mutex<Vec<u8>>>) {
    let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut index = 0usize;
        loop {
            let mut len = [0u8; 4];
            if from.read_exact(&mut len).is_err() {
                break;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            if from.read_exact(&mut body).is_err() {
                break;
            }
            if tamper == Some(index) {
                let mid = body.len() / 2;
                body[mid] ^= 0x01;
            }
            index += 1;
            {
                let mut w = wire.lock().unwrap();
                w.extend_from_slice(&len);
                w.extend_from_slice(&body);
            }
            if to.write_all(&len).is_err() || to.write_all(&body).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

/// A marker: random hex, 12 characters, a valid namespace word and interface name.
fn marker() -> String {
    hex::encode(&protocol::new_nonce()[..6])
}

fn opts(secret: &[u8]) -> LaunchOptions {
    LaunchOptions {
        secret: Some(secret.to_vec()),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_secs(2),
        heartbeat: Default::default(),
    }
}

fn launch_through(
    addr: SocketAddr,
    request: LaunchRequest,
    secret: &[u8],
) -> (Launcher, Receiver<LaunchEvent>) {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let target = LaunchTarget {
        id: 1,
        pod: "job-worker-1".into(),
        addr,
    };
    let launcher = Launcher::start(
        vec![(target, request)],
        opts(secret),
        Box::new(move |e| {
            let _ = tx.lock().unwrap().send(e);
        }),
    );
    (launcher, rx)
}

fn next(rx: &Receiver<LaunchEvent>) -> LaunchEvent {
    rx.recv_timeout(WAIT).expect("no launcher event in time")
}

/// The launch's argv and environment, an exec's argument, its stdin and its output all reach
/// the other end (so they crossed the relay) and none of them is on the wire in clear; the
/// handshake, which is plain, is (so the relay does see what crosses it).
#[test]
fn nothing_a_launch_or_an_exec_carries_crosses_the_wire_in_clear() {
    let td = TestDir::new();
    let prog = td.path("prog");
    std::fs::write(&prog, PROG).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = prog.display().to_string();
    let agent = AgentProc::spawn(&td, &["--exec-allow", &prog]);
    let relay = Relay::start(agent.addr, Tamper::None);
    let [in_argv, in_env, in_exec_argv, in_stdin] = [marker(), marker(), marker(), marker()];

    let request = LaunchRequest {
        argv: mode_args(&in_argv),
        env: vec![("PRTE_MCA_prte_if_include".into(), in_env.clone())],
        dvm_uri: None,
    };
    let (launcher, rx) = launch_through(relay.addr, request, &td.secret);
    assert!(matches!(next(&rx), LaunchEvent::Started { id: 1, .. }));
    td.wait_pid("prted.pid");
    assert!(td.argv().contains(&in_argv), "{:?}", td.argv());
    assert!(
        td.env()
            .contains(&("PRTE_MCA_prte_if_include".into(), in_env.clone())),
        "the launch's environment did not reach prted"
    );
    launcher.shutdown(Duration::from_secs(5));

    let mut rsh = Command::new(RSH)
        .args(["127.0.0.1", &prog, &in_exec_argv])
        .env("PRRTE_K8S_SECRET_FILE", &td.secret_file)
        .env("PRRTE_K8S_AGENT_PORT", relay.addr.port().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    rsh.stdin
        .take()
        .unwrap()
        .write_all(format!("{in_stdin}\n").as_bytes())
        .unwrap();
    let out = rsh.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout,
        format!("out {in_exec_argv}\n{in_stdin}\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    assert!(relay.saw("\"type\":\"challenge\""), "the relay saw nothing");
    for m in [&in_argv, &in_env, &in_exec_argv, &in_stdin] {
        assert!(!relay.saw(m), "{m} crossed the wire in clear");
    }
    for word in ["launch", "PRTE_MCA", "stdin", "output", prog.as_str()] {
        assert!(!relay.saw(word), "`{word}` crossed the wire in clear");
    }
}

/// A byte changed on the way to the agent: the agent answers that the frame does not decrypt,
/// closes, and starts nothing.
#[test]
fn a_byte_changed_on_the_way_to_the_agent_ends_the_connection() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    // Frame 0 is the handshake's response; frame 1 the first encrypted one.
    let relay = Relay::start(agent.addr, Tamper::ToAgent(1));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = RawClient::connect(relay.addr, Some(&td.secret))
            .await
            .unwrap();
        c.send(&launch(&["--sleep"])).await;
        match c.recv(STEP).await {
            Ok(Reply::Error { reason }) => {
                assert!(reason.contains("does not decrypt"), "{reason}");
                assert!(reason.contains("altered"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
        c.expect_closed().await;
    });
    assert!(agent
        .wait_log(WAIT, |v| v.to_string().contains("does not decrypt"))
        .is_some());
    assert_eq!(td.launches(), 0);
    assert!(relay.bytes() > 0);
}

/// A byte changed on the way back (the agent's `started`): the launcher reports the launch
/// failed, saying why, and the agent, its connection gone, stops what it started.
#[test]
fn a_byte_changed_on_the_way_to_the_launcher_fails_the_launch() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    // Frames 0 and 1 are the challenge and welcome; frame 2 the reply to the launch.
    let relay = Relay::start(agent.addr, Tamper::ToClient(2));
    let request = LaunchRequest {
        argv: launch_args(&["--sleep"]),
        env: vec![],
        dvm_uri: None,
    };
    let (launcher, rx) = launch_through(relay.addr, request, &td.secret);
    match next(&rx) {
        LaunchEvent::Failed { id: 1, reason, .. } => {
            assert!(reason.contains("does not decrypt"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(launcher);
    // Nothing of the launch is left running (the agent is idle only once all of it is gone).
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(assert_idle(agent.addr, &td.secret));
}

/// A launcher with another secret is refused through the relay as directly, and no request
/// follows on the wire.
#[test]
fn a_wrong_secret_is_refused_through_the_relay() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let relay = Relay::start(agent.addr, Tamper::None);
    let request = LaunchRequest {
        argv: launch_args(&["--sleep"]),
        env: vec![],
        dvm_uri: None,
    };
    let (launcher, rx) = launch_through(relay.addr, request, b"another job's secret, 32 bytes!");
    match next(&rx) {
        LaunchEvent::Failed { id: 1, reason, .. } => {
            assert!(reason.contains("authentication failed"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(launcher);
    assert_eq!(td.launches(), 0);
    assert!(relay.saw("\"type\":\"refused\""));
}
