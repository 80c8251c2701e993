//! The agent's `/metrics` endpoint, scraped from the real agent process: it is off unless
//! asked for; it counts daemons started and exec requests refused by reason; its port answers
//! `GET /metrics` and nothing else, takes a bounded request head, and drops a silent client.
#![forbid(unsafe_code)]

mod agent_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agent_support::{mode_args, AgentProc, RawClient, TestDir};
use prrte_k8s::protocol::{Reply, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `head` to `addr` and returns everything the server answers before it closes.
async fn http(addr: SocketAddr, head: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    read.expect("the metrics endpoint did not close the connection")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

async fn scrape(addr: SocketAddr) -> String {
    let answer = http(addr, b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{answer}"
    );
    assert!(answer.ends_with("# EOF\n"), "{answer}");
    answer
}

async fn exec(c: &mut RawClient, argv: &[&str]) -> Reply {
    c.request(&Request::Exec {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env: vec![],
        cwd: None,
        stdin: false,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_agent_counts_daemons_and_refusals_on_its_metrics_port() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &["--metrics-listen", "127.0.0.1:0"]);
    let addr = agent
        .metrics
        .expect("the agent logs where it serves metrics");
    let before = scrape(addr).await;
    assert!(
        before.contains("prrte_k8s_agent_daemons_started_total{via=\"launch\"} 0\n"),
        "{before}"
    );

    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let reply = c
        .request(&Request::Launch {
            argv: mode_args("sleep"),
            env: Default::default(),
            dvm_uri: None,
        })
        .await;
    assert!(matches!(reply, Reply::Started { .. }), "{reply:?}");
    drop(c);

    for argv in [&["/bin/sh", "-c", "id"][..], &[]] {
        let mut c = RawClient::connect(agent.addr, Some(&td.secret))
            .await
            .unwrap();
        let reply = exec(&mut c, argv).await;
        assert!(matches!(reply, Reply::Failed { .. }), "{argv:?}: {reply:?}");
    }

    let after = scrape(addr).await;
    for line in [
        "prrte_k8s_agent_daemons_started_total{via=\"launch\"} 1\n",
        "prrte_k8s_agent_daemons_started_total{via=\"exec\"} 0\n",
        "prrte_k8s_agent_exec_refused_total{reason=\"not_allowed\"} 1\n",
        "prrte_k8s_agent_exec_refused_total{reason=\"no_program\"} 1\n",
        "prrte_k8s_agent_heartbeats_missed_total{peer=\"launcher\"} 0\n",
    ] {
        assert!(after.contains(line), "{line:?} missing in {after}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_port_answers_get_metrics_and_nothing_else() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &["--metrics-listen", "127.0.0.1:0"]);
    let addr = agent.metrics.unwrap();
    let status = |answer: String| answer.lines().next().unwrap_or_default().to_string();
    for (head, expected) in [
        (
            &b"GET /healthz HTTP/1.1\r\n\r\n"[..],
            "HTTP/1.1 404 Not Found",
        ),
        (
            b"GET /metrics/../x HTTP/1.1\r\n\r\n",
            "HTTP/1.1 404 Not Found",
        ),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.1 405 Method Not Allowed",
        ),
        (
            b"HEAD /metrics HTTP/1.1\r\n\r\n",
            "HTTP/1.1 405 Method Not Allowed",
        ),
    ] {
        assert_eq!(
            status(http(addr, head).await),
            expected,
            "{}",
            String::from_utf8_lossy(head)
        );
    }
    let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 8192));
    assert_eq!(
        status(http(addr, &big).await),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    // A client that sends half a head and stops is dropped after the head's deadline (3 s).
    let t0 = Instant::now();
    let answer = http(addr, b"GET /metrics HTTP/1.1\r\n").await;
    assert!(answer.is_empty(), "{answer}");
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    // The health port does not serve metrics.
    let health = agent.health.unwrap();
    assert_eq!(
        status(http(health, b"GET /metrics HTTP/1.1\r\n\r\n").await),
        "HTTP/1.1 404 Not Found"
    );
}

#[test]
fn metrics_are_off_unless_asked_for() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    assert_eq!(agent.metrics, None);
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("\"metrics\":\"off\"")),
        "{:?}",
        agent.logs()
    );
}
