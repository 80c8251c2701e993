//! Fault injection in the sandbox API server, seen by a real client (kube-rs): injected status
//! codes, expired and dropped watches, an outage; and kube's watcher getting every change
//! through dropped and expired watches.
#![forbid(unsafe_code)]

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use sandbox::api::faults::{Fault, FaultRule};
use sandbox::api::{ApiOptions, ApiServer};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

async fn admin(server: &ApiServer) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(server.admin_kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "f"}},
        "spec": {"containers": [{"name": "main", "image": "none"}]},
    }))
    .unwrap()
}

async fn setup() -> (ApiServer, kube::Client, Api<Pod>) {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = format!("faults-{:06x}", rand::random::<u32>() & 0xffffff);
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    (server, c, pods)
}

#[tokio::test]
async fn injected_statuses_apply_the_given_number_of_times() {
    let (server, _c, pods) = setup().await;
    let h = server.inject(
        FaultRule::new(Fault::Status(500))
            .path("/pods")
            .list()
            .times(2),
    );
    for _ in 0..2 {
        match pods.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 500),
            other => panic!("expected 500, got {other:?}"),
        }
    }
    pods.list(&ListParams::default())
        .await
        .expect("the fault ran out");
    assert_eq!(h.hits(), 2);
    server.inject(FaultRule::new(Fault::Status(403)).method("POST").times(1));
    match pods.create(&PostParams::default(), &pod("p0")).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden")),
        other => panic!("expected 403, got {other:?}"),
    }
}

#[tokio::test]
async fn an_expired_watch_gets_one_410_error_event() {
    let (server, _c, pods) = setup().await;
    server.inject(
        FaultRule::new(Fault::WatchGone)
            .path("/pods")
            .watch()
            .times(1),
    );
    let mut s = pods
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(WAIT, s.next()).await.unwrap() {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(WAIT, s.next())
            .await
            .unwrap()
            .is_none(),
        "the stream ends"
    );
}

#[tokio::test]
async fn a_dropped_watch_ends_after_the_given_events() {
    let (server, _c, pods) = setup().await;
    server.inject(
        FaultRule::new(Fault::CloseWatchAfter(2))
            .path("/pods")
            .watch()
            .times(1),
    );
    let list = pods.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut s = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    let mut seen = 0;
    while let Ok(Some(ev)) = tokio::time::timeout(WAIT, s.next()).await {
        assert!(matches!(ev, Ok(WatchEvent::Added(_))), "{ev:?}");
        seen += 1;
    }
    assert_eq!(seen, 2, "the watch ended after two events");
}

#[tokio::test]
async fn an_outage_refuses_connections_until_it_ends() {
    let (server, _c, pods) = setup().await;
    server.set_down(true);
    // A fresh client (the old one may reuse a kept-alive connection).
    let fresh: Api<Pod> = Api::namespaced(admin(&server).await, pods.namespace().unwrap());
    let e = fresh.list(&ListParams::default()).await.unwrap_err();
    assert!(
        !matches!(e, kube::Error::Api(_)),
        "a connection error, not an answer: {e:?}"
    );
    assert!(server.refused_while_down() >= 1);
    server.set_down(false);
    fresh
        .list(&ListParams::default())
        .await
        .expect("the server is back");
}

/// kube's watcher through every kind of watch failure: no pod added meanwhile is lost.
#[tokio::test]
async fn no_change_is_lost_through_dropped_and_expired_watches() {
    let (server, _c, pods) = setup().await;
    server.inject(
        FaultRule::new(Fault::CloseWatchAfter(1))
            .path("/pods")
            .watch()
            .times(3),
    );
    server.inject(
        FaultRule::new(Fault::WatchGone)
            .path("/pods")
            .watch()
            .times(2),
    );
    server.inject(
        FaultRule::new(Fault::Status(500))
            .method("GET")
            .path("/pods")
            .list()
            .times(2),
    );
    let cfg = watcher::Config::default().timeout(5);
    let mut w = watcher(pods.clone(), cfg).default_backoff().boxed();
    let names: BTreeSet<String> = (0..8).map(|i| format!("p{i}")).collect();
    let creator = {
        let pods = pods.clone();
        let names = names.clone();
        tokio::spawn(async move {
            for n in names {
                pods.create(&PostParams::default(), &pod(&n)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen != names {
        let ev = tokio::time::timeout_at(deadline, w.next())
            .await
            .unwrap_or_else(|_| panic!("saw only {seen:?}"));
        match ev {
            Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                seen.insert(p.metadata.name.unwrap());
            }
            Some(_) => {}
            None => panic!("the watcher ended"),
        }
    }
    creator.await.unwrap();
}
