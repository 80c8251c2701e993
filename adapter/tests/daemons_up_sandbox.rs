//! The launcher's `DaemonsUp` event against the sandbox API server, with a token holding only
//! what a controller-made job's Role adds (`create` on core `events`): the Event is recorded on
//! the MPIJob (what `kubectl describe mpijob` lists), and a launcher that may not record it
//! gets an error naming the cause, within the post's bound.
#![forbid(unsafe_code)]

mod discovery_support;

use std::time::{Duration, Instant};

use discovery_support::Fixture;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use prrte_k8s::discovery::client::Environment;
use prrte_k8s::launch::daemons_up::{self, Target, POST_TIMEOUT};
use prrte_k8s::settings::mpijob::MpiJobRef;
use sandbox::api::Rule;

fn target(f: &Fixture, token: &str) -> Target {
    Target {
        owner: MpiJobRef {
            name: "pi".into(),
            uid: "1f1e5c7a-0000-4000-8000-000000000001".into(),
        },
        kubeconfig: Some(f.kubeconfig_for(token)),
        namespace: None,
    }
}

fn launcher_env() -> Environment {
    Environment {
        pod_name: Some("pi-0-abcde".into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_is_recorded_on_the_mpijob_with_only_create_on_events() {
    let f = Fixture::new("daemonsup").await;
    f.server.add_token(
        "tok-events",
        "launcher",
        Some("daemonsup"),
        vec![Rule::new(&["create"], &[""], &["events"])],
    );
    // The namespace is the kubeconfig context's here (the pod's service account's in a pod).
    daemons_up::record(
        &target(&f, "tok-events"),
        daemons_up::message(3, 0.42),
        &launcher_env(),
    )
    .await
    .expect("recorded");
    let events: Api<Event> = Api::namespaced(f.client.clone(), "daemonsup");
    let list = events
        .list(&ListParams::default().fields(
            "involvedObject.kind=MPIJob,involvedObject.name=pi,involvedObject.uid=1f1e5c7a-0000-4000-8000-000000000001",
        ))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "{:?}", list.items);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("DaemonsUp"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(
        e.involved_object.api_version.as_deref(),
        Some("kubeflow.org/v2beta1")
    );
    let source = e.source.clone().unwrap_or_default();
    assert_eq!(source.component.as_deref(), Some("prrte-k8s-launcher"));
    assert_eq!(source.host.as_deref(), Some("pi-0-abcde"));
    let m = e.message.as_deref().unwrap_or_default();
    assert!(
        m.contains("all 3 of PRRTE's daemons are up") && m.contains("0.42 s"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launcher_that_may_not_record_gets_the_cause_in_bounded_time() {
    let f = Fixture::new("daemonsno").await;
    f.server.add_token(
        "tok-pods",
        "launcher",
        Some("daemonsno"),
        vec![Rule::new(&["get", "list", "watch"], &[""], &["pods"])],
    );
    let start = Instant::now();
    let e = daemons_up::record(
        &target(&f, "tok-pods"),
        daemons_up::message(3, 0.42),
        &launcher_env(),
    )
    .await
    .expect_err("events are forbidden");
    assert!(
        e.contains("403") || e.to_lowercase().contains("forbidden"),
        "{e}"
    );
    assert!(start.elapsed() < POST_TIMEOUT + Duration::from_secs(2));
    // On its own thread: `post` returns at once, and the outcome is only logged.
    let posting = daemons_up::post(target(&f, "tok-pods"), "m".into());
    assert!(posting.wait(POST_TIMEOUT + Duration::from_secs(2)));
}
