//! A pod's lifecycle on the node: scheduled, admitted, its images pulled, its containers
//! prepared, started, supervised, restarted by its restart policy, evicted or ended.

use super::backoff::MAX_BACKOFF;
use super::control::Ctl;
use super::exec_info::ExecInfo;
use super::fields::s;
use super::paths::CONTAINER_LOG;
use super::pod::{IpLock, Outcome, Pod, PodContainer, PodCtx};
use super::prepare::{PrepareError, PreparedPod};
use super::status::{set_cond, terminated, Run};
use super::sync::lock;
use crate::api::defaults::now_rfc3339;
use crate::api::resources::PODS;
use crate::api::Part;
use crate::podnet::{ContainerSpec, PodExit, PodSpec, RunningPod};
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

impl PodCtx {
    /// Runs the pod until it ends, is evicted or deleted, or the cluster stops.
    pub(super) fn lifecycle(&self, rx: &Receiver<Ctl>, ip_lock: &IpLock) -> Result<()> {
        let Some(mut pod) = self.admit() else {
            return Ok(());
        };
        // The images' root filesystems, unless a container runs host programs; an image the
        // local store does not have keeps the pod Pending, as a failed pull does on a node.
        for c in &mut pod.containers {
            if !self.pull_rootfs(rx, c) {
                return Ok(());
            }
        }
        let Some(prepared) = self.wait_prepared(rx, &pod) else {
            return Ok(());
        };
        let ip = {
            let _g = lock(&ip_lock.0);
            self.net.alloc_ip().context("allocating a pod IP")?
        };
        self.run_pod(rx, ip_lock, &pod, &prepared.with_pod_ip(ip), ip);
        Ok(())
    }

