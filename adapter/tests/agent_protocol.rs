//! The agent binary against raw protocol clients: authentication, frame integrity, request
//! validation, one-job-at-a-time, supervision and process cleanup, start-up checks, health.
#![forbid(unsafe_code)]

mod agent_support;

use std::time::{Duration, Instant};

use agent_support::*;
use nix::sys::signal::Signal;
use prrte_k8s::protocol::{
    self, encode_frame, encode_message, HandshakeError, Plain, Reply, Request,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn launch_reports_started_then_exit_code() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let pid = match c.request(&launch(&["--exit", "3"])).await {
        Reply::Started { pid } => pid,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(
        c.recv(STEP).await.unwrap(),
        Reply::Exited {
            pid,
            code: Some(3),
            signal: None,
            told_to_end: None,
        }
    );
    assert_eq!(td.launches(), 1);
    assert!(all_gone(&[pid as i32], WAIT), "prted was not reaped");
    // The slot is free again: a second launch on the same connection works.
    assert!(matches!(
        c.request(&launch(&["--exit", "0"])).await,
        Reply::Started { .. }
    ));
    assert!(matches!(
        c.recv(STEP).await.unwrap(),
        Reply::Exited { code: Some(0), .. }
    ));

    // One log line per request, with peer, request type, outcome and duration.
    let line = agent
        .wait_log(WAIT, |v| {
            v["message"] == "request" && v["request"] == "launch"
        })
        .expect("no request log line");
    assert!(
        line["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{line}"
    );
    assert!(
        line["outcome"].as_str().unwrap().starts_with("started pid"),
        "{line}"
    );
    assert!(line["duration_ms"].is_u64(), "{line}");
}

#[tokio::test]
async fn wrong_secret_is_refused_and_nothing_starts() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let err = RawClient::connect(agent.addr, Some(b"not-the-secret"))
        .await
        .unwrap_err();
    match err {
        HandshakeError::Refused(reason) => {
            assert!(reason.contains("authentication failed"), "{reason}");
            assert!(reason.contains("secret does not match"), "{reason}");
            assert!(reason.contains("mount the same Secret in both"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }

    // A client that ignores the refusal and sends a launch anyway gets nowhere.
    let stream = TcpStream::connect(agent.addr).await.unwrap();
    let mut conn = protocol::framed(stream, protocol::DEFAULT_MAX_FRAME);
    let first = protocol::recv_frame(&mut conn, Some(STEP)).await.unwrap();
    let Plain::Challenge { nonce, .. } = protocol::decode_message::<Plain>(&first).unwrap() else {
        panic!("no challenge")
    };
    let agent_nonce = protocol::parse_nonce(&nonce).unwrap();
    let client_nonce = protocol::new_nonce();
    let mac = protocol::client_proof(b"wrong", &agent_nonce, &client_nonce);
    let (_, noise_msg) =
        protocol::client_noise_start(Some(b"wrong"), &agent_nonce, &client_nonce).unwrap();
    let resp = Plain::Response {
        nonce: hex::encode(client_nonce),
        mac: Some(mac),
        noise: Some(hex::encode(noise_msg)),
    };
    protocol::send_frame(&mut conn, encode_message(&resp), STEP)
        .await
        .unwrap();
    let (mut forged, _) = protocol::local_pair(Some(b"wrong"));
    let _ = protocol::send_frame(&mut conn, forged.seal(&launch(&["--sleep"])), STEP).await;
    let answer = protocol::recv_frame(&mut conn, Some(STEP)).await.unwrap();
    assert!(matches!(
        protocol::decode_message::<Plain>(&answer).unwrap(),
        Plain::Refused { .. }
    ));
    expect_closed(&mut conn).await;

    assert_idle(agent.addr, &td.secret).await;
    assert_eq!(td.launches(), 0);
    assert!(!td.path("prted.pid").exists());
    assert!(agent
        .wait_log(WAIT, |v| v["message"]
            .as_str()
            .is_some_and(|m| m.contains("authentication failed")))
        .is_some());
}

#[tokio::test]
async fn frame_replayed_from_an_earlier_session_is_refused() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    // Session 1: a valid launch, captured on the way out.
    let mut s1 = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let captured = s1
        .send_text(r#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","exit-0"]}"#)
        .await;
    assert!(matches!(
        s1.recv(STEP).await.unwrap(),
        Reply::Started { .. }
    ));
    assert!(matches!(
        s1.recv(STEP).await.unwrap(),
        Reply::Exited { code: Some(0), .. }
    ));
    drop(s1);
    assert_eq!(td.launches(), 1);

    // Session 2 (authenticated) replays it verbatim as its first frame: the keys of another session.
    let mut s2 = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    s2.send_body(captured).await;
    match s2.recv(STEP).await.unwrap() {
        Reply::Error { reason } => assert!(reason.contains("does not decrypt"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
    s2.expect_closed().await;
    assert_idle(agent.addr, &td.secret).await;
    assert_eq!(td.launches(), 1, "the replayed launch must not start prted");
}

#[tokio::test]
async fn frames_replayed_or_forged_within_a_session_are_refused() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);

    // The same frame twice: the second is a replay.
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let ping = c.send_text(r#"{"v":1,"type":"ping"}"#).await;
    assert_eq!(c.recv(STEP).await.unwrap(), Reply::Pong {});
    c.send_body(ping).await;
    match c.recv(STEP).await.unwrap() {
        Reply::Error { reason } => assert!(reason.contains("does not decrypt"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
    c.expect_closed().await;

    // One bit of the ciphertext changed, anywhere: in the first and the last byte (the tag).
    for at in [0usize, usize::MAX] {
        let mut c = RawClient::connect(agent.addr, Some(&td.secret))
            .await
            .unwrap();
        let mut frame = c.session.seal(&launch(&["--sleep"]));
        let at = at.min(frame.len() - 1);
        frame[at] ^= 0x01;
        c.send_body(frame).await;
        match c.recv(STEP).await.unwrap() {
            Reply::Error { reason } => assert!(reason.contains("does not decrypt"), "{reason}"),
            other => panic!("unexpected {other:?}"),
        }
        c.expect_closed().await;
    }

    // A frame cut short.
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let mut frame = c.session.seal(&launch(&["--sleep"]));
    frame.truncate(frame.len() - 1);
    c.send_body(frame).await;
    assert!(matches!(c.recv(STEP).await.unwrap(), Reply::Error { .. }));
    c.expect_closed().await;

    // An unsealed request after authentication.
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    c.send_body(
        br#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","sleep"]}"#.to_vec(),
    )
    .await;
    match c.recv(STEP).await.unwrap() {
        Reply::Error { reason } => {
            assert!(reason.contains("expected an encrypted frame"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
    c.expect_closed().await;

    assert_idle(agent.addr, &td.secret).await;
    assert_eq!(td.launches(), 0);
}

/// Reads what the agent sends on a raw socket until it closes (bounded).
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + STEP;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the agent did not close the connection"),
        }
    }
}

/// Splits raw bytes into frame bodies (ignoring a truncated tail).
fn frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let n = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        if bytes.len() < 4 + n {
            break;
        }
        out.push(bytes[4..4 + n].to_vec());
        bytes = &bytes[4 + n..];
    }
    out
}

#[tokio::test]
async fn garbage_and_oversized_frames_close_only_that_connection() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &["--max-frame", "4096"]);
    // A long-lived good client shares the agent with the misbehaving ones.
    let mut good = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();

    // HTTP garbage: its first four bytes read as a ~1.2 GB length.
    let mut s = TcpStream::connect(agent.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let got = frames(&read_until_closed(&mut s).await);
    assert_eq!(got.len(), 2, "challenge and error expected");
    match protocol::decode_message::<Plain>(&got[1]).unwrap() {
        Plain::Error { reason } => assert!(reason.contains("exceeds the maximum"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }

    // A well-framed body that is not JSON.
    let mut s = TcpStream::connect(agent.addr).await.unwrap();
    s.write_all(&encode_frame(b"\x00\xffnot json at all"))
        .await
        .unwrap();
    let got = frames(&read_until_closed(&mut s).await);
    match protocol::decode_message::<Plain>(got.last().unwrap()).unwrap() {
        Plain::Error { reason } => assert!(reason.contains("not JSON"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }

    // Over-size after authentication (limit 4096): header announcing 5000 bytes.
    let mut big = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    big.conn
        .get_mut()
        .write_all(&5000u32.to_be_bytes())
        .await
        .unwrap();
    big.conn.get_mut().write_all(&[b'x'; 100]).await.unwrap();
    match big.recv(STEP).await.unwrap() {
        Reply::Error { reason } => assert!(reason.contains("4096"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
    big.expect_closed().await;

    // Random bytes mid-session.
    let mut junk = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    junk.conn
        .get_mut()
        .write_all(&[0, 0, 0, 3, 1, 2, 3])
        .await
        .unwrap();
    assert!(matches!(
        junk.recv(STEP).await.unwrap(),
        Reply::Error { .. }
    ));
    junk.expect_closed().await;

    // The good client and new clients are still served.
    assert_eq!(good.request(&Request::Ping {}).await, Reply::Pong {});
    assert!(matches!(
        good.request(&launch(&["--exit", "5"])).await,
        Reply::Started { .. }
    ));
    assert!(matches!(
        good.recv(STEP).await.unwrap(),
        Reply::Exited { code: Some(5), .. }
    ));
    assert_idle(agent.addr, &td.secret).await;
}

#[tokio::test]
async fn disallowed_env_unknown_fields_and_executables_are_refused() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let cases: &[(&str, &str)] = &[
        (
            r#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","sleep"],"env":{"PRTE_OK":"1","LD_PRELOAD":"/x.so"}}"#,
            "`LD_PRELOAD`",
        ),
        (
            r#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","sleep"],"env":{"PATH":"/evil"}}"#,
            "`PATH`",
        ),
        (
            r#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","sleep"],"env":{"PRTE_X":"a\u0000b"}}"#,
            "PRTE_X",
        ),
        (
            r#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","sleep"],"executable":"/bin/sh"}"#,
            "cannot name an executable (field `executable`)",
        ),
        (
            r#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","sleep"],"program":"/bin/sh"}"#,
            "field `program`",
        ),
        (
            r#"{"v":1,"type":"launch","argv":["/bin/sh","-c","id"]}"#,
            "looks like an executable",
        ),
        (
            r#"{"v":1,"type":"launch","argv":["--prtemca","ess_base_nspace","sleep"],"cwd":"/"}"#,
            "unknown field `cwd`",
        ),
        (
            r#"{"v":1,"type":"shell","argv":["--prtemca","ess_base_nspace","sleep"]}"#,
            "unknown variant `shell`",
        ),
        (r#"{"v":2,"type":"ping"}"#, "unsupported protocol version"),
    ];
    for (body, needle) in cases {
        c.send_text(body).await;
        match c.recv(STEP).await.unwrap() {
            Reply::Failed { reason } => assert!(reason.contains(needle), "{body}: {reason}"),
            other => panic!("{body}: unexpected {other:?}"),
        }
    }
    // The connection survives refused requests.
    assert_eq!(c.request(&Request::Ping {}).await, Reply::Pong {});
    assert_eq!(td.launches(), 0);
}

#[tokio::test]
async fn second_launch_while_one_runs_is_refused() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut a = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let a_addr = a.conn.get_ref().local_addr().unwrap();
    let pid = match a.request(&launch(&["--sleep"])).await {
        Reply::Started { pid } => pid,
        other => panic!("unexpected {other:?}"),
    };
    td.wait_pid("prted.pid");

    let mut b = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    match b.request(&launch(&["--exit", "0"])).await {
        Reply::Failed { reason } => {
            let expected = format!("a prted launched by {a_addr} is already running (pid {pid})");
            assert!(reason.contains(&expected), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    match a.request(&launch(&["--exit", "0"])).await {
        Reply::Failed { reason } => assert!(reason.contains("already running"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
    // Only the launching connection may kill it.
    match b.request(&Request::Kill { grace_ms: None }).await {
        Reply::Failed { reason } => assert!(reason.contains("another connection"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
    match b.request(&Request::Status {}).await {
        Reply::Status {
            running: true,
            pid: Some(p),
            launched_by: Some(by),
        } => {
            assert_eq!(p, pid);
            assert_eq!(by, a_addr.to_string());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(td.wait_launches(1), 1);

    // kill: TERM to the group, then `exited` once everything is gone.
    let child = td.wait_pid("child.pid");
    match a.request(&Request::Kill { grace_ms: None }).await {
        Reply::Exited {
            pid: p,
            code: None,
            signal: Some(15),
            told_to_end: None,
        } => assert_eq!(p, pid),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        !alive(pid as i32) && !alive(child),
        "exited must mean the group is gone"
    );
    match a.request(&Request::Kill { grace_ms: None }).await {
        Reply::Failed { reason } => assert!(reason.contains("no prted is running"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn dropped_connection_kills_prted_and_its_children() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &["--kill-grace", "5"]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    assert!(matches!(
        c.request(&launch(&["--sleep"])).await,
        Reply::Started { .. }
    ));
    let prted = td.wait_pid("prted.pid");
    let child = td.wait_pid("child.pid");
    assert!(alive(prted) && alive(child));
    drop(c);
    assert!(
        all_gone(&[prted, child], Duration::from_secs(10)),
        "prted or its child survived"
    );
    assert_idle(agent.addr, &td.secret).await;
}

#[tokio::test]
async fn prted_ignoring_sigterm_is_killed_after_the_grace_period() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &["--kill-grace", "1"]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let pid = match c.request(&launch(&["--stubborn"])).await {
        Reply::Started { pid } => pid,
        other => panic!("unexpected {other:?}"),
    };
    let child = td.wait_pid("child.pid");
    td.wait_pid("prted.pid");
    let t0 = Instant::now();
    c.send(&Request::Kill {
        grace_ms: Some(30_000),
    })
    .await;
    // The agent's own --kill-grace (1 s) bounds the client's request (30 s).
    match c.recv(Duration::from_secs(15)).await.unwrap() {
        Reply::Exited {
            pid: p,
            signal: Some(9),
            ..
        } => assert_eq!(p, pid),
        other => panic!("unexpected {other:?}"),
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "SIGKILL came before the grace period: {took:?}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!alive(pid as i32) && !alive(child));
}

#[tokio::test]
async fn descendants_that_leave_the_process_group_are_stopped_too() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    assert!(matches!(
        c.request(&launch(&["--escape"])).await,
        Reply::Started { .. }
    ));
    let prted = td.wait_pid("prted.pid");
    let child = td.wait_pid("child.pid");
    // Wait until the child has moved to its own process group.
    wait_for(WAIT, || {
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
        let after = &stat[stat.rfind(')')? + 1..];
        let pgrp: i32 = after.split_whitespace().nth(2)?.parse().ok()?;
        (pgrp == child).then_some(())
    })
    .expect("the escaping child never left prted's group");
    drop(c);
    assert!(
        all_gone(&[prted, child], Duration::from_secs(15)),
        "an escaped descendant survived"
    );
}

#[tokio::test]
async fn agent_sigterm_stops_prted_and_exits_with_the_signal() {
    let td = TestDir::new();
    let mut agent = AgentProc::spawn(&td, &["--kill-grace", "5"]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let pid = match c.request(&launch(&["--sleep"])).await {
        Reply::Started { pid } => pid,
        other => panic!("unexpected {other:?}"),
    };
    let child = td.wait_pid("child.pid");
    td.wait_pid("prted.pid");
    agent.signal(Signal::SIGTERM);
    match c.recv(STEP).await.unwrap() {
        Reply::Exited {
            pid: p,
            signal: Some(15),
            ..
        } => assert_eq!(p, pid),
        other => panic!("unexpected {other:?}"),
    }
    // Told to end while its prted ran: the pod's end is a failure (128 + SIGTERM), as a
    // deleted pod's must be, not a success.
    assert_eq!(
        agent.wait_exit(WAIT),
        Some(143),
        "an agent ended while its prted ran must exit 128 + the signal"
    );
    assert!(
        !alive(pid as i32) && !alive(child),
        "processes outlived the agent"
    );
}

#[tokio::test]
async fn exec_failure_is_reported_with_the_os_error() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    // The executable disappears after the agent checked it at start.
    std::fs::remove_file(&td.prted).unwrap();
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    match c.request(&launch(&["--exit", "0"])).await {
        Reply::Failed { reason } => {
            assert!(reason.contains("cannot execute"), "{reason}");
            assert!(reason.contains("No such file or directory"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        c.request(&Request::Status {}).await,
        Reply::Status {
            running: false,
            pid: None,
            launched_by: None
        }
    );
}

fn base_args(td: &TestDir) -> Vec<String> {
    [
        "--listen",
        "127.0.0.1:0",
        "--health-listen",
        "off",
        "--prted",
        td.prted.to_str().unwrap(),
        "--secret-file",
        td.secret_file.to_str().unwrap(),
        "--log-format",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn agent_refuses_to_start_without_a_secret_unless_insecure() {
    let td = TestDir::new();
    std::fs::remove_file(&td.secret_file).unwrap();
    let (code, logs) = AgentProc::spawn_args(&base_args(&td), &[])
        .err()
        .expect("agent started");
    assert_eq!(code, 2);
    assert!(logs.contains("refusing to start"), "{logs}");
    assert!(logs.contains(td.secret_file.to_str().unwrap()), "{logs}");
    assert!(logs.contains("does not exist"), "{logs}");
    assert!(logs.contains("--insecure-no-auth"), "{logs}");

    std::fs::write(&td.secret_file, "\n").unwrap();
    let (code, logs) = AgentProc::spawn_args(&base_args(&td), &[])
        .err()
        .expect("agent started");
    assert_eq!(code, 2);
    assert!(logs.contains("is empty"), "{logs}");

    // With the flag and no secret it serves, warning loudly at every connection.
    std::fs::remove_file(&td.secret_file).unwrap();
    let mut args = base_args(&td);
    args.push("--insecure-no-auth".into());
    let agent = AgentProc::spawn_args(&args, &[]).unwrap();
    assert!(agent
        .wait_log(WAIT, |v| v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("INSECURE: no secret file")))
        .is_some());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = RawClient::connect(agent.addr, None).await.unwrap();
        assert!(!c.session.is_authenticated());
        assert_eq!(c.request(&Request::Ping {}).await, Reply::Pong {});
        // A launcher that holds a secret refuses an agent without one.
        match RawClient::connect(agent.addr, Some(b"k")).await {
            Err(HandshakeError::AgentInsecure) => {}
            other => panic!("unexpected {:?}", other.map(|_| ())),
        }
    });
    let warnings = || {
        agent
            .logs()
            .iter()
            .filter(|l| l.contains("accepting a connection without authentication"))
            .count()
    };
    wait_for(WAIT, || (warnings() >= 2).then_some(())).expect("one warning per connection");
    assert_eq!(warnings(), 2, "one warning per connection expected");
}

#[test]
fn agent_refuses_a_prted_that_is_relative_or_not_executable() {
    let td = TestDir::new();
    let mut args = base_args(&td);
    args[5] = "prted".into();
    let (code, logs) = AgentProc::spawn_args(&args, &[])
        .err()
        .expect("agent started");
    assert_eq!(code, 2);
    assert!(logs.contains("must be an absolute path"), "{logs}");

    std::fs::write(td.path("plain"), "data").unwrap();
    args[5] = td.path("plain").display().to_string();
    let (code, logs) = AgentProc::spawn_args(&args, &[])
        .err()
        .expect("agent started");
    assert_eq!(code, 2);
    assert!(logs.contains("not executable"), "{logs}");
}

#[test]
fn configuration_comes_from_the_environment_too() {
    let td = TestDir::new();
    let agent = AgentProc::spawn_args(
        &["--log-format".to_string(), "json".to_string()],
        &[
            ("PRRTE_K8S_AGENT_LISTEN", "127.0.0.1:0"),
            ("PRRTE_K8S_AGENT_HEALTH_LISTEN", "off"),
            ("PRRTE_K8S_PRTED", td.prted.to_str().unwrap()),
            ("PRRTE_K8S_SECRET_FILE", td.secret_file.to_str().unwrap()),
        ],
    )
    .unwrap();
    assert_eq!(agent.addr.ip().to_string(), "127.0.0.1");
    assert!(agent.health.is_none());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(assert_idle(agent.addr, &td.secret));
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(STEP, s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

#[tokio::test]
async fn health_endpoint_answers_ok_while_serving() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let health = agent.health.expect("health endpoint enabled");
    let ok = http_get(health, "/healthz").await;
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(ok.ends_with("\r\n\r\nok"), "{ok}");
    let missing = http_get(health, "/nope").await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
}

#[tokio::test]
async fn health_endpoint_reports_unavailable_while_shutting_down() {
    let td = TestDir::new();
    let mut agent = AgentProc::spawn(&td, &["--kill-grace", "3"]);
    let health = agent.health.unwrap();
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    assert!(matches!(
        c.request(&launch(&["--stubborn"])).await,
        Reply::Started { .. }
    ));
    td.wait_pid("prted.pid");
    agent.signal(Signal::SIGTERM);
    // The stubborn prted holds the agent in shutdown for its 3 s grace period.
    agent
        .wait_log(WAIT, |v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("shutting down"))
        })
        .expect("agent did not start shutting down");
    let answer = http_get(health, "/healthz").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(matches!(
        c.recv(STEP).await.unwrap(),
        Reply::Exited {
            signal: Some(9),
            ..
        }
    ));
    assert_eq!(agent.wait_exit(WAIT), Some(143));
}

#[test]
fn help_documents_every_setting_and_default() {
    let out = std::process::Command::new(AGENT)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--listen",
        "PRRTE_K8S_AGENT_LISTEN",
        "$POD_IP",
        "PRRTE_K8S_AGENT_PORT",
        "[default: 7117]",
        "--prted",
        "PRRTE_K8S_PRTED",
        "--secret-file",
        "PRRTE_K8S_SECRET_FILE",
        "[default: /etc/prrte-k8s/secret/key]",
        "--insecure-no-auth",
        "--health-listen",
        "7118",
        "--tmpdir",
        "/tmp",
        "--kill-grace",
        "[default: 5]",
        "--max-frame",
        "[default: 1048576]",
        "--log-format",
        "[default: text]",
        "json",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

/// The agent as a pod's entrypoint: PID 1 of its own PID namespace (as in a container). It must
/// reap orphans that init would otherwise reap, and honour SIGTERM (PID 1 gets no default
/// signal actions).
#[tokio::test]
async fn agent_as_pid_1_reaps_orphans_and_stops_on_sigterm() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root for a PID namespace: run the suite as root (make test)"
    );
    let td = TestDir::new();
    let args = AgentProc::test_args(&td, &[]);
    let mut agent = AgentProc::spawn_wrapped(
        &[
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--",
        ],
        &args,
        &[],
    )
    .expect("agent did not start in a PID namespace");
    let listening = agent
        .wait_log(WAIT, |v| v["message"] == "listening")
        .unwrap();
    assert_eq!(listening["pid"], 1, "the agent is not PID 1: {listening}");
    // Host-side pid of the agent: the only child of `unshare`.
    let host_pid = wait_for(WAIT, || {
        let kids = children_of(agent.pid());
        (kids.len() == 1).then(|| kids[0].pid)
    })
    .expect("cannot find the agent's host pid");

    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let pid = match c.request(&launch(&["--orphan"])).await {
        Reply::Started { pid } => pid,
        other => panic!("unexpected {other:?}"),
    };
    assert!(pid > 1, "prted's pid is namespace-local: {pid}");
    // prted, plus the orphaned sleep reparented to the agent once its subshell exits.
    wait_for(WAIT, || {
        let kids = children_of(host_pid);
        (kids.len() == 2 && kids.iter().all(|k| k.state != 'Z')).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "orphan not reparented to the agent: {:?}",
            children_of(host_pid)
        )
    });

    match c.request(&Request::Kill { grace_ms: None }).await {
        Reply::Exited {
            pid: p,
            signal: Some(15),
            ..
        } => assert_eq!(p, pid),
        other => panic!("unexpected {other:?}"),
    }
    // `exited` means everything was reaped: no children, not even zombies.
    assert_eq!(
        children_of(host_pid),
        vec![],
        "the agent left children or zombies"
    );

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(host_pid), Signal::SIGTERM).unwrap();
    c.expect_closed().await;
    assert_eq!(
        agent.wait_exit(WAIT),
        Some(0),
        "the agent (PID 1) did not exit cleanly"
    );
}
