//! The kubelet: runs the pods bound to (or unbound and so scheduled onto) its node as podnet
//! pods, and reports their status like the real kubelet.

use super::security;
use crate::api::defaults::now_rfc3339;
use crate::api::resources::{CONFIGMAPS, EVENTS, PODS, SECRETS, SERVICEACCOUNTS};
use crate::api::{ApiServer, EventType, Part, Store};
use crate::container::{Container, Tmpfs};
use crate::images::{self, ImageStore, MountedImage};
use crate::podnet::{Network, PodExit, PodSpec, RunningPod};
use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;

/// In-pod path of the service-account directory.
pub const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How often a running pod is checked for having exited.
const EXIT_POLL: Duration = Duration::from_millis(50);

/// Pods the node runs at once by default (the kubelet's default maxPods).
pub const MAX_PODS: usize = 110;

/// Longest wait between restarts of a failing container.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub(crate) enum Ctl {
    /// The pod object was deleted: kill and clean up.
    Delete,
    /// Kill the pod and mark it Failed/Evicted with this message.
    Evict(String, Sender<Result<()>>),
    /// The cluster is shutting down.
    Shutdown,
}

/// What the kubelet keeps per pod it runs.
pub(crate) struct PodHandle {
    pub ns: String,
    pub name: String,
    pub ctl: Sender<Ctl>,
    pub thread: Option<std::thread::JoinHandle<()>>,
    pub running: Arc<Mutex<Option<RunningPod>>>,
    pub dir: PathBuf,
}

