//! A pod's lifecycle on the node: scheduled, image pulled, volumes and environment prepared,
//! started, supervised, restarted by its restart policy, evicted or ended.

use super::pod::{IpLock, Outcome, PodCtx};
use super::prepare::{PrepareError, Prepared, POD_IP_MARK};
use super::probe::parse_probe;
use super::status::{set_cond, set_cond_reason, terminated};
use super::{lock, s, Ctl, ExecInfo, MAX_BACKOFF};
use crate::api::defaults::now_rfc3339;
use crate::api::resources::PODS;
use crate::api::Part;
use crate::images;
use crate::podnet::{ContainerSpec, PodSpec, RunningPod};
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

impl PodCtx {
    pub(super) fn lifecycle(&self, rx: &Receiver<Ctl>, ip_lock: &IpLock) -> Result<()> {
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
                containers: vec![ContainerSpec {
                    command: prepared.command.clone(),
                    env: prepared.env.clone(),
                    workdir: prepared.workdir.clone(),
                    bind_mounts: prepared.mounts.clone(),
                    log_path: self.dir.join("container.log"),
                    image: prepared.container.clone(),
                }],
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
}
