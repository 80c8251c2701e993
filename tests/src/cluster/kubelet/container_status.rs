//! A container's status as the pod's status shows it: its state, readiness, restarts, the
//! previous run and the `terminated` object of a container that ended.

use super::containers::PodContainer;
use crate::runtime::podnet::PodExit;
use serde_json::{json, Value};

/// A container's state.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum State {
    /// Not running: reason and message ("" for none).
    Waiting(String, String),
    /// Running since (RFC 3339).
    Running(String),
    /// Ended: the `terminated` object.
    Terminated(Value),
}

impl State {
    fn json(&self) -> Value {
        match self {
            State::Waiting(reason, m) if m.is_empty() => json!({"waiting": {"reason": reason}}),
            State::Waiting(reason, m) => json!({"waiting": {"reason": reason, "message": m}}),
            State::Running(at) => json!({"running": {"startedAt": at}}),
            State::Terminated(t) => json!({"terminated": t}),
        }
    }
}

/// What a container's entry in the pod's status says.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct CStatus {
    pub(super) state: State,
    pub(super) ready: bool,
    /// Running and its startup probe (if any) passed.
    pub(super) started: bool,
    pub(super) restarts: i64,
    /// `{"terminated": ...}` of the previous run; Null before the first restart.
    pub(super) last_state: Value,
    pub(super) container_id: Option<String>,
    pub(super) image_id: String,
}

impl CStatus {
    /// Not started yet, waiting with `reason`.
    pub(super) fn waiting(reason: &str) -> CStatus {
        CStatus {
            state: State::Waiting(reason.to_string(), String::new()),
            ready: false,
            started: false,
            restarts: 0,
            last_state: Value::Null,
            container_id: None,
            image_id: String::new(),
        }
    }

    pub(super) fn with_state(self, state: State) -> CStatus {
        CStatus { state, ..self }
    }

    pub(super) fn is_running(&self) -> bool {
        matches!(self.state, State::Running(_))
    }

    pub(super) fn json(&self, c: &PodContainer) -> Value {
        let mut cs = json!({
            "name": c.name, "ready": self.ready, "restartCount": self.restarts,
            "started": self.started, "image": c.reference, "imageID": self.image_id,
            "state": self.state.json(),
        });
        if let Some(cid) = &self.container_id {
            cs["containerID"] = json!(cid);
        }
        if !self.last_state.is_null() {
            cs["lastState"] = self.last_state.clone();
        }
        cs
    }
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
