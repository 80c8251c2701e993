//! Pod status: the pod's status made from its containers' ([`super::container_status`]):
//! phase, conditions in the kubelet's order, `containerStatuses` and `initContainerStatuses`,
//! addresses.

use super::container_status::CStatus;
use super::containers::Pod;
use super::phase::{containers_ready, initialized, phase, View};
use serde_json::{json, Value};
use std::net::Ipv4Addr;

/// Everything the pod's status is made from.
pub(super) struct PodView<'a> {
    pub(super) pod: &'a Pod,
    /// Per container of `pod`, in its order.
    pub(super) cs: &'a [CStatus],
    /// The pod's address once its sandbox exists.
    pub(super) ip: Option<Ipv4Addr>,
    /// The node's address.
    pub(super) host_ip: &'a str,
    pub(super) start_time: &'a str,
    /// Whether the sandbox is up (`PodReadyToStartContainers`).
    pub(super) sandbox: bool,
    /// Whether the pod is done: no container will start again.
    pub(super) terminal: bool,
    /// The phase, when it is not the containers' (an evicted pod is Failed).
    pub(super) phase: Option<&'static str>,
}

impl PodView<'_> {
    fn views(&self) -> Vec<View<'_>> {
        self.pod
            .containers
            .iter()
            .zip(self.cs)
            .map(|(c, st)| View {
                kind: c.kind,
                name: &c.name,
                st,
            })
            .collect()
    }

    /// The statuses of the init containers (`init`) or of the regular ones.
    fn statuses(&self, init: bool) -> Value {
        let v: Vec<Value> = self
            .pod
            .containers
            .iter()
            .zip(self.cs)
            .filter(|(c, _)| c.kind.is_init() == init)
            .map(|(c, st)| st.json(c))
            .collect();
        Value::Array(v)
    }

    /// Writes the pod's status into `st` at time `now`. Its phase is the one returned.
    pub(super) fn write(&self, st: &mut Value, now: &str) -> &'static str {
        let views = self.views();
        let phase = self
            .phase
            .unwrap_or_else(|| phase(&views, self.pod.restart_policy(), self.terminal));
        st["phase"] = json!(phase);
        st["hostIP"] = json!(self.host_ip);
        st["hostIPs"] = json!([{"ip": self.host_ip}]);
        if let Some(ip) = self.ip {
            st["podIP"] = json!(ip.to_string());
            st["podIPs"] = json!([{"ip": ip.to_string()}]);
        }
        st["startTime"] = json!(self.start_time);
        st["containerStatuses"] = self.statuses(false);
        if self.pod.containers.iter().any(|c| c.kind.is_init()) {
            st["initContainerStatuses"] = self.statuses(true);
        }
        let sandbox = self.sandbox && !matches!(phase, "Succeeded" | "Failed");
        set_cond(st, "PodReadyToStartContainers", sandbox, now);
        let init = initialized(&views, phase);
        set_cond_reason(
            st,
            "Initialized",
            init.status,
            now,
            init.reason,
            &init.message,
        );
        let ready = containers_ready(&views, phase);
        for ty in ["ContainersReady", "Ready"] {
            set_cond_reason(st, ty, ready.status, now, ready.reason, &ready.message);
        }
        set_cond(st, "PodScheduled", true, now);
        phase
    }
}

/// Sets condition `ty` of a pod status `st` (no reason).
pub(super) fn set_cond(st: &mut Value, ty: &str, status: bool, now: &str) {
    set_cond_reason(st, ty, status, now, "", "");
}

/// Sets condition `ty` with a reason and message ("" for none). `lastTransitionTime` changes
/// only when the status does.
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
    let c = match conds.iter().position(|c| c["type"] == ty) {
        Some(i) => &mut conds[i],
        None => {
            conds.push(json!({"type": ty, "status": want, "lastProbeTime": null, "lastTransitionTime": now}));
            conds.last_mut().expect("pushed")
        }
    };
    if c["status"] != want {
        c["status"] = json!(want);
        c["lastTransitionTime"] = json!(now);
    }
    if let Some(m) = c.as_object_mut() {
        m.remove("reason");
        m.remove("message");
        if !reason.is_empty() {
            m.insert("reason".into(), json!(reason));
        }
        if !message.is_empty() {
            m.insert("message".into(), json!(message));
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
        set_cond_reason(&mut st, "Ready", false, "u", "ContainersNotReady", "m");
        let ready = &st["conditions"][1];
        assert_eq!(
            (
                ready["reason"].as_str(),
                ready["lastTransitionTime"].as_str()
            ),
            (Some("ContainersNotReady"), Some("t"))
        );
        set_cond(&mut st, "Ready", true, "v");
        let ready = &st["conditions"][1];
        assert!(ready.get("reason").is_none() && ready["lastTransitionTime"] == "v");
    }
}
