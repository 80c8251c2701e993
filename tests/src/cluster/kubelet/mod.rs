//! The kubelet: runs the pods bound to (or unbound, of the default scheduler, and so scheduled
//! onto) its node as podnet pods, and reports their status like the real kubelet.
//!
//! This file is the node: it watches pods, admits them up to its capacity, keeps a worker
//! thread per pod (`pod`, `control`) and serves `exec`, eviction and logs. A pod's worker goes
//! through `lifecycle`: the pod admitted (`containers`: its init containers, native sidecars
//! and regular containers), what they share prepared (`prepare`: service account, volumes),
//! its sandbox created (podnet: address, hostname, IPC namespace); then the `worker` runs the
//! init containers in order and the regular containers, each started (`start`: its image by
//! its pull policy, `image`; its mounts, environment, command and security, `prepare`) and
//! restarted by the restart policy on its own, with its `probe`s (`supervise`), until the pod
//! is done or deleted (`terminate`: SIGTERM, the grace period, SIGKILL, then the pod object
//! goes). `status` and `phase` are what it reports on the way, after every change.

use crate::api::defaults::now_rfc3339;
use crate::api::resources::PODS;
use crate::api::{ApiServer, EventType, Part, Store};
use crate::images::ImageStore;
use crate::runtime::podnet::Network;
use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

mod backoff;
mod container_status;
mod containers;
mod control;
mod exec_info;
mod fields;
mod image;
mod lifecycle;
mod paths;
mod phase;
mod pod;
mod prepare;
mod probe;
mod remove;
mod start;
mod status;
mod supervise;
mod sync;
mod terminate;
mod worker;

pub use containers::{container_names, default_container, DEFAULT_CONTAINER_ANNOTATION};
use control::{Ctl, PodHandle};
pub use exec_info::ExecInfo;
use fields::s;
use paths::container_log;
use pod::PodCtx;
pub use prepare::expand;
pub use prepare::sources::field_ref;
pub use prepare::SA_MOUNT;
use status::set_cond_reason;

/// The scheduler the node stands in for (the API server's default `spec.schedulerName`).
const DEFAULT_SCHEDULER: &str = "default-scheduler";
use sync::lock;

/// Pods the node runs at once by default (the kubelet's default maxPods).
pub const MAX_PODS: usize = 110;

pub(crate) struct Kubelet {
    pub node: String,
    pub store: Store,
    /// Weak, so that dropping the cluster stops the server and removes the network at once.
    pub api: Weak<ApiServer>,
    pub net: Weak<Network>,
    pub dir: PathBuf,
    pub pods: Mutex<HashMap<String, PodHandle>>,
    /// Set (under the `pods` lock) once shutdown has begun: no pod starts after that.
    pub stopping: AtomicBool,
    /// Threads of deleted pods still cleaning up.
    pub dying: Mutex<Vec<std::thread::JoinHandle<()>>>,
    pub max_pods: usize,
    /// Root filesystems of the images pods run.
    pub images: Arc<ImageStore>,
}

impl Kubelet {
    /// Watches pods and starts/stops them until the feed closes.
    pub async fn run(self: Arc<Self>) {
        let mut rx = self.store.subscribe();
        self.resync();
        loop {
            match rx.recv().await {
                Ok(ev) if std::ptr::eq(ev.resource, &PODS) => match ev.kind {
                    EventType::Added | EventType::Modified
                        if !ev.object["metadata"]["deletionTimestamp"].is_null() =>
                    {
                        self.terminating(&ev.object);
                    }
                    EventType::Added | EventType::Modified => {
                        let finished = matches!(
                            s(&ev.object, "/status/phase").as_str(),
                            "Succeeded" | "Failed"
                        ) && lock(&self.pods)
                            .contains_key(&s(&ev.object, "/metadata/uid"));
                        self.consider(&ev.object);
                        if finished {
                            // Room for pods that did not fit.
                            self.resync();
                        }
                    }
                    EventType::Deleted => {
                        let ours = self.deleted(&s(&ev.object, "/metadata/uid"));
                        if ours {
                            self.resync();
                        }
                    }
                },
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => self.resync(),
                Err(RecvError::Closed) => return,
            }
        }
    }

