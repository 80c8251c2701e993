//! A whole sandbox cluster: a pod network, the API server on its gateway address, a kubelet
//! that runs pods as podnet pods, and the Job/StatefulSet controllers.

pub mod controllers;
pub mod kubelet;
pub mod security;

use crate::api::resources::{NODES, PODS};
use crate::api::{ApiOptions, ApiServer, Obj, Part, Store};
use crate::runtime::podnet::Network;
use anyhow::{anyhow, bail, Context, Result};
use kubelet::Kubelet;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use kubelet::{ExecInfo, SA_MOUNT};

/// The most pods the node can run at once: the pod network is a /23 (a node's pod CIDR for
/// more than 254 pods), all of whose addresses but the first, the gateway's (also the API
/// server's) and the last are the pods'.
pub const MAX_NODE_PODS: usize = crate::runtime::podnet::MAX_PODS;

/// How to start a [`Cluster`].
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Name of the one node (default "sandbox-node").
    pub node_name: String,
    /// Where the CA, kubeconfigs and pod directories (logs, service-account files) go
    /// (default: a temporary directory removed on drop).
    pub dir: Option<PathBuf>,
    /// API server port on the gateway address (default 0: any free port).
    pub api_port: u16,
    /// More addresses for the API server certificate.
    pub extra_san_ips: Vec<IpAddr>,
    /// Pods the node runs at once (default 110, as a kubelet); more stay Pending/Unschedulable.
    pub max_pods: usize,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            node_name: "sandbox-node".into(),
            dir: None,
            api_port: 0,
            extra_san_ips: Vec::new(),
            max_pods: kubelet::MAX_PODS,
        }
    }
}

/// A running sandbox cluster. Dropping it kills every pod and removes the network.
pub struct Cluster {
    api: Arc<ApiServer>,
    net: Arc<Network>,
    kubelet: Arc<Kubelet>,
    netpol: Arc<crate::netpol::Enforcer>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Cluster {
    /// Creates the network, starts the API server on its gateway, the kubelet and the
    /// controllers, and registers the node. Needs root.
    pub async fn start(opts: ClusterOptions) -> Result<Cluster> {
        if opts.max_pods > MAX_NODE_PODS {
            bail!(
                "max_pods {} is more than the node's pod network holds: its /{} has {MAX_NODE_PODS} pod addresses; ask for at most {MAX_NODE_PODS} pods",
                opts.max_pods,
                crate::runtime::podnet::PREFIX_LEN
            );
        }
        let (tmp, dir) = match &opts.dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("prrte-k8s-cluster-")
                    .tempdir()?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let net = tokio::task::spawn_blocking(Network::create)
            .await
            .context("creating the pod network")??;
        let net = Arc::new(net);
        let gw = net.gateway();
        let mut sans = opts.extra_san_ips.clone();
        sans.push(IpAddr::V4(gw));
        let api = ApiServer::start(ApiOptions {
            bind: SocketAddr::new(IpAddr::V4(gw), opts.api_port),
            dir: Some(dir.join("api")),
            extra_san_ips: sans,
        })
        .await
        .context("starting the API server on the pod network's gateway")?;
        let api = Arc::new(api);
        let store = api.store();
        register_node(&store, &opts.node_name, &gw.to_string(), opts.max_pods)?;
        let kubelet = Arc::new(Kubelet {
            node: opts.node_name.clone(),
            store: store.clone(),
            api: Arc::downgrade(&api),
            net: Arc::downgrade(&net),
            dir: dir.join("pods"),
            pods: Mutex::new(HashMap::new()),
            max_pods: opts.max_pods.max(1),
            stopping: Default::default(),
            dying: Default::default(),
            images: Arc::new(crate::images::ImageStore::new(&net.prefix())),
        });
        // Its pods are deleted gracefully: the kubelet stops their containers, then removes them.
        store.set_node_terminates_pods(&opts.node_name, true);
        let weak = Arc::downgrade(&kubelet);
        api.set_log_source(move |ns, name, container| {
            weak.upgrade()
                .and_then(|k| k.log_path(ns, name, Some(container)))
        });
        let netpol = Arc::new(crate::netpol::Enforcer::new(&net.prefix(), store.clone()));
        let tasks = vec![
            tokio::spawn(kubelet.clone().run()),
            tokio::spawn(netpol.clone().run()),
            controllers::spawn(store),
        ];
        Ok(Cluster {
            api,
            net,
            kubelet,
            netpol,
            tasks: Mutex::new(tasks),
            dir,
            _tmp: tmp,
        })
    }

    pub fn api(&self) -> &ApiServer {
        &self.api
    }

    pub fn store(&self) -> Store {
        self.api.store()
    }

    pub fn network(&self) -> &Network {
        &self.net
    }

    /// The admin kubeconfig (server on the gateway address, reachable from host and pods).
    pub fn kubeconfig(&self) -> &Path {
        self.api.admin_kubeconfig()
    }

    /// The cluster's directory (CA, kubeconfigs, pod directories).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn node_name(&self) -> &str {
        &self.kubelet.node
    }

