//! Boolean query parameters as a Kubernetes API server reads them (`0` and `false` in any case
//! are false, any other value true), through raw requests: the official Python client (and the
//! Kubeflow SDK on it) sends `follow=True` and `watch=True`, so a followed pod log must stream
//! until the pod ends and a watch must be a watch, not a list that ends at once.
#![forbid(unsafe_code)]

mod common;

use common::api::{admin, make_ns, pod, WAIT};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use sandbox::api::{ApiOptions, ApiServer};
use sandbox::harness::unique;
use serde_json::{json, Value};

fn get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}

async fn phase(pods: &Api<Pod>, name: &str, phase: &str) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": phase}})),
    )
    .await
    .unwrap();
}

/// The next line of a streamed body, or None at its end.
async fn next<S>(lines: &mut S) -> Option<String>
where
    S: futures::Stream<Item = std::io::Result<String>> + Unpin,
{
    tokio::time::timeout(WAIT, lines.next())
        .await
        .expect("a line or the end within the wait")
        .map(|l| l.unwrap())
}

/// `follow=True` follows: the log so far, then a line appended while the pod runs, then the
/// end of the stream once the pod has succeeded. `follow=False` and `follow=0` answer the log
/// as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_true_streams_the_log_until_the_pod_ends() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("main.log");
    std::fs::write(&log, "one\n").unwrap();
    let served = log.clone();
    server.set_log_source(move |_, name, container| {
        (name == "p" && container == "main").then(|| served.clone())
    });
    let c = admin(&server).await;
    let ns = unique("flags");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    phase(&pods, "p", "Running").await;

    let path = format!("/api/v1/namespaces/{ns}/pods/p/log?container=main");
    for off in ["follow=False", "follow=0", "follow=false"] {
        let text = tokio::time::timeout(WAIT, c.request_text(get(&format!("{path}&{off}"))))
            .await
            .unwrap_or_else(|_| panic!("{off} answers at once"))
            .unwrap();
        assert_eq!(text, "one\n", "{off}");
    }

    let body = c
        .request_stream(get(&format!("{path}&follow=True")))
        .await
        .unwrap();
    let mut lines = body.lines();
    assert_eq!(next(&mut lines).await.as_deref(), Some("one"));
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"two\n"))
        .unwrap();
    assert_eq!(
        next(&mut lines).await.as_deref(),
        Some("two"),
        "the followed log shows what the pod writes after the request"
    );
    phase(&pods, "p", "Succeeded").await;
    assert_eq!(next(&mut lines).await, None, "the stream ends with the pod");
}

/// `watch=True` on a collection is a watch (events as objects are made), `watch=False` a list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_true_is_a_watch() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("flags");
    make_ns(&c, &ns).await;
    let coll = format!("/api/v1/namespaces/{ns}/configmaps");
    let list: Value = serde_json::from_str(
        &c.request_text(get(&format!("{coll}?watch=False")))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let body = c
        .request_stream(get(&format!("{coll}?watch=True&resourceVersion={rv}")))
        .await
        .unwrap();
    let mut lines = body.lines();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(c.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "made"}})).unwrap(),
    )
    .await
    .unwrap();
    let line = tokio::time::timeout(WAIT, lines.next())
        .await
        .expect("an event within the wait")
        .expect("the watch goes on")
        .unwrap();
    let ev: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(ev["type"], "ADDED", "{ev}");
    assert_eq!(ev["object"]["metadata"]["name"], "made", "{ev}");
    // the watch is still open: a second object is a second event
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "second"}})).unwrap(),
    )
    .await
    .unwrap();
    let line = tokio::time::timeout(WAIT, lines.next())
        .await
        .expect("a second event within the wait")
        .expect("the watch goes on")
        .unwrap();
    let ev: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(ev["object"]["metadata"]["name"], "second", "{ev}");
}
