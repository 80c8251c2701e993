//! Pod status: conditions in the kubelet's order, container statuses, and what the kubelet
//! reports as the pod goes through its lifecycle (pulling, waiting, running, ended, evicted,
//! backing off).

use super::pod::{Pod, PodContainer, PodCtx};
use crate::api::defaults::now_rfc3339;
use crate::podnet::PodExit;
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Sets condition `ty` of a pod status `st`.
pub(super) fn set_cond(st: &mut Value, ty: &str, status: bool, now: &str) {
    set_cond_reason(st, ty, status, now, "", "");
}

/// Sets condition `ty` with a reason and message (kept while the status stays).
pub(super) fn set_cond_reason(
    st: &mut Value,
    ty: &str,
    status: bool,
    now: &str,
    reason: &str,
    message: &str,
) {
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

/// The `terminated` state of a container that ended with `exit` (None: killed, 137).
pub(super) fn terminated(exit: Option<PodExit>, started: &str, finished: &str, cid: &str) -> Value {
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

/// What a container's status reports across restarts of the pod.
pub(super) struct Run {
    pub(super) restarts: i64,
    /// `lastState` (Null until the first restart).
    pub(super) last_state: Value,
    /// The next wait before a restart.
    pub(super) backoff: Duration,
    /// When the pod first started (`startTime`).
    pub(super) start_time: String,
}

impl Run {
    pub(super) fn new() -> Self {
        Run {
            restarts: 0,
            last_state: Value::Null,
            backoff: Duration::from_millis(500),
            start_time: now_rfc3339(),
        }
    }
}

/// One entry of `status.containerStatuses`.
pub(super) struct ContainerStatus<'a> {
    pub(super) c: &'a PodContainer,
    pub(super) ready: bool,
    pub(super) started: bool,
    pub(super) restarts: i64,
    pub(super) state: Value,
    pub(super) container_id: Option<&'a str>,
    /// Reported when set and not null.
    pub(super) last_state: Option<&'a Value>,
}

impl ContainerStatus<'_> {
    /// Not ready, not started, no restarts, in `state`.
    pub(super) fn new(c: &PodContainer, state: Value) -> ContainerStatus<'_> {
        ContainerStatus {
            c,
            ready: false,
            started: false,
            restarts: 0,
            state,
            container_id: None,
            last_state: None,
        }
    }

    pub(super) fn json(&self) -> Value {
        let mut cs = json!({
            "name": self.c.name, "ready": self.ready, "restartCount": self.restarts,
            "started": self.started, "image": self.c.image, "imageID": self.c.image_id(),
            "state": self.state,
        });
        if let Some(cid) = self.container_id {
            cs["containerID"] = json!(cid);
        }
        if let Some(ls) = self.last_state.filter(|l| !l.is_null()) {
            cs["lastState"] = ls.clone();
        }
        cs
    }
}

/// `status.containerStatuses`: one entry per container of the pod, as `f` makes it.
pub(super) fn statuses<'a>(
    pod: &'a Pod,
    f: impl Fn(&'a PodContainer) -> ContainerStatus<'a>,
) -> Value {
    Value::Array(pod.containers.iter().map(|c| f(c).json()).collect())
}

/// Ready and ContainersReady false, and PodReadyToStartContainers: the pod's process ended.
fn not_running(st: &mut Value, now: &str) {
    set_cond(st, "Ready", false, now);
    set_cond(st, "ContainersReady", false, now);
    set_cond(st, "PodReadyToStartContainers", false, now);
}

impl PodCtx {
    /// Pending while container `c`'s image is not in the store (`reason`, `message`).
    pub(super) fn report_pulling(&self, c: &PodContainer, reason: &str, message: &str) {
        let waiting = json!({"waiting": {"reason": reason, "message": message}});
        let cs = ContainerStatus::new(c, waiting).json();
        let unready = format!("containers with unready status: [{}]", c.name);
        self.status(|st| {
            st["phase"] = json!("Pending");
            st["containerStatuses"] = json!([cs]);
            let now = now_rfc3339();
            set_cond(st, "PodReadyToStartContainers", true, &now);
            set_cond(st, "Initialized", true, &now);
            set_cond_reason(st, "Ready", false, &now, "ContainersNotReady", &unready);
            set_cond_reason(
                st,
                "ContainersReady",
                false,
                &now,
                "ContainersNotReady",
                &unready,
            );
        });
    }

    /// Waiting with `reason` for what the containers need (a Secret, a ConfigMap, ...).
    pub(super) fn report_waiting(&self, pod: &Pod, reason: &str, message: &str) {
        let waiting = json!({"waiting": {"reason": reason, "message": message}});
        let cs = statuses(pod, |c| ContainerStatus::new(c, waiting.clone()));
        self.status(|st| st["containerStatuses"] = cs);
    }

