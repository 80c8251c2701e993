//! A pod's lifecycle on the node: scheduled, admitted, what its containers share prepared,
//! its sandbox created (address, hostname, IPC), then its containers run by the [`Worker`]
//! until the pod ends, is evicted or deleted.

use super::container_status::{CStatus, State};
use super::containers::Pod;
use super::control::Ctl;
use super::fields::s;
use super::pod::PodCtx;
use super::prepare::{PodPrep, PrepareError};
use super::status::{set_cond, PodView};
use super::sync::lock;
use super::worker::{initial_statuses, Worker, PREPARE_RETRY};
use crate::api::defaults::now_rfc3339;
use crate::api::resources::PODS;
use crate::api::Part;
use crate::runtime::podnet::PodSpec;
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;

impl PodCtx {
    /// Runs the pod until it ends, is evicted or deleted, or the cluster stops.
    pub(super) fn lifecycle(&self, rx: &Receiver<Ctl>) -> Result<()> {
        let Some(pod) = self.admit() else {
            return Ok(());
        };
        let start_time = now_rfc3339();
        let Some(prep) = self.wait_prepared(rx, &pod, &start_time) else {
            return Ok(());
        };
        let ip = self.net.alloc_ip().context("allocating a pod IP")?;
        let spec = PodSpec {
            name: self.name.clone(),
            hostname: prep.hostname.clone(),
            ip,
            containers: Vec::new(),
        };
        let sandbox = match self.net.start_sandbox(&spec) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                let m = format!("the sandbox could not start the pod: {e:#}");
                self.fail("FailedCreatePodSandBox", &m);
                return Ok(());
            }
        };
        *lock(&self.running) = Some(sandbox.clone());
        Worker::new(self, pod, prep, sandbox, ip, start_time).run(rx);
        Ok(())
    }

    /// Schedules the pod onto this node and reads its containers. None when the pod is gone or
    /// cannot run (it is then Failed).
    fn admit(&self) -> Option<Pod> {
        let pod = self.pod()?;
        self.schedule(&pod);
        let pod = Pod::new(self.pod()?);
        let mut names = HashSet::new();
        if let Some(c) = pod
            .containers
            .iter()
            .find(|c| !names.insert(c.name.as_str()))
        {
            let m = format!("pod {} has two containers named {:?}", self.name, c.name);
            self.fail("Unsupported", &m);
            return None;
        }
        if pod.default_container().is_empty() {
            self.fail(
                "Unsupported",
                &format!("pod {} has no containers", self.name),
            );
            return None;
        }
        Some(pod)
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

    /// What the pod's containers share (service account, volumes); a missing Secret or
    /// ConfigMap keeps the pod waiting, as on a node. None when the pod failed or went away
    /// meanwhile.
    fn wait_prepared(&self, rx: &Receiver<Ctl>, pod: &Pod, start_time: &str) -> Option<PodPrep> {
        self.report_waiting(pod, &initial_statuses(pod), start_time);
        let mut last_config_error = String::new();
        loop {
            let (reason, m) = match self.prepare_pod(pod) {
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
            let waiting =
                CStatus::waiting(reason).with_state(State::Waiting(reason.into(), m.clone()));
            self.report_waiting(pod, &vec![waiting; pod.containers.len()], start_time);
            match rx.recv_timeout(PREPARE_RETRY) {
                Ok(Ctl::Evict(_, done)) => {
                    let _ = done.send(Err(anyhow!("pod {} has not started yet ({m})", self.name)));
                }
                Ok(_) | Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.pod()?;
        }
    }

    /// Pending, before the sandbox exists: every container waits as `cs` says.
    fn report_waiting(&self, pod: &Pod, cs: &[CStatus], start_time: &str) {
        let gw = self.net.gateway().to_string();
        let view = PodView {
            pod,
            cs,
            ip: None,
            host_ip: &gw,
            start_time,
            sandbox: false,
            terminal: false,
            phase: None,
        };
        self.status(|st| {
            view.write(st, &now_rfc3339());
        });
    }
}