    /// Schedules the pod onto this node and reads its containers. None when the pod is gone or
    /// cannot run in the sandbox (it is then Failed).
    fn admit(&self) -> Option<Pod> {
        let pod = self.pod()?;
        self.schedule(&pod);
        let object = self.pod()?;
        let containers = object
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
            return None;
        }
        if object
            .pointer("/spec/initContainers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            self.fail("Unsupported", "sandbox pods do not run initContainers; fold their work into the container's command");
            return None;
        }
        let containers = containers.iter().map(PodContainer::new).collect();
        Some(Pod { object, containers })
    }

    /// Binds the pod to this node (unless it names one) and says so.
    fn schedule(&self, pod: &Value) {
        if s(pod, "/spec/nodeName").is_empty() {
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
        let message = format!(
            "Successfully assigned {}/{} to {}",
            self.ns, self.name, self.node
        );
        self.event("Normal", "Scheduled", &message);
    }

    /// Volumes and environment; a missing Secret/ConfigMap keeps the pod waiting, as on a
    /// node. None when the pod failed or went away meanwhile.
    fn wait_prepared(&self, rx: &Receiver<Ctl>, pod: &Pod) -> Option<PreparedPod> {
        let mut last_config_error = String::new();
        loop {
            let (reason, m) = match self.prepare(pod) {
                Ok(p) => return Some(p),
                Err(PrepareError::Fatal(m)) => {
                    self.fail("CreateContainerError", &m);
                    return None;
                }
                Err(PrepareError::Retry(m)) => ("CreateContainerConfigError", m),
                Err(PrepareError::Config(r, m)) => (r, m),
            };
            if m != last_config_error {
                self.event("Warning", "Failed", &format!("Error: {m}"));
                last_config_error = m.clone();
            }
            self.report_waiting(pod, reason, &m);
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(Ctl::Evict(_, done)) => {
                    let _ = done.send(Err(anyhow!("pod {} has not started yet ({m})", self.name)));
                }
                Ok(_) | Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.pod()?;
        }
    }

    /// Starts the pod at `ip` and restarts it by its restart policy until it ends for good.
    fn run_pod(
        &self,
        rx: &Receiver<Ctl>,
        ip_lock: &IpLock,
        pod: &Pod,
        prepared: &PreparedPod,
        ip: Ipv4Addr,
    ) {
        let restart_policy = s(&pod.object, "/spec/restartPolicy");
        let mut run = Run::new();
        // The exited pod of the last run, kept (holding its address) until the restart.
        let mut previous: Option<RunningPod> = None;
        loop {
            let spec = self.pod_spec(pod, prepared, ip);
            let Some(rp) = self.start(spec, previous.take(), ip_lock, pod, &run) else {
                return;
            };
            let started_at = now_rfc3339();
            let cid = self.started(rp, prepared, ip);
            if run.restarts == 0 {
                let message = format!("Started container {}", pod.main().name);
                self.event("Normal", "Started", &message);
            }
            self.report_running(pod, &run, &cid, &started_at, ip);
            let exit = match self.supervise(rx, pod.main().probe.as_ref(), ip) {
                Outcome::Stop => {
                    if let Some(rp) = lock(&self.running).take() {
                        let _ = rp.kill();
                    }
                    return;
                }
                Outcome::Evicted(message, done) => {
                    self.evicted(pod, &run, &cid, &started_at, &message);
                    let _ = done.send(Ok(()));
                    return;
                }
                Outcome::Exited(e) => e,
            };
            let term = terminated(Some(exit), &started_at, &now_rfc3339(), &cid);
            if !restarts(&restart_policy, exit) {
                self.report_finished(pod, &run, &cid, exit, &term);
                // The pod's processes are gone; keep the object (and log) as a node does.
                lock(&self.running).take();
                return;
            }
            // Restart in place, after a back-off.
            previous = lock(&self.running).take();
            run.restarts += 1;
            run.last_state = json!({"terminated": term});
            if !self.back_off(rx, pod, &mut run) {
                return;
            }
        }
    }

    /// What the sandbox runs for the prepared pod at `ip`.
    fn pod_spec(&self, pod: &Pod, prepared: &PreparedPod, ip: Ipv4Addr) -> PodSpec {
        let containers = prepared
            .containers
            .iter()
            .zip(&pod.containers)
            .map(|(p, c)| ContainerSpec {
                name: c.name.clone(),
                command: p.command.clone(),
                env: p.env.clone(),
                workdir: p.workdir.clone(),
                bind_mounts: p.mounts.clone(),
                log_path: self.dir.join(CONTAINER_LOG),
                image: p.container.clone(),
            })
            .collect();
        PodSpec {
            name: self.name.clone(),
            hostname: prepared.hostname.clone(),
            ip,
            containers,
        }
    }

    /// Starts the pod (a restart first releases `previous`, the last run's pod holding the
    /// address, and takes the address again under the lock). None when the sandbox could not
    /// start it: the pod is then Failed.
    fn start(
        &self,
        spec: PodSpec,
        previous: Option<RunningPod>,
        ip_lock: &IpLock,
        pod: &Pod,
        run: &Run,
    ) -> Option<RunningPod> {
        let started = match previous {
            Some(old) => {
                let _g = lock(&ip_lock.0);
                drop(old);
                self.net.start_pod(spec)
            }
            None => self.net.start_pod(spec),
        };
        match started {
            Ok(rp) => Some(rp),
            Err(e) => {
                self.report_start_error(pod, run, &format!("{e:#}"));
                None
            }
        }
    }

    /// Keeps the started pod and writes what `exec` needs to enter it; the container's id.
    fn started(&self, rp: RunningPod, prepared: &PreparedPod, ip: Ipv4Addr) -> String {
        let workdir = prepared.containers[0]
            .workdir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/"));
        let main = rp.containers().first().cloned().unwrap_or_default();
        let info = ExecInfo {
            namespace: self.ns.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            pid: rp.host_pid(),
            ip: ip.to_string(),
            netns: rp.netns().to_string(),
            workdir: workdir.to_string_lossy().into_owned(),
            env: rp.env().to_vec(),
            container: rp.container_config(&main),
        };
        let container_id = format!("sandbox://{}", rp.netns());
        *lock(&self.running) = Some(rp);
        let _ = std::fs::write(
            self.dir.join("exec.json"),
            serde_json::to_vec_pretty(&info).unwrap_or_default(),
        );
        container_id
    }

    /// Kills the evicted pod and reports it Failed, Evicted with `message`.
    fn evicted(&self, pod: &Pod, run: &Run, cid: &str, started_at: &str, message: &str) {
        let taken = lock(&self.running).take();
        let exit = taken.map(|rp| rp.kill());
        let finished = now_rfc3339();
        let term = terminated(exit.and_then(|e| e.ok()), started_at, &finished, cid);
        self.report_evicted(pod, run, cid, &term, message);
    }

    /// Waits out the back-off before a restart (in CrashLoopBackOff). False when the pod is
    /// not to be restarted after all: evicted, deleted, or the cluster stops.
    fn back_off(&self, rx: &Receiver<Ctl>, pod: &Pod, run: &mut Run) -> bool {
        let wait = run.backoff;
        run.backoff = (run.backoff * 2).min(MAX_BACKOFF);
        let message = format!(
            "back-off {}ms restarting failed container={} pod={}_{}",
            wait.as_millis(),
            pod.main().name,
            self.name,
            self.ns
        );
        self.event("Warning", "BackOff", &message);
        self.report_back_off(pod, run, &message);
        match rx.recv_timeout(wait) {
            Ok(Ctl::Evict(message, done)) => {
                self.report_evicted_in_back_off(&message);
                let _ = done.send(Ok(()));
                return false;
            }
            Ok(_) | Err(RecvTimeoutError::Disconnected) => return false,
            Err(RecvTimeoutError::Timeout) => {}
        }
        self.pod().is_some()
    }
}

/// Whether a pod whose process ended with `exit` is restarted under `restartPolicy`.
fn restarts(restart_policy: &str, exit: PodExit) -> bool {
    match restart_policy {
        "Never" => false,
        "OnFailure" => !exit.success(),
        _ => true,
    }
}