    /// Failed: the sandbox could not start the pod (`msg`).
    pub(super) fn report_start_error(&self, pod: &Pod, run: &Run, msg: &str) {
        self.event("Warning", "Failed", &format!("Error: {msg}"));
        let state =
            json!({"terminated": {"exitCode": 128, "reason": "StartError", "message": msg}});
        let cs = statuses(pod, |c| ContainerStatus {
            restarts: run.restarts,
            ..ContainerStatus::new(c, state.clone())
        });
        self.status(|st| {
            st["phase"] = json!("Failed");
            st["message"] = json!(format!("the sandbox could not start the pod: {msg}"));
            st["startTime"] = json!(run.start_time);
            st["containerStatuses"] = cs;
        });
    }

    /// Running at `ip` since `started_at`, as container `cid`.
    pub(super) fn report_running(
        &self,
        pod: &Pod,
        run: &Run,
        cid: &str,
        started_at: &str,
        ip: Ipv4Addr,
    ) {
        let ready_now = pod.main().probe.is_none();
        let state = json!({"running": {"startedAt": started_at}});
        let cs = statuses(pod, |c| ContainerStatus {
            ready: ready_now,
            started: true,
            restarts: run.restarts,
            container_id: Some(cid),
            last_state: Some(&run.last_state),
            ..ContainerStatus::new(c, state.clone())
        });
        let gw = self.net.gateway().to_string();
        self.status(|st| {
            st["phase"] = json!("Running");
            st["hostIP"] = json!(gw);
            st["hostIPs"] = json!([{"ip": gw}]);
            st["podIP"] = json!(ip.to_string());
            st["podIPs"] = json!([{"ip": ip.to_string()}]);
            st["startTime"] = json!(run.start_time);
            st["containerStatuses"] = cs;
            let now = now_rfc3339();
            set_cond(st, "PodReadyToStartContainers", true, &now);
            set_cond(st, "Initialized", true, &now);
            set_cond(st, "Ready", ready_now, &now);
            set_cond(st, "ContainersReady", ready_now, &now);
            set_cond(st, "PodScheduled", true, &now);
        });
    }

    /// Succeeded or Failed by `exit`; the container `cid` is `terminated` (`term`).
    pub(super) fn report_finished(
        &self,
        pod: &Pod,
        run: &Run,
        cid: &str,
        exit: PodExit,
        term: &Value,
    ) {
        let state = json!({"terminated": term});
        let cs = statuses(pod, |c| ContainerStatus {
            restarts: run.restarts,
            container_id: Some(cid),
            last_state: Some(&run.last_state),
            ..ContainerStatus::new(c, state.clone())
        });
        self.status(|st| {
            st["phase"] = json!(if exit.success() {
                "Succeeded"
            } else {
                "Failed"
            });
            st["containerStatuses"] = cs;
            not_running(st, &now_rfc3339());
        });
    }

    /// Failed, Evicted with `message`: the container `cid` was killed (`term`).
    pub(super) fn report_evicted(
        &self,
        pod: &Pod,
        run: &Run,
        cid: &str,
        term: &Value,
        message: &str,
    ) {
        let state = json!({"terminated": term});
        let cs = statuses(pod, |c| ContainerStatus {
            restarts: run.restarts,
            container_id: Some(cid),
            ..ContainerStatus::new(c, state.clone())
        });
        self.status(|st| {
            st["phase"] = json!("Failed");
            st["reason"] = json!("Evicted");
            st["message"] = json!(message);
            st["containerStatuses"] = cs;
            let now = now_rfc3339();
            not_running(st, &now);
            set_cond_reason(
                st,
                "DisruptionTarget",
                true,
                &now,
                "TerminationByKubelet",
                message,
            );
        });
        self.event("Warning", "Evicted", message);
    }

    /// Waiting in CrashLoopBackOff (`message`) before the next restart.
    pub(super) fn report_back_off(&self, pod: &Pod, run: &Run, message: &str) {
        let state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
        let cs = statuses(pod, |c| ContainerStatus {
            restarts: run.restarts,
            last_state: Some(&run.last_state),
            ..ContainerStatus::new(c, state.clone())
        });
        self.status(|st| {
            st["containerStatuses"] = cs;
            let now = now_rfc3339();
            set_cond(st, "Ready", false, &now);
            set_cond(st, "ContainersReady", false, &now);
        });
    }

    /// Failed, Evicted with `message`, between restarts (no container runs).
    pub(super) fn report_evicted_in_back_off(&self, message: &str) {
        self.status(|st| {
            st["phase"] = json!("Failed");
            st["reason"] = json!("Evicted");
            st["message"] = json!(message);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
