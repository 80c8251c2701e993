//! The pod's phase and its `Initialized` and `ContainersReady` conditions from its containers'
//! states, as the kubelet computes them (native sidecars included).

use super::container_status::{CStatus, State};
use super::containers::Kind;

/// One container as the phase and the conditions see it.
pub(super) struct View<'a> {
    pub(super) kind: Kind,
    pub(super) name: &'a str,
    pub(super) st: &'a CStatus,
}

/// A condition's status, reason and message.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Cond {
    pub(super) status: bool,
    pub(super) reason: &'static str,
    pub(super) message: String,
}

impl Cond {
    fn ok() -> Cond {
        Cond::with(true, "", String::new())
    }

    fn with(status: bool, reason: &'static str, message: String) -> Cond {
        Cond {
            status,
            reason,
            message,
        }
    }
}

fn exit_code(t: &serde_json::Value) -> i64 {
    t["exitCode"].as_i64().unwrap_or(0)
}

/// Whether the last run (the previous one when waiting to restart) ended in failure.
fn last_failed(st: &CStatus) -> bool {
    st.last_state
        .get("terminated")
        .is_some_and(|t| exit_code(t) != 0)
}

/// Whether a regular container has run (it is running or has ended).
fn any_regular_started(cs: &[View]) -> bool {
    cs.iter().any(|c| {
        c.kind == Kind::Regular && matches!(c.st.state, State::Running(_) | State::Terminated(_))
    })
}

/// Counts for the phase: (pending init, failed init, running, waiting, stopped, succeeded).
fn tally(cs: &[View]) -> [u32; 6] {
    let (mut pending, mut failed, mut running, mut waiting, mut stopped, mut ok) =
        (0, 0, 0, 0, 0, 0);
    for c in cs {
        match (c.kind, &c.st.state) {
            (Kind::Init, State::Running(_)) => pending += 1,
            (Kind::Init, State::Terminated(t)) => failed += u32::from(exit_code(t) != 0),
            (Kind::Init, State::Waiting(..)) if last_failed(c.st) => failed += 1,
            (Kind::Init, State::Waiting(..)) if c.st.last_state.is_null() => pending += 1,
            (Kind::Init, State::Waiting(..)) => {}
            (Kind::Sidecar, State::Running(_)) => {
                pending += u32::from(!c.st.started);
                running += 1;
            }
            (Kind::Sidecar, State::Terminated(_)) => {}
            (Kind::Sidecar, State::Waiting(..)) if c.st.last_state.is_null() => {
                pending += 1;
                waiting += 1;
            }
            (Kind::Sidecar, State::Waiting(..)) => {}
            (Kind::Regular, State::Running(_)) => running += 1,
            (Kind::Regular, State::Terminated(t)) => {
                stopped += 1;
                ok += u32::from(exit_code(t) == 0);
            }
            (Kind::Regular, State::Waiting(..)) if c.st.last_state.is_null() => waiting += 1,
            (Kind::Regular, State::Waiting(..)) => stopped += 1,
        }
    }
    [pending, failed, running, waiting, stopped, ok]
}

/// The pod's phase. `terminal`: the pod is done (no container will start again).
pub(super) fn phase(cs: &[View], restart_policy: &str, terminal: bool) -> &'static str {
    let [pending, failed, running, waiting, stopped, succeeded] = tally(cs);
    if failed > 0 && restart_policy == "Never" {
        return "Failed";
    }
    if (pending > 0 && !any_regular_started(cs)) || waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped == 0 {
        return "Pending";
    }
    match (terminal, restart_policy) {
        (true, _) | (false, "OnFailure" | "Never") if stopped == succeeded => "Succeeded",
        (true, _) | (false, "Never") => "Failed",
        _ => "Running",
    }
}

/// Go's formatting of a list of names: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

/// `Initialized`: every init container completed (a sidecar: started), or a regular container
/// has run already.
pub(super) fn initialized(cs: &[View], phase: &str) -> Cond {
    if phase == "Succeeded" {
        return Cond::with(true, "PodCompleted", String::new());
    }
    if any_regular_started(cs) {
        return Cond::ok();
    }
    let incomplete: Vec<&str> = cs
        .iter()
        .filter(|c| match (c.kind, &c.st.state) {
            (Kind::Sidecar, _) => !c.st.started,
            (Kind::Init, State::Terminated(t)) => exit_code(t) != 0,
            (Kind::Init, _) => true,
            (Kind::Regular, _) => false,
        })
        .map(|c| c.name)
        .collect();
    if incomplete.is_empty() {
        return Cond::ok();
    }
    let message = format!(
        "containers with incomplete status: {}",
        go_list(&incomplete)
    );
    Cond::with(false, "ContainersNotInitialized", message)
}

/// `ContainersReady` (and `Ready`, the pod having no readiness gates): every regular container
/// and every sidecar is ready.
pub(super) fn containers_ready(cs: &[View], phase: &str) -> Cond {
    match phase {
        "Succeeded" => return Cond::with(false, "PodCompleted", String::new()),
        "Failed" => return Cond::with(false, "PodFailed", String::new()),
        _ => {}
    }
    let unready: Vec<&str> = cs
        .iter()
        .filter(|c| c.kind != Kind::Init && !c.st.ready)
        .map(|c| c.name)
        .collect();
    if unready.is_empty() {
        return Cond::ok();
    }
    let message = format!("containers with unready status: {}", go_list(&unready));
    Cond::with(false, "ContainersNotReady", message)
}

#[cfg(test)]
mod tests;