    fn resync(&self) {
        let pods = self
            .store
            .list(&PODS, None, &Default::default())
            .map(|l| l.items)
            .unwrap_or_default();
        let live: std::collections::HashSet<String> =
            pods.iter().map(|p| s(p, "/metadata/uid")).collect();
        for p in &pods {
            if p["metadata"]["deletionTimestamp"].is_null() {
                self.consider(p);
            } else {
                self.terminating(p);
            }
        }
        let gone: Vec<String> = lock(&self.pods)
            .keys()
            .filter(|u| !live.contains(*u))
            .cloned()
            .collect();
        for u in gone {
            let _ = self.deleted(&u);
        }
    }

    fn consider(&self, pod: &Value) {
        let uid = s(pod, "/metadata/uid");
        let node = s(pod, "/spec/nodeName");
        if uid.is_empty() || (!node.is_empty() && node != self.node) {
            return;
        }
        // The node plays the default scheduler only: an unbound pod that names another
        // (`volcano`, a scheduler-plugins scheduler) stays unscheduled, with no condition, as
        // in a cluster where that scheduler does not run.
        let scheduler = s(pod, "/spec/schedulerName");
        if node.is_empty() && !scheduler.is_empty() && scheduler != DEFAULT_SCHEDULER {
            return;
        }
        if matches!(s(pod, "/status/phase").as_str(), "Succeeded" | "Failed")
            || !pod["metadata"]["deletionTimestamp"].is_null()
        {
            return;
        }
        let mut pods = lock(&self.pods);
        if pods.contains_key(&uid) || self.stopping.load(Ordering::SeqCst) {
            return;
        }
        let (Some(api), Some(net)) = (self.api.upgrade(), self.net.upgrade()) else {
            return;
        };
        let ns = s(pod, "/metadata/namespace");
        let name = s(pod, "/metadata/name");
        // Like a node's pod capacity: pods beyond it stay Pending, Unschedulable.
        let active = pods
            .values()
            .filter(|h| h.thread.as_ref().is_some_and(|t| !t.is_finished()))
            .count();
        if active >= self.max_pods {
            if !pod["status"]["conditions"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
            }) {
                let now = now_rfc3339();
                let _ = self.store.modify(&PODS, &ns, &name, Part::Status, |v| {
                    set_cond_reason(&mut v["status"], "PodScheduled", false, &now, "Unschedulable", &format!("0/1 nodes are available: 1 Too many pods (the sandbox node runs at most {}).", self.max_pods));
                });
            }
            return;
        }
        let dir = self
            .dir
            .join(format!("{ns}_{name}_{}", &uid[..8.min(uid.len())]));
        let (tx, rx) = channel();
        let running = Arc::new(Mutex::new(None));
        let ctx = PodCtx {
            images: self.images.clone(),
            node: self.node.clone(),
            store: self.store.clone(),
            api,
            net,
            dir: dir.clone(),
            ns: ns.clone(),
            name: name.clone(),
            uid: uid.clone(),
            running: running.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("pod-{name}"))
            .spawn(move || ctx.run(rx))
            .expect("spawning a pod thread");
        pods.insert(
            uid,
            PodHandle {
                ns,
                name,
                ctl: tx,
                thread: Some(thread),
                running,
                dir,
            },
        );
    }

    /// A pod of this node being deleted: its worker stops its containers gracefully and then
    /// removes it; one that does not run (any more) is removed now.
    fn terminating(&self, pod: &Value) {
        if s(pod, "/spec/nodeName") != self.node {
            return;
        }
        let uid = s(pod, "/metadata/uid");
        let grace = pod["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        let told = lock(&self.pods)
            .get(&uid)
            .is_some_and(|h| h.ctl.send(Ctl::Terminate(grace)).is_ok());
        if !told {
            remove::remove_terminated(&self.store, pod);
        }
    }

    /// Stops the pod with this uid if it is ours; true if it was.
    fn deleted(&self, uid: &str) -> bool {
        let h = lock(&self.pods).remove(uid);
        let ours = h.is_some();
        if let Some(mut h) = h {
            let _ = h.ctl.send(Ctl::Delete);
            // Join off the event loop: killing a pod blocks.
            if let Some(t) = h.thread.take() {
                let mut dying = lock(&self.dying);
                dying.retain(|t| !t.is_finished());
                dying.push(t);
            }
        }
        ours
    }

    /// Finds a pod this kubelet runs by "name" or "namespace/name".
    pub fn find(&self, pod: &str) -> Result<(String, String, String)> {
        let (ns, name) = match pod.split_once('/') {
            Some((n, p)) => (Some(n), p),
            None => (None, pod),
        };
        let pods = lock(&self.pods);
        let hits: Vec<(String, String, String)> = pods
            .iter()
            .filter(|(_, h)| h.name == name && ns.is_none_or(|n| n == h.ns))
            .map(|(u, h)| (u.clone(), h.ns.clone(), h.name.clone()))
            .collect();
        match hits.len() {
            0 => bail!("no pod {pod:?} runs in this sandbox (pods that finished or were never scheduled here do not count)"),
            1 => Ok(hits.into_iter().next().expect("one")),
            _ => bail!("pod name {name:?} is in several namespaces; say NAMESPACE/{name}"),
        }
    }

    /// A command that runs `argv` in container `container` of pod `pod` (None: its default
    /// container, see [`default_container`]), as `kubectl exec [-c CONTAINER]` does.
    pub fn exec(
        &self,
        pod: &str,
        container: Option<&str>,
        argv: &[String],
    ) -> Result<std::process::Command> {
        let (uid, ns, name) = self.find(pod)?;
        let container = match container {
            Some(c) => c.to_string(),
            None => {
                let object = self.store.get(&PODS, &ns, &name);
                default_container(&*object.map_err(|e| anyhow!("pod {pod}: {e}"))?)
            }
        };
        let pods = lock(&self.pods);
        let h = pods.get(&uid).ok_or_else(|| anyhow!("pod {pod} is gone"))?;
        let r = lock(&h.running);
        let rp = r
            .as_ref()
            .ok_or_else(|| anyhow!("pod {pod} is not running (not started yet)"))?;
        rp.exec_in(&container, argv, &[])
            .map_err(|e| anyhow!("pod {pod}: {e:#} (not started yet, or between restarts)"))
    }

    pub fn evict(&self, pod: &str, message: &str) -> Result<()> {
        let (uid, _, _) = self.find(pod)?;
        let (tx, rx) = channel();
        {
            let pods = lock(&self.pods);
            let h = pods.get(&uid).ok_or_else(|| anyhow!("pod {pod} is gone"))?;
            h.ctl
                .send(Ctl::Evict(message.to_string(), tx))
                .map_err(|_| anyhow!("pod {pod} has already ended"))?;
        }
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| anyhow!("pod {pod} was not evicted within 30s"))?
    }

    pub fn pod_dir(&self, ns: &str, name: &str) -> Option<PathBuf> {
        let pods = lock(&self.pods);
        pods.values()
            .find(|h| h.ns == ns && h.name == name)
            .map(|h| h.dir.clone())
    }

    /// The log of container `container` (None: the default one) of pod `ns`/`name`.
    pub fn log_path(&self, ns: &str, name: &str, container: Option<&str>) -> Option<PathBuf> {
        let container = match container {
            Some(c) => c.to_string(),
            None => default_container(&*self.store.get(&PODS, ns, name).ok()?),
        };
        let pods = lock(&self.pods);
        pods.values()
            .find(|h| h.ns == ns && h.name == name)
            .map(|h| container_log(&h.dir, &container))
    }

    /// Stops every pod and waits for them to be gone.
    pub fn shutdown(&self) {
        self.store.set_node_terminates_pods(&self.node, false);
        let handles: Vec<PodHandle> = {
            let mut pods = lock(&self.pods);
            self.stopping.store(true, Ordering::SeqCst);
            pods.drain().map(|(_, h)| h).collect()
        };
        for h in &handles {
            let _ = h.ctl.send(Ctl::Shutdown);
        }
        for mut h in handles {
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
        let dying: Vec<_> = lock(&self.dying).drain(..).collect();
        for t in dying {
            let _ = t.join();
        }
        // Every pod is gone: the images' working containers can go.
        self.images.release();
    }
}
