//! A pod's READY, STATUS and RESTARTS as `kubectl get pods` prints them (the API server's
//! table printer): init containers first (`Init:0/2`, `Init:Error`, `Init:CrashLoopBackOff`),
//! then the regular containers (`PodInitializing`, `Running`, `Completed`, `Error`, ...), with
//! native sidecars counted among the ready containers.

use serde_json::Value;

/// What the pod's row shows of its containers.
#[derive(Debug, PartialEq, Eq)]
pub struct PodSummary {
    pub ready: usize,
    /// Regular containers plus native sidecars.
    pub total: usize,
    pub status: String,
    pub restarts: i64,
}

fn list<'a>(pod: &'a Value, ptr: &str) -> &'a [Value] {
    pod.pointer(ptr)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// What a terminated state shows: its reason, else the signal or the exit code.
fn terminated_reason(t: &Value) -> String {
    if let Some(r) = text(t, "/reason") {
        return r.to_string();
    }
    match t["signal"].as_i64().filter(|s| *s != 0) {
        Some(s) => format!("Signal:{s}"),
        None => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
    }
}

fn condition_true(pod: &Value, ty: &str) -> bool {
    list(pod, "/status/conditions")
        .iter()
        .any(|c| c["type"] == ty && c["status"] == "True")
}

/// The init containers' part: the reason while initializing (None once done), the ready
/// sidecars, and the restarts (of all init containers, of the sidecars).
fn init_part(pod: &Value, ready: &mut usize) -> (Option<String>, i64, i64) {
    let specs = list(pod, "/spec/initContainers");
    let sidecar = |name: &Value| {
        specs
            .iter()
            .any(|c| c["name"] == *name && c["restartPolicy"] == "Always")
    };
    let (mut restarts, mut sidecar_restarts) = (0, 0);
    for (i, c) in list(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        let n = c["restartCount"].as_i64().unwrap_or(0);
        restarts += n;
        let is_sidecar = sidecar(&c["name"]);
        if is_sidecar {
            sidecar_restarts += n;
        }
        let term = c.pointer("/state/terminated");
        if term.is_some_and(|t| t["exitCode"].as_i64() == Some(0)) {
            continue;
        }
        if is_sidecar && c["started"].as_bool() == Some(true) {
            *ready += usize::from(c["ready"].as_bool() == Some(true));
            continue;
        }
        let waiting = text(c, "/state/waiting/reason").filter(|r| *r != "PodInitializing");
        let reason = match (term, waiting) {
            (Some(t), _) => format!("Init:{}", terminated_reason(t)),
            (None, Some(w)) => format!("Init:{w}"),
            (None, None) => format!("Init:{i}/{}", specs.len()),
        };
        return (Some(reason), restarts, sidecar_restarts);
    }
    (None, restarts, sidecar_restarts)
}

/// The pod's READY, STATUS and RESTARTS.
pub fn summarize(pod: &Value) -> PodSummary {
    let sidecars = list(pod, "/spec/initContainers")
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count();
    let total = list(pod, "/spec/containers").len() + sidecars;
    let mut reason = text(pod, "/status/reason")
        .or_else(|| text(pod, "/status/phase"))
        .unwrap_or("Pending")
        .to_string();
    // An evicted pod shows Evicted, whatever its containers' last states.
    let evicted = text(pod, "/status/reason") == Some("Evicted");
    let mut ready = 0;
    let (initializing, mut restarts, sidecar_restarts) = init_part(pod, &mut ready);
    if let Some(r) = initializing.as_ref().filter(|_| !evicted) {
        reason = r.clone();
    }
    if (initializing.is_none() || condition_true(pod, "Initialized")) && !evicted {
        restarts = sidecar_restarts;
        let mut running = false;
        for c in list(pod, "/status/containerStatuses").iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            if let Some(w) = text(c, "/state/waiting/reason") {
                reason = w.to_string();
            } else if let Some(t) = c.pointer("/state/terminated") {
                reason = terminated_reason(t);
            } else if c["ready"].as_bool() == Some(true) && c.pointer("/state/running").is_some() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if condition_true(pod, "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    let terminal = matches!(text(pod, "/status/phase"), Some("Succeeded" | "Failed"));
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|d| !d.is_null())
        && !terminal
    {
        reason = "Terminating".into();
    }
    PodSummary {
        ready,
        total,
        status: reason,
        restarts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(init: Value, init_st: Value, st: Value, phase: &str, initialized: bool) -> Value {
        json!({
            "spec": {"initContainers": init, "containers": [{"name": "main"}]},
            "status": {"phase": phase, "initContainerStatuses": init_st, "containerStatuses": st,
                "conditions": [{"type": "Initialized", "status": if initialized {"True"} else {"False"}}]},
        })
    }

    #[test]
    fn init_containers_then_the_regular_ones() {
        let init = json!([{"name": "a"}, {"name": "b"}]);
        let waiting =
            json!([{"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}]);
        let s = |st: Value, phase: &str, initialized: bool| {
            summarize(&pod(init.clone(), st, waiting.clone(), phase, initialized)).status
        };
        let running = json!({"running": {}});
        let done = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        let failed = json!({"terminated": {"exitCode": 1, "reason": "Error"}});
        let pending = json!({"waiting": {"reason": "PodInitializing"}});
        let st =
            |a: &Value, b: &Value| json!([{"name": "a", "state": a}, {"name": "b", "state": b}]);
        assert_eq!(s(st(&running, &pending), "Pending", false), "Init:0/2");
        assert_eq!(s(st(&done, &running), "Pending", false), "Init:1/2");
        assert_eq!(s(st(&done, &failed), "Failed", false), "Init:Error");
        let backoff = json!({"waiting": {"reason": "CrashLoopBackOff"}});
        assert_eq!(
            s(st(&backoff, &pending), "Pending", false),
            "Init:CrashLoopBackOff"
        );
        assert_eq!(s(st(&done, &done), "Pending", true), "PodInitializing");
    }

    #[test]
    fn a_sidecar_counts_as_ready_and_a_completed_pod_is_completed() {
        let init = json!([{"name": "side", "restartPolicy": "Always"}]);
        let side = |state: Value, started: bool| json!([{"name": "side", "started": started, "ready": started, "restartCount": 1, "state": state}]);
        let main = |state: Value, ready: bool| json!([{"name": "main", "ready": ready, "restartCount": 2, "state": state}]);
        let p = pod(
            init.clone(),
            side(json!({"running": {}}), true),
            main(json!({"running": {}}), true),
            "Running",
            true,
        );
        let mut p = p;
        p["status"]["conditions"] =
            json!([{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}]);
        assert_eq!(
            summarize(&p),
            PodSummary {
                ready: 2,
                total: 2,
                status: "Running".into(),
                restarts: 3
            }
        );
        let killed = json!({"terminated": {"exitCode": 137, "reason": "Error"}});
        let completed = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        let p = pod(
            init,
            side(killed, false),
            main(completed, false),
            "Succeeded",
            true,
        );
        assert_eq!(summarize(&p).status, "Completed");
        assert_eq!(summarize(&p).ready, 0);
    }
}
