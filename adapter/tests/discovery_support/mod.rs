//! Shared fixtures for the discovery tests: a sandbox API server, a namespace, and helpers to
//! create pods and drive their status the way a kubelet would.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use prrte_k8s::discovery::DiscoveryConfig;
use sandbox::api::{ApiOptions, ApiServer};
use serde_json::{json, Value};

/// Bound for anything a test awaits that is not itself bounded by a discovery timeout.
pub const WAIT: Duration = Duration::from_secs(30);

pub struct Fixture {
    pub server: ApiServer,
    pub client: kube::Client,
    pub ns: String,
    pub dir: tempfile::TempDir,
}

pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(cfg).expect("client")
}

impl Fixture {
    /// A fresh API server with namespace `ns` created in it.
    pub async fn new(ns: &str) -> Fixture {
        let server = ApiServer::start(ApiOptions::default())
            .await
            .expect("sandbox API server starts");
        let client = client_for(server.admin_kubeconfig()).await;
        let nss: Api<Namespace> = Api::all(client.clone());
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .expect("create namespace");
        Fixture {
            server,
            client,
            ns: ns.to_string(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A discovery configuration using the admin kubeconfig in this namespace.
    pub fn config(&self) -> DiscoveryConfig {
        DiscoveryConfig {
            namespace: Some(self.ns.clone()),
            kubeconfig: Some(self.server.admin_kubeconfig().to_path_buf()),
            timeout: Duration::from_secs(20),
            ..Default::default()
        }
    }

    /// Writes a kubeconfig for `token` (context namespace = ours) and returns its path.
    pub fn kubeconfig_for(&self, token: &str) -> PathBuf {
        let p = self
            .dir
            .path()
            .join(format!("kc-{}.yaml", rand::random::<u32>()));
        self.server.write_kubeconfig(&p, token, &self.ns).unwrap();
        p
    }

    /// Creates a pod from a JSON body; `extra` is merged into the default pod.
    pub async fn create_pod(&self, name: &str, labels: Value, extra: Value) -> Pod {
        let mut body = json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "main", "image": "mpi", "command": ["sleep", "infinity"]}]},
        });
        merge(&mut body, &extra);
        let pod: Pod = serde_json::from_value(body).expect("pod JSON");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {name}: {e}"))
    }

    /// Sets the pod Running + Ready with `ip`, as a kubelet would report it.
    pub async fn make_ready(&self, name: &str, ip: &str) -> Pod {
        self.set_status(
            name,
            json!({
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
            }),
        )
        .await
    }

    pub async fn set_status(&self, name: &str, status: Value) -> Pod {
        self.pods()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("patch status of {name}: {e}"))
    }
}

/// JSON merge of `patch` into `doc` (objects merge recursively, everything else replaces).
pub fn merge(doc: &mut Value, patch: &Value) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                merge(d.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (d, p) => *d = p.clone(),
    }
}

pub fn names(alloc: &prrte_k8s::discovery::Allocation) -> Vec<String> {
    alloc.nodes.iter().map(|n| n.pod.clone()).collect()
}

/// The first event of namespace `ns` about the object `name` with reason `reason` (watched for,
/// so one posted after the caller's last read counts), within `within`; an error saying what
/// was awaited otherwise.
pub async fn event_about(
    client: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
    within: Duration,
) -> Result<k8s_openapi::api::events::v1::Event, String> {
    use futures::{StreamExt, TryStreamExt};
    use kube::runtime::{watcher, WatchStreamExt};
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let first = tokio::time::timeout(
        within,
        watcher(events, watcher::Config::default())
            .applied_objects()
            .try_filter(|e| {
                futures::future::ready(
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some(reason),
                )
            })
            .boxed()
            .try_next(),
    )
    .await;
    match first {
        Ok(Ok(Some(e))) => Ok(e),
        other => Err(format!(
            "no event {reason} about {ns}/{name} in {within:?}: {other:?}"
        )),
    }
}