    /// Creates the objects of a multi-document YAML manifest (Pod, Job, StatefulSet, Secret,
    /// ServiceAccount, Role, RoleBinding, Namespace, ConfigMap, Service, ...); objects that
    /// exist already are updated with the manifest merged in. Returns the stored objects.
    pub fn apply_yaml(&self, yaml: &str) -> Result<Vec<Obj>> {
        apply_yaml(&self.store(), yaml)
    }

    /// Kills a running pod ("name" or "namespace/name") and marks it Failed with reason Evicted.
    pub fn evict(&self, pod: &str) -> Result<()> {
        self.kubelet.evict(
            pod,
            "The sandbox evicted this pod (node-pressure eviction).",
        )
    }

    /// A command that runs `argv` inside a running pod ("name" or "namespace/name") with the
    /// pod's environment; set stdio and spawn it.
    pub fn pod_exec(&self, pod: &str, argv: &[&str]) -> Result<std::process::Command> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        self.kubelet.exec(pod, None, &argv)
    }

    /// As [`Cluster::pod_exec`], in container `container` of the pod (`kubectl exec -c`).
    pub fn container_exec(
        &self,
        pod: &str,
        container: &str,
        argv: &[&str],
    ) -> Result<std::process::Command> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        self.kubelet.exec(pod, Some(container), &argv)
    }

    /// Run `argv` to completion inside a running pod (as [`Cluster::pod_exec`], stdin empty):
    /// its exit code (-1 when a signal ended it), stdout and stderr, each trimmed.
    pub fn pod_run(&self, pod: &str, argv: &[&str]) -> Result<(i32, String, String)> {
        self.run_in(self.pod_exec(pod, argv)?, pod, argv)
    }

    /// As [`Cluster::pod_run`], in container `container` of the pod.
    pub fn container_run(
        &self,
        pod: &str,
        container: &str,
        argv: &[&str],
    ) -> Result<(i32, String, String)> {
        self.run_in(self.container_exec(pod, container, argv)?, pod, argv)
    }

    fn run_in(
        &self,
        mut cmd: std::process::Command,
        pod: &str,
        argv: &[&str],
    ) -> Result<(i32, String, String)> {
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("running {argv:?} in {pod}"))?;
        let trimmed = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
        Ok((
            out.status.code().unwrap_or(-1),
            trimmed(&out.stdout),
            trimmed(&out.stderr),
        ))
    }

    /// Host pids of every process of a running pod.
    pub fn pod_host_pids(&self, pod: &str) -> Result<Vec<u32>> {
        let (uid, _, _) = self.kubelet.find(pod)?;
        let pods = self.kubelet.pods.lock().unwrap_or_else(|p| p.into_inner());
        let h = pods.get(&uid).ok_or_else(|| anyhow!("pod {pod} is gone"))?;
        let r = h.running.lock().unwrap_or_else(|p| p.into_inner());
        Ok(r.as_ref().map(|rp| rp.host_pids()).unwrap_or_default())
    }

    /// What another process needs to `exec` into a running pod (see [`ExecInfo`]).
    pub fn pod_exec_info(&self, ns: &str, name: &str) -> Option<ExecInfo> {
        let dir = self.kubelet.pod_dir(ns, name)?;
        let text = std::fs::read(dir.join("exec.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The directory of a pod the kubelet runs (service-account files, volumes, log).
    pub fn pod_dir(&self, ns: &str, name: &str) -> Option<PathBuf> {
        self.kubelet.pod_dir(ns, name)
    }

    /// The log file of a pod the kubelet runs (of its default container: the one the
    /// `kubectl.kubernetes.io/default-container` annotation names, else the first).
    pub fn pod_log(&self, ns: &str, name: &str) -> Option<PathBuf> {
        self.kubelet.log_path(ns, name, None)
    }

    /// The log file of container `container` of a pod the kubelet runs.
    pub fn container_log(&self, ns: &str, name: &str, container: &str) -> Option<PathBuf> {
        self.kubelet.log_path(ns, name, Some(container))
    }

    /// Waits until `count` pods in `ns` matching `selector` are Running and Ready; returns them
    /// in name order. On timeout the error lists every matching pod with its phase and reason.
    pub async fn wait_ready(
        &self,
        ns: &str,
        selector: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Obj>> {
        wait_pods(&self.store(), ns, selector, timeout, |pods| {
            let ready: Vec<Obj> = pods.iter().filter(|p| pod_ready(p)).cloned().collect();
            (ready.len() >= count).then_some(ready)
        })
        .await
        .map_err(|e| anyhow!("waiting for {count} Ready pods ({selector:?} in {ns}): {e}"))
    }

    /// Waits until a pod is in one of `phases`.
    pub async fn wait_phase(
        &self,
        ns: &str,
        name: &str,
        phases: &[&str],
        timeout: Duration,
    ) -> Result<Obj> {
        let sel = String::new();
        let name = name.to_string();
        wait_pods(&self.store(), ns, &sel, timeout, |pods| {
            pods.iter()
                .find(|p| {
                    p["metadata"]["name"] == name.as_str()
                        && phases.contains(&p["status"]["phase"].as_str().unwrap_or(""))
                })
                .cloned()
        })
        .await
        .map_err(|e| {
            anyhow!(
                "waiting for pod {ns}/{name} to be {}: {e}",
                phases.join(" or ")
            )
        })
    }

    /// Enforces the NetworkPolicies now in the store at once (the cluster also does so by itself
    /// on every change of a policy, pod or namespace, a moment later). Returns the nftables
    /// ruleset in force, None when there is no policy.
    pub fn sync_network_policies(&self) -> Result<Option<String>> {
        self.netpol.sync()
    }

    /// Cuts pod "name" or "namespace/name" off the network (every frame from or to its IP is
    /// dropped on the bridge, see [`crate::cutoff`]) until the guard is dropped or restored.
    pub fn cut_off(&self, pod: &str) -> Result<crate::cutoff::CutOff> {
        let (_, ns, name) = self.kubelet.find(pod)?;
        let obj = self
            .store()
            .get(&crate::api::resources::PODS, &ns, &name)
            .map_err(|e| anyhow::anyhow!("pod {ns}/{name}: {e:?}"))?;
        let ip: std::net::Ipv4Addr = obj["status"]["podIP"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("pod {ns}/{name} has no IPv4 address"))?;
        crate::cutoff::CutOff::new(&self.network().prefix(), ip)
    }

    /// The nftables table (family bridge) holding this cluster's NetworkPolicy rules.
    pub fn network_policy_table(&self) -> &str {
        self.netpol.table()
    }

    /// Stops everything: pods, network, API server (Drop does the same).
    pub fn shutdown(self) -> Result<()> {
        self.stop();
        Ok(())
    }

    /// Stops the kubelet and controllers and kills every pod (blocks until they are gone);
    /// the network and API server go when the cluster is dropped.
    pub fn stop(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
        self.kubelet.shutdown();
        self.netpol.stop();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every pod thread is joined here, so the cluster's own handles to the network and the
        // API server are the last ones: they go (bridge removed, server stopped) right after.
        self.stop();
    }
}

/// Whether a pod is Running with condition Ready=True.
pub fn pod_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"].as_array().is_some_and(|a| {
            a.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// One line per pod for error messages: "name: Phase (reason: message)".
pub fn describe_pods(pods: &[Obj]) -> String {
    if pods.is_empty() {
        return "no matching pods exist".into();
    }
    pods.iter()
        .map(|p| {
            let mut why = Vec::new();
            for k in ["reason", "message"] {
                if let Some(s) = p["status"][k].as_str() {
                    why.push(s.to_string());
                }
            }
            // Not scheduled: why (e.g. the node's max pods reached).
            if let Some(c) = p["status"]["conditions"].as_array().and_then(|a| {
                a.iter()
                    .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
            }) {
                why.push(c["message"].as_str().unwrap_or("not scheduled").to_string());
            }
            why.extend(containers_why(p));
            let ready = if pod_ready(p) { "Ready" } else { "not Ready" };
            format!(
                "{}: {}, {ready}{}",
                p["metadata"]["name"].as_str().unwrap_or(""),
                p["status"]["phase"].as_str().unwrap_or("Pending"),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", why.join("; "))
                }
            )
        })
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// Why each container of pod `p` that is not running is not: "reason: message" while it
/// waits (and how its last run ended, when that says more), "exit code N" once it ended;
/// prefixed with the container's name in a pod of several containers.
fn containers_why(p: &Value) -> Vec<String> {
    let statuses: Vec<&Value> = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|k| p["status"][k].as_array())
        .flatten()
        .collect();
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_string();
    let mut out = Vec::new();
    for cs in &statuses {
        let name = if statuses.len() > 1 {
            format!("{}: ", text(cs, "name"))
        } else {
            String::new()
        };
        if let Some(w) = cs.pointer("/state/waiting") {
            let mut line = format!("{name}{}: {}", text(w, "reason"), text(w, "message"));
            if let Some(t) = cs
                .pointer("/lastState/terminated")
                .filter(|t| t["message"].is_string())
            {
                line.push_str(&format!(
                    " (last: {}: {})",
                    text(t, "reason"),
                    text(t, "message")
                ));
            }
            out.push(line);
        }
        if let Some(t) = cs.pointer("/state/terminated") {
            out.push(format!("{name}exit code {}", t["exitCode"]));
        }
    }
    out
}

/// Waits (on store events, no polling) until `check` returns Some for the pods in `ns`
/// matching `selector`.
pub async fn wait_pods<T>(
    store: &Store,
    ns: &str,
    selector: &str,
    timeout: Duration,
    mut check: impl FnMut(&[Obj]) -> Option<T>,
) -> Result<T> {
    let labels = crate::api::selector::LabelSelector::parse(selector)
        .map_err(|e| anyhow!("bad selector {selector:?}: {e}"))?;
    let q = crate::api::ListQuery {
        labels,
        ..Default::default()
    };
    let mut rx = store.subscribe();
    let deadline = Instant::now() + timeout;
    loop {
        let pods = store
            .list(&PODS, Some(ns), &q)
            .map_err(|e| anyhow!("{e}"))?
            .items;
        if let Some(t) = check(&pods) {
            return Ok(t);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!(
                "timed out after {timeout:?}; pods now:\n  {}",
                describe_pods(&pods)
            );
        }
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => bail!("the store closed"),
            Err(_) => {}
        }
    }
}

fn register_node(store: &Store, node: &str, ip: &str, max_pods: usize) -> Result<()> {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let capacity = json!({"cpu": cpus.to_string(), "memory": format!("{mem_kib}Ki"), "pods": max_pods.to_string(), "ephemeral-storage": "0"});
    let now = crate::api::defaults::now_rfc3339();
    let node_obj = json!({
        "metadata": {"name": node, "labels": {
            "kubernetes.io/hostname": node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "node-role.kubernetes.io/control-plane": "",
        }},
        "spec": {},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": node}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "prrte-k8s-sandbox://podnet", "osImage": "", "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    });
    store
        .create(&NODES, "", node_obj.clone(), false)
        .map_err(|e| anyhow!("registering node {node}: {e}"))?;
    store
        .modify(&NODES, "", node, Part::Status, |v| {
            v["status"] = node_obj["status"].clone()
        })
        .map_err(|e| anyhow!("setting node status: {e}"))?;
    Ok(())
}

/// Creates (or merges into existing) the objects of a multi-document YAML manifest.
pub fn apply_yaml(store: &Store, yaml: &str) -> Result<Vec<Obj>> {
    use serde::Deserialize;
    let mut docs = Vec::new();
    for (i, d) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let v = Value::deserialize(d)
            .with_context(|| format!("manifest document {} is not valid YAML", i + 1))?;
        if v.is_null() {
            continue;
        }
        if v["kind"] == "List" {
            docs.extend(v["items"].as_array().cloned().unwrap_or_default());
        } else {
            docs.push(v);
        }
    }
    let mut out = Vec::new();
    for (i, v) in docs.into_iter().enumerate() {
        let av = v["apiVersion"].as_str().unwrap_or("");
        let kind = v["kind"].as_str().unwrap_or("");
        let rt = store.kind_of(av, kind).filter(|r| r.stored).ok_or_else(|| {
            anyhow!("manifest document {}: apiVersion {av:?} kind {kind:?} is not a kind the sandbox serves", i + 1)
        })?;
        let ns = if rt.namespaced {
            v["metadata"]["namespace"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
        let what = format!(
            "{kind} {}{}",
            if ns.is_empty() {
                String::new()
            } else {
                format!("{ns}/")
            },
            name
        );
        let obj = match store.create(rt, &ns, v.clone(), false) {
            Ok(o) => o,
            Err(e) if e.code == 409 && !name.is_empty() => store
                .patch(
                    rt,
                    &ns,
                    &name,
                    crate::api::Patch::Merge(v),
                    Part::Main,
                    false,
                )
                .map_err(|e| anyhow!("updating {what}: {e}"))?,
            Err(e) => bail!("creating {what}: {e}"),
        };
        out.push(obj);
    }
    Ok(out)
}
