//! kube-rs clients of a sandbox API server and what the API tests share: a namespace made, a
//! pod to create, an API error's `Status`, the next event of a watch.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use sandbox::api::ApiServer;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(20);

pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(cfg).expect("client")
}

pub async fn admin(server: &ApiServer) -> kube::Client {
    client_for(server.admin_kubeconfig()).await
}

pub async fn token_client(server: &ApiServer, token: &str, dir: &Path) -> kube::Client {
    let p = dir.join(format!(
        "kc-{}",
        &token[..token.len().min(12)].replace(['.', '/'], "_")
    ));
    server.write_kubeconfig(&p, token, "default").unwrap();
    client_for(&p).await
}

pub async fn make_ns(c: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(c.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .expect("create namespace");
}

pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "none", "command": ["sleep", "1"]}]},
    }))
    .unwrap()
}

pub fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub async fn next_event<S, T>(s: &mut S, what: &str) -> T
where
    S: futures::Stream<Item = T> + Unpin,
{
    tokio::time::timeout(WAIT, s.next())
        .await
        .unwrap_or_else(|_| panic!("no watch event within {WAIT:?} while waiting for {what}"))
        .unwrap_or_else(|| panic!("watch stream ended while waiting for {what}"))
}