/// Per-pod facts a separate process needs to `exec` into a pod (written as JSON).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
pub struct ExecInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pid: u32,
    pub ip: String,
    pub netns: String,
    pub workdir: String,
    pub env: Vec<(String, String)>,
    /// The init program's configuration when the pod runs an image (exec then enters the
    /// container's root as its user: see [`crate::podnet::exec_command`]).
    #[serde(default)]
    pub container: Option<PathBuf>,
}

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
    /// Held while allocating an address or (re)starting a pod on it.
    pub ip_lock: Arc<Mutex<()>>,
    /// Root filesystems of the images pods run.
    pub images: Arc<ImageStore>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn s(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

impl Kubelet {
    /// Watches pods and starts/stops them until the feed closes.
    pub async fn run(self: Arc<Self>) {
        let mut rx = self.store.subscribe();
        self.resync();
        loop {
            match rx.recv().await {
                Ok(ev) if std::ptr::eq(ev.resource, &PODS) => match ev.kind {
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
            self.consider(p);
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
        let ip_lock = IpLock(self.ip_lock.clone());
        let thread = std::thread::Builder::new()
            .name(format!("pod-{name}"))
            .spawn(move || ctx.run(rx, ip_lock))
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

    pub fn exec(&self, pod: &str, argv: &[String]) -> Result<std::process::Command> {
        let (uid, _, _) = self.find(pod)?;
        let pods = lock(&self.pods);
        let h = pods.get(&uid).ok_or_else(|| anyhow!("pod {pod} is gone"))?;
        let r = lock(&h.running);
        let rp = r.as_ref().ok_or_else(|| {
            anyhow!("pod {pod} is not running (not started yet, or between restarts)")
        })?;
        Ok(rp.exec(argv, &[]))
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

    pub fn log_path(&self, ns: &str, name: &str) -> Option<PathBuf> {
        let pods = lock(&self.pods);
        pods.values()
            .find(|h| h.ns == ns && h.name == name)
            .map(|h| h.dir.join("container.log"))
    }

    /// Stops every pod and waits for them to be gone.
    pub fn shutdown(&self) {
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

struct IpLock(Arc<Mutex<()>>);

/// Everything a pod's thread needs.
struct PodCtx {
    images: Arc<ImageStore>,
    node: String,
    store: Store,
    api: Arc<ApiServer>,
    net: Arc<Network>,
    dir: PathBuf,
    ns: String,
    name: String,
    uid: String,
    running: Arc<Mutex<Option<RunningPod>>>,
}

enum Outcome {
    /// The pod object is gone or the cluster stops: just clean up.
    Stop,
    /// Evicted: report and clean up (the object stays).
    Evicted(String, Sender<Result<()>>),
    /// The container ended.
    Exited(PodExit),
}

struct Probe {
    action: ProbeAction,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

enum ProbeAction {
    Tcp(u16),
    Http(u16, String),
    Exec(Vec<String>),
}

impl PodCtx {
    fn run(self, rx: Receiver<Ctl>, ip_lock: IpLock) {
        let r = self.lifecycle(&rx, &ip_lock);
        if let Err(e) = &r {
            tracing::warn!(pod = %self.name, "pod failed: {e:#}");
        }
        // Kill and clean up whatever is left.
        let pod = lock(&self.running).take();
        drop(pod);
        let _ = std::fs::remove_file(self.dir.join("exec.json"));
        // Keep the log of finished pods while their object exists.
        if self
            .store
            .get(&PODS, &self.ns, &self.name)
            .map(|p| s(&p, "/metadata/uid") != self.uid)
            .unwrap_or(true)
        {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn pod(&self) -> Option<Arc<Value>> {
        self.store
            .get(&PODS, &self.ns, &self.name)
            .ok()
            .filter(|p| s(p, "/metadata/uid") == self.uid)
    }

    /// Changes the status of this pod (if it is still this pod).
    fn status(&self, f: impl FnOnce(&mut Value)) {
        let uid = self.uid.clone();
        let _ = self
            .store
            .modify(&PODS, &self.ns, &self.name, Part::Status, |v| {
                if s(v, "/metadata/uid") == uid {
                    if !v["status"].is_object() {
                        v["status"] = json!({});
                    }
                    f(&mut v["status"]);
                }
            });
    }

    fn event(&self, ty: &str, reason: &str, message: &str) {
        let now = now_rfc3339();
        let component = if reason == "Scheduled" {
            "default-scheduler"
        } else {
            "kubelet"
        };
        let ev = json!({
            "metadata": {"generateName": format!("{}.", self.name), "namespace": self.ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "namespace": self.ns, "uid": self.uid},
            "reason": reason,
            "message": message,
            "type": ty,
            "source": {"component": component, "host": self.node},
            "reportingComponent": component,
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let _ = self.store.create(&EVENTS, &self.ns, ev, false);
    }

    /// Marks the pod Failed before any container ran.
    fn fail(&self, reason: &str, message: &str) {
        tracing::warn!(pod = %self.name, "{reason}: {message}");
        self.event("Warning", reason, message);
        let (reason, message) = (reason.to_string(), message.to_string());
        self.status(|st| {
            st["phase"] = json!("Failed");
            st["reason"] = json!(reason);
            st["message"] = json!(message);
        });
    }

    fn lifecycle(&self, rx: &Receiver<Ctl>, ip_lock: &IpLock) -> Result<()> {
        let Some(pod) = self.pod() else { return Ok(()) };
        // Schedule onto this node.
        if s(&pod, "/spec/nodeName").is_empty() {
            let (uid, node) = (self.uid.clone(), self.node.clone());
            let _ = self
                .store
                .modify(&PODS, &self.ns, &self.name, Part::Main, |v| {
                    if s(v, "/metadata/uid") == uid {
                        v["spec"]["nodeName"] = json!(node);
                    }
                });
        }
        let now = now_rfc3339();
        self.status(|st| {
            set_cond(st, "PodScheduled", true, &now);
        });
        self.event(
            "Normal",
            "Scheduled",
            &format!(
                "Successfully assigned {}/{} to {}",
                self.ns, self.name, self.node
            ),
        );
        let Some(pod) = self.pod() else { return Ok(()) };

        let containers = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if containers.len() != 1 {
            self.fail(
                "Unsupported",
                &format!(
                    "sandbox pods run exactly one container; pod {} has {}",
                    self.name,
                    containers.len()
                ),
            );
            return Ok(());
        }
        if pod
            .pointer("/spec/initContainers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            self.fail("Unsupported", "sandbox pods do not run initContainers; fold their work into the container's command");
            return Ok(());
        }
        let c = &containers[0];
        let cname = c["name"].as_str().unwrap_or("main").to_string();
        let image = c["image"].as_str().unwrap_or("").to_string();

        // The image's root filesystem, unless the pod runs host programs; an image the local
        // store does not have keeps the pod Pending, as a failed pull does on a node.
        let mounted = if images::runs_on_host(&image) {
            None
        } else {
            match self.pull(rx, c, &cname, &image) {
                Some(m) => Some(m),
                None => return Ok(()),
            }
        };
        let image_id = mounted
            .as_ref()
            .map(|m| format!("sha256:{}", m.config.id))
            .unwrap_or_default();

        // Volumes and environment; a missing Secret/ConfigMap keeps the pod waiting, as on a node.
        let mut last_config_error = String::new();
        let prepared = loop {
            match self.prepare(&pod, c, mounted.as_deref()) {
                Ok(p) => break p,
                Err(PrepareError::Fatal(m)) => {
                    self.fail("CreateContainerError", &m);
                    return Ok(());
                }
                Err(e @ (PrepareError::Retry(_) | PrepareError::Config(..))) => {
                    let (reason, m) = match e {
                        PrepareError::Retry(m) => ("CreateContainerConfigError", m),
                        PrepareError::Config(r, m) => (r, m),
                        PrepareError::Fatal(_) => unreachable!("handled above"),
                    };
                    if m != last_config_error {
                        self.event("Warning", "Failed", &format!("Error: {m}"));
                        last_config_error = m.clone();
                    }
                    let (cn, img, iid) = (cname.clone(), image.clone(), image_id.clone());
                    let msg = m.clone();
                    self.status(|st| {
                        st["containerStatuses"] = json!([{
                            "name": cn, "ready": false, "restartCount": 0, "started": false,
                            "image": img, "imageID": iid,
                            "state": {"waiting": {"reason": reason, "message": msg}},
                        }]);
                    });
                    match rx.recv_timeout(Duration::from_secs(1)) {
                        Ok(Ctl::Evict(_, done)) => {
                            let _ = done
                                .send(Err(anyhow!("pod {} has not started yet ({m})", self.name)));
                        }
                        Ok(_) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
                        Err(RecvTimeoutError::Timeout) => {}
                    }
                    if self.pod().is_none() {
                        return Ok(());
                    }
                }
            }
        };
        let ip = {
            let _g = lock(&ip_lock.0);
            self.net.alloc_ip().context("allocating a pod IP")?
        };
        let ip_s = ip.to_string();
        let prepared = Prepared {
            env: prepared
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace(POD_IP_MARK, &ip_s)))
                .collect(),
            command: prepared
                .command
                .iter()
                .map(|a| a.replace(POD_IP_MARK, &ip_s))
                .collect(),
            ..prepared
        };
        let restart_policy = s(&pod, "/spec/restartPolicy");
        let probe = c.get("readinessProbe").and_then(|p| parse_probe(p, c));
        let mut restarts: i64 = 0;
        let mut last_state = Value::Null;
        let mut backoff = Duration::from_millis(500);
        let start_time = now_rfc3339();
        // The exited pod of the last run, kept (holding its address) until the restart.
        let mut previous: Option<RunningPod> = None;
        loop {
            // Start (or restart) the container.
            let spec = PodSpec {
                name: self.name.clone(),
                hostname: prepared.hostname.clone(),
                ip,
                command: prepared.command.clone(),
                env: prepared.env.clone(),
                workdir: prepared.workdir.clone(),
                bind_mounts: prepared.mounts.clone(),
                log_path: self.dir.join("container.log"),
                container: prepared.container.clone(),
            };
            let started = match previous.take() {
                // A restart reuses the address: release it and take it again under the lock.
                Some(old) => {
                    let _g = lock(&ip_lock.0);
                    drop(old);
                    self.net.start_pod(spec)
                }
                None => self.net.start_pod(spec),
            };
            let rp = match started {
                Ok(rp) => rp,
                Err(e) => {
                    let msg = format!("{e:#}");
                    self.event("Warning", "Failed", &format!("Error: {msg}"));
                    let (cn, img, st0) = (cname.clone(), image.clone(), start_time.clone());
                    self.status(|st| {
                        st["phase"] = json!("Failed");
                        st["message"] = json!(format!("the sandbox could not start the pod: {msg}"));
                        st["startTime"] = json!(st0);
                        st["containerStatuses"] = json!([{
                            "name": cn, "ready": false, "restartCount": restarts, "started": false, "image": img, "imageID": image_id,
                            "state": {"terminated": {"exitCode": 128, "reason": "StartError", "message": msg}},
                        }]);
                    });
                    return Ok(());
                }
            };
            let started_at = now_rfc3339();
            let info = ExecInfo {
                namespace: self.ns.clone(),
                name: self.name.clone(),
                uid: self.uid.clone(),
                pid: rp.host_pid(),
                ip: ip.to_string(),
                netns: rp.netns().to_string(),
                workdir: prepared
                    .workdir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("/"))
                    .to_string_lossy()
                    .into_owned(),
                env: rp.env().to_vec(),
                container: rp.container_config().map(Path::to_path_buf),
            };
            let container_id = format!("sandbox://{}", rp.netns());
            *lock(&self.running) = Some(rp);
            let _ = std::fs::write(
                self.dir.join("exec.json"),
                serde_json::to_vec_pretty(&info).unwrap_or_default(),
            );
            if restarts == 0 {
                self.event("Normal", "Started", &format!("Started container {cname}"));
            }
            let ready_now = probe.is_none();
            let (cn, img, cid, sa, st0, ls) = (
                cname.clone(),
                image.clone(),
                container_id.clone(),
                started_at.clone(),
                start_time.clone(),
                last_state.clone(),
            );
            let gw = self.net.gateway().to_string();
            self.status(|st| {
                st["phase"] = json!("Running");
                st["hostIP"] = json!(gw);
                st["hostIPs"] = json!([{"ip": gw}]);
                st["podIP"] = json!(ip.to_string());
                st["podIPs"] = json!([{"ip": ip.to_string()}]);
                st["startTime"] = json!(st0);
                let mut cs = json!({
                    "name": cn, "ready": ready_now, "restartCount": restarts, "started": true,
                    "image": img, "imageID": image_id, "containerID": cid,
                    "state": {"running": {"startedAt": sa}},
                });
                if !ls.is_null() {
                    cs["lastState"] = ls;
                }
                st["containerStatuses"] = json!([cs]);
                let now = now_rfc3339();
                set_cond(st, "PodReadyToStartContainers", true, &now);
                set_cond(st, "Initialized", true, &now);
                set_cond(st, "Ready", ready_now, &now);
                set_cond(st, "ContainersReady", ready_now, &now);
                set_cond(st, "PodScheduled", true, &now);
            });

            let outcome = self.supervise(rx, probe.as_ref(), ip);
            let exit = match outcome {
                Outcome::Stop => {
                    if let Some(mut rp) = lock(&self.running).take() {
                        let _ = rp.kill();
                    }
                    return Ok(());
                }
                Outcome::Evicted(message, done) => {
                    let taken = lock(&self.running).take();
                    let exit = taken.map(|mut rp| rp.kill());
                    let finished = now_rfc3339();
                    let (cn, img, cid) = (cname.clone(), image.clone(), container_id.clone());
                    let term = terminated(exit.and_then(|e| e.ok()), &started_at, &finished, &cid);
                    let msg = message.clone();
                    self.status(|st| {
                        st["phase"] = json!("Failed");
                        st["reason"] = json!("Evicted");
                        st["message"] = json!(msg);
                        st["containerStatuses"] = json!([{
                            "name": cn, "ready": false, "restartCount": restarts, "started": false,
                            "image": img, "imageID": image_id, "containerID": cid,
                            "state": {"terminated": term},
                        }]);
                        let now = now_rfc3339();
                        set_cond(st, "Ready", false, &now);
                        set_cond(st, "ContainersReady", false, &now);
                        set_cond(st, "PodReadyToStartContainers", false, &now);
                        set_cond_reason(
                            st,
                            "DisruptionTarget",
                            true,
                            &now,
                            "TerminationByKubelet",
                            &msg,
                        );
                    });
                    self.event("Warning", "Evicted", &message);
                    let _ = done.send(Ok(()));
                    return Ok(());
                }
                Outcome::Exited(e) => e,
            };
            let finished = now_rfc3339();
            let term = terminated(Some(exit), &started_at, &finished, &container_id);
            let restart = match restart_policy.as_str() {
                "Never" => false,
                "OnFailure" => !exit.success(),
                _ => true,
            };
            if !restart {
                let (cn, img, cid, t, ls) = (
                    cname.clone(),
                    image.clone(),
                    container_id.clone(),
                    term.clone(),
                    last_state.clone(),
                );
                self.status(|st| {
                    st["phase"] = json!(if exit.success() {
                        "Succeeded"
                    } else {
                        "Failed"
                    });
                    let mut cs = json!({
                        "name": cn, "ready": false, "restartCount": restarts, "started": false,
                        "image": img, "imageID": image_id, "containerID": cid,
                        "state": {"terminated": t},
                    });
                    if !ls.is_null() {
                        cs["lastState"] = ls;
                    }
                    st["containerStatuses"] = json!([cs]);
                    let now = now_rfc3339();
                    set_cond(st, "Ready", false, &now);
                    set_cond(st, "ContainersReady", false, &now);
                    set_cond(st, "PodReadyToStartContainers", false, &now);
                });
                // The pod's processes are gone; keep the object (and log) as a node does.
                lock(&self.running).take();
                return Ok(());
            }
            // Restart in place, after a back-off.
            previous = lock(&self.running).take();
            restarts += 1;
            last_state = json!({"terminated": term});
            let wait = backoff;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            let (cn, img, ls) = (cname.clone(), image.clone(), last_state.clone());
            let msg = format!(
                "back-off {}ms restarting failed container={cn} pod={}_{}",
                wait.as_millis(),
                self.name,
                self.ns
            );
            self.event("Warning", "BackOff", &msg);
            self.status(|st| {
                st["containerStatuses"] = json!([{
                    "name": cn, "ready": false, "restartCount": restarts, "started": false, "image": img, "imageID": image_id,
                    "lastState": ls, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": msg}},
                }]);
                let now = now_rfc3339();
                set_cond(st, "Ready", false, &now);
                set_cond(st, "ContainersReady", false, &now);
            });
            match rx.recv_timeout(wait) {
                Ok(Ctl::Evict(message, done)) => {
                    self.status(|st| {
                        st["phase"] = json!("Failed");
                        st["reason"] = json!("Evicted");
                        st["message"] = json!(message);
                    });
                    let _ = done.send(Ok(()));
                    return Ok(());
                }
                Ok(_) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Err(RecvTimeoutError::Timeout) => {}
            }
            if self.pod().is_none() {
                return Ok(());
            }
        }
    }

    /// Waits for the container to end, a control message, and runs the readiness probe.
    fn supervise(&self, rx: &Receiver<Ctl>, probe: Option<&Probe>, ip: Ipv4Addr) -> Outcome {
        let started = Instant::now();
        let mut next_probe = probe.map(|p| started + p.initial_delay);
        let mut ready = probe.is_none();
        let (mut ok_run, mut fail_run) = (0u32, 0u32);
        loop {
            let wait = match next_probe {
                Some(t) => t.saturating_duration_since(Instant::now()).min(EXIT_POLL),
                None => EXIT_POLL,
            };
            match rx.recv_timeout(wait) {
                Ok(Ctl::Delete) | Ok(Ctl::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    return Outcome::Stop
                }
                Ok(Ctl::Evict(m, done)) => return Outcome::Evicted(m, done),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let exited = lock(&self.running)
                .as_mut()
                .and_then(|rp| rp.try_wait().ok().flatten());
            if let Some(e) = exited {
                return Outcome::Exited(e);
            }
            if let (Some(p), Some(t)) = (probe, next_probe) {
                if Instant::now() >= t {
                    let pass = self.probe_once(p, ip);
                    if pass {
                        ok_run += 1;
                        fail_run = 0;
                    } else {
                        fail_run += 1;
                        ok_run = 0;
                    }
                    let flip = if !ready && pass && ok_run >= p.success_threshold {
                        Some(true)
                    } else if ready && !pass && fail_run >= p.failure_threshold {
                        Some(false)
                    } else {
                        None
                    };
                    if let Some(r) = flip {
                        ready = r;
                        self.status(|st| {
                            let now = now_rfc3339();
                            set_cond(st, "Ready", r, &now);
                            set_cond(st, "ContainersReady", r, &now);
                            if let Some(c) = st.pointer_mut("/containerStatuses/0") {
                                c["ready"] = json!(r);
                            }
                        });
                    }
                    next_probe = Some(Instant::now() + p.period);
                }
            }
        }
    }

    fn probe_once(&self, p: &Probe, ip: Ipv4Addr) -> bool {
        match &p.action {
            ProbeAction::Tcp(port) => {
                TcpStream::connect_timeout(&SocketAddr::from((ip, *port)), p.timeout).is_ok()
            }
            ProbeAction::Http(port, path) => http_probe(ip, *port, path, p.timeout),
            ProbeAction::Exec(cmd) => {
                let cmd = {
                    let r = lock(&self.running);
                    match r.as_ref() {
                        Some(rp) => rp.exec(cmd, &[]),
                        None => return false,
                    }
                };
                run_with_timeout(cmd, p.timeout)
            }
        }
    }

    /// The image's root filesystem from the local store. While the store does not have the image
    /// the pod stays Pending with the kubelet's waiting reason (`ErrImageNeverPull` for
    /// `imagePullPolicy: Never`, else `ErrImagePull` then `ImagePullBackOff`), and the store is
    /// checked again now and then (the sandbox has no registry: build or tag the image locally).
    /// `None` when the pod went away meanwhile.
    fn pull(
        &self,
        rx: &Receiver<Ctl>,
        c: &Value,
        cname: &str,
        image: &str,
    ) -> Option<Arc<MountedImage>> {
        let policy = c["imagePullPolicy"]
            .as_str()
            .unwrap_or("IfNotPresent")
            .to_string();
        let mut attempts = 0u32;
        let mut backoff = Duration::from_secs(1);
        loop {
            let (reason, message) = match self.images.get(image) {
                Ok(Some(m)) => {
                    self.event(
                        "Normal",
                        "Pulled",
                        &format!("Container image \"{image}\" already present on machine"),
                    );
                    return Some(m);
                }
                Ok(None) if policy == "Never" => (
                    "ErrImageNeverPull",
                    format!("Container image \"{image}\" is not present with pull policy of Never"),
                ),
                Ok(None) => (
                    if attempts == 0 {
                        "ErrImagePull"
                    } else {
                        "ImagePullBackOff"
                    },
                    if attempts == 0 {
                        format!("failed to pull image \"{image}\": the sandbox has no registry and its local image store (containers-storage) does not have this image; build or tag it there (buildah bud -t {image} ...)")
                    } else {
                        format!("Back-off pulling image \"{image}\"")
                    },
                ),
                Err(e) => (
                    if attempts == 0 {
                        "ErrImagePull"
                    } else {
                        "ImagePullBackOff"
                    },
                    format!("failed to pull image \"{image}\": {e:#}"),
                ),
            };
            if attempts == 0 {
                if reason == "ErrImageNeverPull" {
                    self.event("Warning", "ErrImageNeverPull", &message);
                    self.event("Warning", "Failed", "Error: ErrImageNeverPull");
                } else {
                    self.event("Normal", "Pulling", &format!("Pulling image \"{image}\""));
                    self.event("Warning", "Failed", &message);
                    self.event("Warning", "Failed", "Error: ErrImagePull");
                }
            } else if attempts == 1 && reason == "ImagePullBackOff" {
                self.event("Normal", "BackOff", &message);
                self.event("Warning", "Failed", "Error: ImagePullBackOff");
            }
            attempts += 1;
            let (cn, img, r, m) = (
                cname.to_string(),
                image.to_string(),
                reason,
                message.clone(),
            );
            self.status(|st| {
                st["phase"] = json!("Pending");
                st["containerStatuses"] = json!([{
                    "name": cn, "ready": false, "restartCount": 0, "started": false, "image": img, "imageID": "",
                    "state": {"waiting": {"reason": r, "message": m}},
                }]);
                let now = now_rfc3339();
                set_cond(st, "PodReadyToStartContainers", true, &now);
                set_cond(st, "Initialized", true, &now);
                set_cond_reason(st, "Ready", false, &now, "ContainersNotReady", &format!("containers with unready status: [{cn}]"));
                set_cond_reason(st, "ContainersReady", false, &now, "ContainersNotReady", &format!("containers with unready status: [{cn}]"));
            });
            match rx.recv_timeout(backoff) {
                Ok(Ctl::Evict(_, done)) => {
                    let _ = done.send(Err(anyhow!(
                        "pod {} has not started yet ({reason}: {message})",
                        self.name
                    )));
                }
                Ok(_) | Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            // The pod went away meanwhile.
            self.pod()?;
        }
    }

    fn prepare(
        &self,
        pod: &Value,
        c: &Value,
        image: Option<&MountedImage>,
    ) -> Result<Prepared, PrepareError> {
        let fatal = |m: String| PrepareError::Fatal(m);
        // What the container runs as (image pods only); refusals keep the pod waiting.
        let security = match image {
            Some(mi) => Some(
                security::resolve(pod, c, &mi.config, &mi.rootfs)
                    .map_err(|e| PrepareError::Config(e.reason, e.message))?,
            ),
            None => None,
        };
        let fs_group = security.as_ref().and_then(|s| s.fs_group);
        let mut tmpfs: Vec<Tmpfs> = Vec::new();
        let mut memory_volumes: Vec<String> = Vec::new();
        let mut read_only_mounts: Vec<PathBuf> = Vec::new();
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| fatal(format!("creating {}: {e}", self.dir.display())))?;
        let mut mounts: Vec<(PathBuf, PathBuf)> = Vec::new();
        // Service account: token, CA and namespace, mounted where in-cluster clients look.
        let sa = s(pod, "/spec/serviceAccountName");
        let sa = if sa.is_empty() {
            "default".to_string()
        } else {
            sa
        };
        let sa_obj = self.store.get(&SERVICEACCOUNTS, &self.ns, &sa).ok();
        let automount = pod
            .pointer("/spec/automountServiceAccountToken")
            .and_then(Value::as_bool)
            .or_else(|| {
                sa_obj.as_ref().and_then(|o| {
                    o.get("automountServiceAccountToken")
                        .and_then(Value::as_bool)
                })
            })
            .unwrap_or(true);
        if automount {
            if sa_obj.is_none() {
                return Err(PrepareError::Retry(format!(
                    "serviceaccount \"{sa}\" not found"
                )));
            }
            let d = self.dir.join("serviceaccount");
            let token = self.api.service_account_token(&self.ns, &sa);
            let ca = std::fs::read(self.api.ca_pem_path())
                .map_err(|e| fatal(format!("reading the cluster CA: {e}")))?;
            let w = |f: &str, b: &[u8]| {
                std::fs::create_dir_all(&d).and_then(|_| std::fs::write(d.join(f), b))
            };
            w("token", token.as_bytes())
                .and_then(|_| w("ca.crt", &ca))
                .and_then(|_| w("namespace", self.ns.as_bytes()))
                .map_err(|e| fatal(format!("writing the service-account files: {e}")))?;
            let mounted_elsewhere = c["volumeMounts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|m| m["mountPath"] == SA_MOUNT));
            if !mounted_elsewhere {
                mounts.push((d, PathBuf::from(SA_MOUNT)));
            }
        }
        // Volumes.
        let mut vol_dirs: HashMap<String, PathBuf> = HashMap::new();
        for v in pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            let vname = v["name"].as_str().unwrap_or("").to_string();
            let d = self.dir.join("volumes").join(&vname);
            let mkdir = |d: &Path| {
                std::fs::create_dir_all(d)
                    .map_err(|e| fatal(format!("creating {}: {e}", d.display())))
            };
            if let Some(sec) = v.get("secret") {
                let name = sec["secretName"].as_str().unwrap_or("");
                let optional = sec["optional"].as_bool().unwrap_or(false);
                mkdir(&d)?;
                match self.store.get(&SECRETS, &self.ns, name) {
                    Ok(obj) => {
                        let data = decoded(&obj["data"]);
                        write_items(&d, &data, sec.get("items")).map_err(fatal)?;
                        if image.is_some() {
                            volume_modes(&d, sec, fs_group).map_err(fatal)?;
                        }
                    }
                    Err(_) if optional => {}
                    Err(_) => {
                        return Err(PrepareError::Retry(format!(
                            "secret \"{name}\" not found (volume {vname})"
                        )))
                    }
                }
            } else if let Some(cm) = v.get("configMap") {
                let name = cm["name"].as_str().unwrap_or("");
                let optional = cm["optional"].as_bool().unwrap_or(false);
                mkdir(&d)?;
                match self.store.get(&CONFIGMAPS, &self.ns, name) {
                    Ok(obj) => {
                        let mut data: Vec<(String, Vec<u8>)> = obj["data"]
                            .as_object()
                            .map(|m| {
                                m.iter()
                                    .map(|(k, v)| {
                                        (k.clone(), v.as_str().unwrap_or("").as_bytes().to_vec())
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        data.extend(decoded(&obj["binaryData"]));
                        write_items(&d, &data, cm.get("items")).map_err(fatal)?;
                        if image.is_some() {
                            volume_modes(&d, cm, fs_group).map_err(fatal)?;
                        }
                    }
                    Err(_) if optional => {}
                    Err(_) => {
                        return Err(PrepareError::Retry(format!(
                            "configmap \"{name}\" not found (volume {vname})"
                        )))
                    }
                }
            } else if let Some(da) = v.get("downwardAPI") {
                mkdir(&d)?;
                for it in da["items"].as_array().cloned().unwrap_or_default() {
                    let path = it["path"].as_str().unwrap_or("");
                    let field = it
                        .pointer("/fieldRef/fieldPath")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let text = match field {
                        "metadata.labels" | "metadata.annotations" => {
                            let key = field.trim_start_matches("metadata.");
                            pod["metadata"][key]
                                .as_object()
                                .map(|m| {
                                    m.iter()
                                        .map(|(k, v)| {
                                            format!(
                                                "{k}={}\n",
                                                Value::String(v.as_str().unwrap_or("").into())
                                            )
                                        })
                                        .collect::<String>()
                                })
                                .unwrap_or_default()
                        }
                        f => field_ref(pod, f).unwrap_or_default(),
                    };
                    write_file(&d, path, text.as_bytes()).map_err(fatal)?;
                }
                if image.is_some() {
                    volume_modes(&d, da, fs_group).map_err(fatal)?;
                }
            } else if let Some(ed) = v.get("emptyDir") {
                mkdir(&d)?;
                if image.is_some() {
                    // As the kubelet: world-writable, group fsGroup with setgid; medium Memory is a
                    // tmpfs in the container.
                    let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
                    if ed["medium"] == "Memory" {
                        memory_volumes.push(vname.clone());
                    }
                    std::os::unix::fs::chown(&d, None, fs_group)
                        .map_err(|e| fatal(format!("chown {}: {e}", d.display())))?;
                    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| fatal(format!("chmod {}: {e}", d.display())))?;
                }
            } else if let Some(hp) = v.get("hostPath") {
                let p = PathBuf::from(hp["path"].as_str().unwrap_or(""));
                if hp["type"]
                    .as_str()
                    .is_some_and(|t| t == "DirectoryOrCreate")
                {
                    mkdir(&p)?;
                }
                if !p.exists() {
                    return Err(fatal(format!(
                        "hostPath {} of volume {vname} does not exist",
                        p.display()
                    )));
                }
                vol_dirs.insert(vname, p);
                continue;
            } else if v.get("projected").is_some() {
                // The usual projected service-account volume is served by the mount above.
                mkdir(&d)?;
            } else {
                return Err(fatal(format!("volume {vname}: only secret, configMap, downwardAPI, emptyDir, hostPath and projected volumes are supported in the sandbox")));
            }
            vol_dirs.insert(vname, d);
        }
        for m in c["volumeMounts"].as_array().cloned().unwrap_or_default() {
            let vname = m["name"].as_str().unwrap_or("");
            let path = m["mountPath"].as_str().unwrap_or("");
            let src = vol_dirs.get(vname).ok_or_else(|| {
                fatal(format!(
                    "volumeMount {path} names volume {vname:?}, which the pod does not have"
                ))
            })?;
            let src = match m["subPath"].as_str().filter(|s| !s.is_empty()) {
                Some(sp) => src.join(sp),
                None => src.clone(),
            };
            if !Path::new(path).is_absolute() {
                return Err(fatal(format!("volumeMount path {path:?} is not absolute")));
            }
            if image.is_some() && memory_volumes.iter().any(|v| v == vname) {
                let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
                tmpfs.push(Tmpfs {
                    path: PathBuf::from(path),
                    mode,
                    gid: fs_group.unwrap_or(0),
                });
                continue;
            }
            if m["readOnly"].as_bool().unwrap_or(false) {
                read_only_mounts.push(PathBuf::from(path));
            }
            mounts.push((src, PathBuf::from(path)));
        }
        // Environment.
        let mut env: Vec<(String, String)> = Vec::new();
        let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
            env.retain(|(n, _)| *n != k);
            env.push((k, v));
        };
        // The image's environment comes first; the pod's overrides it.
        if let Some(mi) = image {
            for (k, v) in &mi.config.env {
                set(&mut env, k.clone(), v.clone());
            }
        }
        let api = self.api.addr();
        let host = self.net.gateway().to_string();
        let port = api.port().to_string();
        for (k, v) in [
            ("KUBERNETES_SERVICE_HOST", host.clone()),
            ("KUBERNETES_SERVICE_PORT", port.clone()),
            ("KUBERNETES_SERVICE_PORT_HTTPS", port.clone()),
            ("KUBERNETES_PORT", format!("tcp://{host}:{port}")),
            (
                &*format!("KUBERNETES_PORT_{port}_TCP"),
                format!("tcp://{host}:{port}"),
            ),
            (
                &*format!("KUBERNETES_PORT_{port}_TCP_PROTO"),
                "tcp".to_string(),
            ),
            (&*format!("KUBERNETES_PORT_{port}_TCP_PORT"), port.clone()),
            (&*format!("KUBERNETES_PORT_{port}_TCP_ADDR"), host.clone()),
        ] {
            set(&mut env, k.to_string(), v);
        }
        let hostname = pod["spec"]["hostname"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.name)
            .to_string();
        set(&mut env, "HOSTNAME".into(), hostname.clone());
        for ef in c["envFrom"].as_array().cloned().unwrap_or_default() {
            let prefix = ef["prefix"].as_str().unwrap_or("");
            let (obj, optional, what) = if let Some(r) = ef.get("secretRef") {
                (
                    self.store
                        .get(&SECRETS, &self.ns, r["name"].as_str().unwrap_or(""))
                        .ok()
                        .map(|o| decoded(&o["data"])),
                    r["optional"].as_bool().unwrap_or(false),
                    format!("secret {:?}", r["name"]),
                )
            } else if let Some(r) = ef.get("configMapRef") {
                (
                    self.store
                        .get(&CONFIGMAPS, &self.ns, r["name"].as_str().unwrap_or(""))
                        .ok()
                        .map(|o| {
                            o["data"]
                                .as_object()
                                .map(|m| {
                                    m.iter()
                                        .map(|(k, v)| {
                                            (
                                                k.clone(),
                                                v.as_str().unwrap_or("").as_bytes().to_vec(),
                                            )
                                        })
                                        .collect()
                                })
                                .unwrap_or_default()
                        }),
                    r["optional"].as_bool().unwrap_or(false),
                    format!("configmap {:?}", r["name"]),
                )
            } else {
                continue;
            };
            match obj {
                Some(kv) => {
                    for (k, v) in kv {
                        set(
                            &mut env,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        );
                    }
                }
                None if optional => {}
                None => return Err(PrepareError::Retry(format!("{what} not found (envFrom)"))),
            }
        }
        for e in c["env"].as_array().cloned().unwrap_or_default() {
            let name = e["name"].as_str().unwrap_or("").to_string();
            let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
                expand(v, &env)
            } else if let Some(vf) = e.get("valueFrom") {
                if let Some(fp) = vf.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
                    match field_ref(pod, fp) {
                        Some(v) => v,
                        None if fp == "status.podIP" || fp == "status.podIPs" => {
                            POD_IP_MARK.to_string()
                        }
                        None if fp == "status.hostIP" || fp == "status.hostIPs" => host.clone(),
                        None => {
                            return Err(fatal(format!("env {name}: unsupported fieldRef {fp:?}")))
                        }
                    }
                } else if let Some(r) = vf.get("secretKeyRef") {
                    let optional = r["optional"].as_bool().unwrap_or(false);
                    let (sn, key) = (
                        r["name"].as_str().unwrap_or(""),
                        r["key"].as_str().unwrap_or(""),
                    );
                    match self
                        .store
                        .get(&SECRETS, &self.ns, sn)
                        .ok()
                        .and_then(|o| decoded(&o["data"]).into_iter().find(|(k, _)| k == key))
                    {
                        Some((_, v)) => String::from_utf8_lossy(&v).into_owned(),
                        None if optional => continue,
                        None => {
                            return Err(PrepareError::Retry(format!(
                                "couldn't find key {key} in Secret {}/{sn}",
                                self.ns
                            )))
                        }
                    }
                } else if let Some(r) = vf.get("configMapKeyRef") {
                    let optional = r["optional"].as_bool().unwrap_or(false);
                    let (cn, key) = (
                        r["name"].as_str().unwrap_or(""),
                        r["key"].as_str().unwrap_or(""),
                    );
                    match self
                        .store
                        .get(&CONFIGMAPS, &self.ns, cn)
                        .ok()
                        .and_then(|o| o["data"][key].as_str().map(String::from))
                    {
                        Some(v) => v,
                        None if optional => continue,
                        None => {
                            return Err(PrepareError::Retry(format!(
                                "couldn't find key {key} in ConfigMap {}/{cn}",
                                self.ns
                            )))
                        }
                    }
                } else if let Some(r) = vf.get("resourceFieldRef") {
                    resource_field(c, r)
                } else {
                    return Err(fatal(format!("env {name}: unsupported valueFrom")));
                }
            } else {
                String::new()
            };
            set(&mut env, name, value);
        }
        let list = |k: &str| -> Vec<String> {
            c[k].as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| expand(x.as_str().unwrap_or(""), &env))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (cmd_field, args_field) = (list("command"), list("args"));
        if let (Some(mi), Some(sec)) = (image, security) {
            // Kubernetes' rules: command replaces ENTRYPOINT (and drops CMD), args replaces CMD.
            let (mut command, args) = match (cmd_field.is_empty(), args_field.is_empty()) {
                (false, _) => (cmd_field, args_field),
                (true, false) => (mi.config.entrypoint.clone(), args_field),
                (true, true) => (mi.config.entrypoint.clone(), mi.config.cmd.clone()),
            };
            command.extend(args);
            if command.is_empty() {
                return Err(PrepareError::Config(
                    "CreateContainerError",
                    format!("failed to create container {}: no command specified (neither the pod nor image {} sets one)", c["name"].as_str().unwrap_or(""), mi.config.resolved),
                ));
            }
            if !env.iter().any(|(k, _)| k == "HOME") {
                set(
                    &mut env,
                    "HOME".into(),
                    sec.home.clone().unwrap_or_else(|| "/".into()),
                );
            }
            let workdir = c["workingDir"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or(Some(mi.config.workdir.as_str()).filter(|s| !s.is_empty()))
                .map(PathBuf::from);
            let container = Container {
                rootfs: mi.rootfs.clone(),
                read_only_root: sec.read_only_root,
                uid: sec.uid,
                gid: sec.gid,
                groups: sec.groups,
                capabilities: sec.capabilities,
                no_new_privs: sec.no_new_privs,
                read_only_mounts,
                tmpfs,
            };
            return Ok(Prepared {
                hostname,
                command,
                env,
                workdir,
                mounts,
                container: Some(container),
            });
        }
        let mut command = cmd_field;
        command.extend(args_field);
        if command.is_empty() {
            return Err(fatal(format!(
                "container {} has no command: sandbox pods run host programs, not images, so spec.containers[].command is required",
                c["name"].as_str().unwrap_or("")
            )));
        }
        // As a container runtime would, refuse to start what cannot be executed.
        let path_var = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| crate::podnet::DEFAULT_PATH.to_string());
        if !executable_exists(&command[0], &path_var) {
            return Err(fatal(format!(
                "failed to start container {}: exec: {:?}: executable file not found in $PATH ({path_var}); sandbox pods run programs of the host filesystem",
                c["name"].as_str().unwrap_or(""),
                command[0]
            )));
        }
        let workdir = c["workingDir"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        Ok(Prepared {
            hostname,
            command,
            env,
            workdir,
            mounts,
            container: None,
        })
    }
}

/// Stands for the pod IP in the environment until the address is allocated.
const POD_IP_MARK: &str = "\u{1}pod-ip\u{1}";

struct Prepared {
    hostname: String,
    command: Vec<String>,
    env: Vec<(String, String)>,
    workdir: Option<PathBuf>,
    mounts: Vec<(PathBuf, PathBuf)>,
    /// Set for pods that run an image.
    container: Option<Container>,
}

enum PrepareError {
    /// Will not get better (bad spec): the pod fails.
    Fatal(String),
    /// Waits for something to appear (Secret, ConfigMap, ServiceAccount).
    Retry(String),
    /// The container cannot be created as specified (e.g. runAsNonRoot with a root image): the
    /// pod stays Pending with this waiting reason, as on a node.
    Config(&'static str, String),
}

fn set_cond(st: &mut Value, ty: &str, status: bool, now: &str) {
    set_cond_reason(st, ty, status, now, "", "");
}

fn set_cond_reason(st: &mut Value, ty: &str, status: bool, now: &str, reason: &str, message: &str) {
    if !st["conditions"].is_array() {
        st["conditions"] = json!([]);
    }
    let want = if status { "True" } else { "False" };
    let conds = st["conditions"].as_array_mut().expect("array");
    match conds.iter_mut().find(|c| c["type"] == ty) {
        Some(c) => {
            if c["status"] != want {
                c["status"] = json!(want);
                c["lastTransitionTime"] = json!(now);
                if let Some(m) = c.as_object_mut() {
                    m.remove("reason");
                    m.remove("message");
                }
            }
            if !reason.is_empty() {
                c["reason"] = json!(reason);
                c["message"] = json!(message);
            }
        }
        None => {
            let mut c = json!({"type": ty, "status": want, "lastProbeTime": null, "lastTransitionTime": now});
            if !reason.is_empty() {
                c["reason"] = json!(reason);
                c["message"] = json!(message);
            }
            conds.push(c);
        }
    }
    // Keep the order the real kubelet reports.
    let order = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
        "DisruptionTarget",
    ];
    conds.sort_by_key(|c| {
        order
            .iter()
            .position(|o| c["type"] == *o)
            .unwrap_or(order.len())
    });
}

fn terminated(exit: Option<PodExit>, started: &str, finished: &str, cid: &str) -> Value {
    let (code, signal) = match exit {
        Some(PodExit { code: Some(c), .. }) => (c as i64, None),
        Some(PodExit {
            signal: Some(s), ..
        }) => (128 + s as i64, Some(s)),
        _ => (137, None),
    };
    let mut t = json!({
        "exitCode": code,
        "reason": if code == 0 { "Completed" } else { "Error" },
        "startedAt": started,
        "finishedAt": finished,
        "containerID": cid,
    });
    if let Some(s) = signal {
        t["signal"] = json!(s);
    }
    t
}

fn executable_exists(cmd: &str, path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        return ok(Path::new(cmd));
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .any(|d| ok(&Path::new(d).join(cmd)))
}

fn decoded(data: &Value) -> Vec<(String, Vec<u8>)> {
    data.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        base64::engine::general_purpose::STANDARD
                            .decode(v.as_str().unwrap_or(""))
                            .unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write_file(dir: &Path, rel: &str, data: &[u8]) -> Result<(), String> {
    if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|p| p == "..") {
        return Err(format!(
            "volume item path {rel:?} must be relative and stay inside the volume"
        ));
    }
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    std::fs::write(&p, data).map_err(|e| format!("writing {}: {e}", p.display()))
}

fn write_items(
    dir: &Path,
    data: &[(String, Vec<u8>)],
    items: Option<&Value>,
) -> Result<(), String> {
    match items.and_then(Value::as_array) {
        Some(items) => {
            for it in items {
                let key = it["key"].as_str().unwrap_or("");
                let path = it["path"].as_str().unwrap_or(key);
                let v = data
                    .iter()
                    .find(|(k, _)| k == key)
                    .ok_or_else(|| format!("key {key:?} is not in the volume's source"))?;
                write_file(dir, path, &v.1)?;
            }
            Ok(())
        }
        None => {
            for (k, v) in data {
                write_file(dir, k, v)?;
            }
            Ok(())
        }
    }
}

/// File modes (`defaultMode`, items' `mode`) and fsGroup ownership of a secret, configMap or
/// downwardAPI volume, as the kubelet sets them: files root-owned with group fsGroup and at
/// least group-readable, directories setgid.
fn volume_modes(dir: &Path, src: &Value, fs_group: Option<u32>) -> Result<(), String> {
    let default_mode = src["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    let item_modes: HashMap<String, u32> = src["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|it| {
            Some((
                it["path"].as_str().or(it["key"].as_str())?.to_string(),
                it["mode"].as_u64()? as u32,
            ))
        })
        .collect();
    fn walk(d: &Path, rel: &str, out: &mut Vec<(PathBuf, String, bool)>) -> std::io::Result<()> {
        for e in std::fs::read_dir(d)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let is_dir = e.file_type()?.is_dir();
            out.push((e.path(), r.clone(), is_dir));
            if is_dir {
                walk(&e.path(), &r, out)?;
            }
        }
        Ok(())
    }
    let mut entries = vec![(dir.to_path_buf(), String::new(), true)];
    walk(dir, "", &mut entries).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for (p, rel, is_dir) in entries {
        let mut mode = if is_dir {
            0o755
        } else {
            item_modes.get(&rel).copied().unwrap_or(default_mode) & 0o777
        };
        if let Some(g) = fs_group {
            std::os::unix::fs::chown(&p, Some(0), Some(g))
                .map_err(|e| format!("chown {}: {e}", p.display()))?;
            mode |= if is_dir { 0o2000 | 0o050 } else { 0o440 };
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", p.display()))?;
    }
    Ok(())
}

/// The value of a downward-API field of a pod.
pub fn field_ref(pod: &Value, path: &str) -> Option<String> {
    let bracket = |prefix: &str| -> Option<String> {
        let rest = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(rest.to_string())
    };
    if let Some(k) = bracket("metadata.labels") {
        return Some(
            pod["metadata"]["labels"][&k]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
    }
    if let Some(k) = bracket("metadata.annotations") {
        return Some(
            pod["metadata"]["annotations"][&k]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
    }
    let v = match path {
        "metadata.name" => pod.pointer("/metadata/name"),
        "metadata.namespace" => pod.pointer("/metadata/namespace"),
        "metadata.uid" => pod.pointer("/metadata/uid"),
        "spec.nodeName" => pod.pointer("/spec/nodeName"),
        "spec.serviceAccountName" => pod.pointer("/spec/serviceAccountName"),
        "status.hostIP" | "status.hostIPs" => pod.pointer("/status/hostIP"),
        "status.podIP" | "status.podIPs" => pod.pointer("/status/podIP"),
        _ => return None,
    };
    v.and_then(Value::as_str).map(String::from)
}

fn resource_field(c: &Value, r: &Value) -> String {
    let res = r["resource"].as_str().unwrap_or("");
    let (kind, name) = res.split_once('.').unwrap_or(("limits", res));
    let q = c["resources"][kind][name]
        .as_str()
        .map(String::from)
        .or_else(|| c["resources"]["limits"][name].as_str().map(String::from));
    match (name, q) {
        ("cpu", Some(q)) => {
            let milli = if let Some(m) = q.strip_suffix('m') {
                m.parse::<f64>().unwrap_or(0.0)
            } else {
                q.parse::<f64>().unwrap_or(0.0) * 1000.0
            };
            ((milli / 1000.0).ceil() as i64).max(1).to_string()
        }
        ("cpu", None) => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .to_string(),
        (_, Some(q)) => q,
        (_, None) => "0".into(),
    }
}

/// `$(VAR)` expansion as the kubelet does for env values, command and args.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'(' {
                if let Some(end) = s[i + 2..].find(')') {
                    let name = &s[i + 2..i + 2 + end];
                    if let Some((_, v)) = env.iter().rev().find(|(k, _)| k == name) {
                        out.push_str(v);
                        i += end + 3;
                        continue;
                    }
                }
            }
        }
        let ch = s[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn parse_probe(p: &Value, c: &Value) -> Option<Probe> {
    let port_of = |v: &Value| -> Option<u16> {
        match v {
            Value::Number(n) => n.as_u64().map(|n| n as u16),
            Value::String(name) => c["ports"]
                .as_array()?
                .iter()
                .find(|pt| pt["name"] == *name)
                .and_then(|pt| pt["containerPort"].as_u64())
                .map(|n| n as u16)
                .or_else(|| name.parse().ok()),
            _ => None,
        }
    };
    let action = if let Some(t) = p.get("tcpSocket") {
        ProbeAction::Tcp(port_of(&t["port"])?)
    } else if let Some(h) = p.get("httpGet") {
        ProbeAction::Http(
            port_of(&h["port"])?,
            h["path"].as_str().unwrap_or("/").to_string(),
        )
    } else if let Some(e) = p.get("exec") {
        ProbeAction::Exec(
            e["command"]
                .as_array()?
                .iter()
                .map(|x| x.as_str().unwrap_or("").to_string())
                .collect(),
        )
    } else {
        return None;
    };
    let secs = |k: &str, d: u64, max: u64| Duration::from_secs(p[k].as_u64().unwrap_or(d).min(max));
    Some(Probe {
        action,
        // Bounded so that a probe config meant for a big cluster cannot stall tests.
        initial_delay: secs("initialDelaySeconds", 0, 60),
        period: secs("periodSeconds", 10, 10).max(Duration::from_millis(200)),
        timeout: secs("timeoutSeconds", 1, 10).max(Duration::from_millis(200)),
        success_threshold: p["successThreshold"].as_u64().unwrap_or(1).max(1) as u32,
        failure_threshold: p["failureThreshold"].as_u64().unwrap_or(3).max(1) as u32,
    })
}

fn http_probe(ip: Ipv4Addr, port: u16, path: &str, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::from((ip, port)), timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    if write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.33\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 12 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .is_some_and(|c| (200..400).contains(&c))
}

fn run_with_timeout(mut cmd: std::process::Command, timeout: Duration) -> bool {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return st.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        let env = vec![
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "x".to_string()),
        ];
        assert_eq!(expand("$(A)-$(B)-$(C)-$$(A)", &env), "1-x-$(C)-$(A)");
    }

    #[test]
    fn field_refs() {
        let pod = json!({"metadata": {"name": "p", "namespace": "n", "labels": {"a": "b"}, "annotations": {"batch.kubernetes.io/job-completion-index": "3"}}, "status": {"podIP": "10.0.0.2"}});
        assert_eq!(field_ref(&pod, "metadata.name").as_deref(), Some("p"));
        assert_eq!(
            field_ref(&pod, "metadata.labels['a']").as_deref(),
            Some("b")
        );
        assert_eq!(
            field_ref(
                &pod,
                "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            )
            .as_deref(),
            Some("3")
        );
        assert_eq!(field_ref(&pod, "status.podIP").as_deref(), Some("10.0.0.2"));
        assert_eq!(field_ref(&pod, "spec.bogus"), None);
    }

    #[test]
    fn conditions_keep_order() {
        let mut st = json!({});
        set_cond(&mut st, "PodScheduled", true, "t");
        set_cond(&mut st, "Ready", false, "t");
        set_cond(&mut st, "Initialized", true, "t");
        let types: Vec<&str> = st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Initialized", "Ready", "PodScheduled"]);
    }
}
