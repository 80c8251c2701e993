//! Discovery against an API server that fails: down at start, answering 500, for a
//! while or until the timeout. Transient failures are retried with backoff until
//! `ras_k8s_timeout`; then discovery fails naming the server, the call and how long it tried.
//! (A watch dropped or expired mid-wait is in discovery_sandbox.rs.)
#![forbid(unsafe_code)]

mod discovery_support;

use std::time::{Duration, Instant};

use discovery_support::{names, Fixture, WAIT};
use prrte_k8s::discovery::{self, DiscoveryError, ErrorKind};
use sandbox::api::faults::{Fault, FaultRule};
use serde_json::json;

async fn two_ready_pods(f: &Fixture, app: &str) -> discovery::DiscoveryConfig {
    for i in 0..2 {
        let name = format!("{app}-{i}");
        f.create_pod(&name, json!({ "app": app }), json!({})).await;
        f.make_ready(&name, &format!("10.21.0.{}", 10 + i)).await;
    }
    discovery::DiscoveryConfig {
        selector: Some(format!("app={app}")),
        ..f.config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_lists_answering_500_then_recovering_are_retried() {
    let f = Fixture::new("f500").await;
    let cfg = two_ready_pods(&f, "r").await;
    let h = f.server.inject(
        FaultRule::new(Fault::Status(500))
            .method("GET")
            .path("/pods")
            .list()
            .times(3),
    );
    let alloc = tokio::time::timeout(WAIT, discovery::discover(&cfg))
        .await
        .expect("bounded")
        .expect("the 500s are retried");
    assert_eq!(names(&alloc), ["r-0", "r-1"]);
    assert_eq!(h.hits(), 3, "every injected 500 was met");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_at_start_is_waited_for() {
    let f = Fixture::new("fdown").await;
    let cfg = two_ready_pods(&f, "d").await;
    f.server.set_down(true);
    let task = tokio::spawn(async move { discovery::discover(&cfg).await });
    // Down for a while: discovery keeps trying, it neither fails nor succeeds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !task.is_finished(),
        "discovery gave up while the server was down"
    );
    let refused = f.server.refused_while_down();
    assert!(
        refused >= 2,
        "discovery retried ({refused} connections refused)"
    );
    f.server.set_down(false);
    let alloc = tokio::time::timeout(WAIT, task)
        .await
        .expect("bounded")
        .unwrap()
        .expect("allocation once the server is back");
    assert_eq!(names(&alloc), ["d-0", "d-1"]);
}

/// The server never recovers: discovery ends near the timeout (not at once, not much later)
/// with the last failure, the server's address, the call and the retries in the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_that_last_end_at_the_timeout_naming_the_cause() {
    let f = Fixture::new("fkeep").await;
    let base = two_ready_pods(&f, "k").await;
    let cfg = discovery::DiscoveryConfig {
        timeout: Duration::from_secs(3),
        ..base
    };

    // 1. Every pod list answers 500.
    let h = f
        .server
        .inject(FaultRule::new(Fault::Status(500)).path("/pods").list());
    let start = Instant::now();
    let err = discovery::discover(&cfg).await.expect_err("never answered");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(6),
        "retried until the 3s timeout: {took:?}"
    );
    assert!(h.hits() >= 3, "retried: {} lists", h.hits());
    assert_eq!(err.kind(), ErrorKind::Api, "{err}");
    let msg = err.to_string();
    assert!(
        matches!(err, DiscoveryError::Api { code: 500, .. }),
        "{msg}"
    );
    assert!(msg.contains("list pods"), "names the call: {msg}");
    assert!(msg.contains(&f.server.url()), "names the server: {msg}");
    assert!(
        msg.contains("retried until the 3s timeout"),
        "says it retried: {msg}"
    );
    f.server.clear_faults();

    // 2. The server is down the whole time.
    f.server.set_down(true);
    let start = Instant::now();
    let err = discovery::discover(&cfg).await.expect_err("down");
    let took = start.elapsed();
    f.server.set_down(false);
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(6),
        "retried until the 3s timeout: {took:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&f.server.url()), "names the server: {msg}");
    assert!(msg.contains("retried until the 3s timeout"), "{msg}");

    // 3. Errors no retry can fix still end discovery at once.
    f.server
        .inject(FaultRule::new(Fault::Status(404)).path("/pods").list());
    let start = Instant::now();
    let err = discovery::discover(&cfg).await.expect_err("404");
    assert!(start.elapsed() < Duration::from_secs(2), "not retried");
    assert!(
        matches!(err, DiscoveryError::Api { code: 404, .. }),
        "{err}"
    );
}

/// A 500 when reading our own pod (to infer the selector) is retried as well, and the answer,
/// once it comes, decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_own_pod_lookup_is_retried_too() {
    let f = Fixture::new("fowner").await;
    let cfg = two_ready_pods(&f, "o").await;
    let h = f.server.inject(
        FaultRule::new(Fault::Status(500))
            .path("/pods/o-0")
            .method("GET")
            .times(2),
    );
    let cfg = discovery::DiscoveryConfig {
        selector: None,
        self_pod: Some("o-0".into()),
        ..cfg
    };
    // o-0 has no workload labels: inference fails, but only after the 500s were retried.
    let err = tokio::time::timeout(WAIT, discovery::discover(&cfg))
        .await
        .expect("bounded")
        .expect_err("no labels to infer from");
    assert_eq!(h.hits(), 2);
    assert_eq!(err.kind(), ErrorKind::SelectorNotInferable, "{err}");
}
