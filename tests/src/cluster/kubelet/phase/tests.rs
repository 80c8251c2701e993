use super::*;
use serde_json::{json, Value};

fn st(state: State, started: bool, last: Value) -> CStatus {
    CStatus {
        ready: started && matches!(state, State::Running(_)),
        started,
        last_state: last,
        ..CStatus::waiting("x")
    }
    .with_state(state)
}

fn waiting() -> CStatus {
    CStatus::waiting("PodInitializing")
}

fn running() -> CStatus {
    st(State::Running("t".into()), true, Value::Null)
}

fn ended(code: i64) -> CStatus {
    st(
        State::Terminated(json!({"exitCode": code})),
        false,
        Value::Null,
    )
}

fn views<'a>(cs: &'a [(Kind, &'a str, CStatus)]) -> Vec<View<'a>> {
    cs.iter()
        .map(|(kind, name, st)| View {
            kind: *kind,
            name,
            st,
        })
        .collect()
}

#[test]
fn init_containers_keep_the_pod_pending_and_a_failure_fails_it_under_never() {
    let cs = [
        (Kind::Init, "init", running()),
        (Kind::Regular, "main", waiting()),
    ];
    let v = views(&cs);
    assert_eq!(phase(&v, "Never", false), "Pending");
    let c = initialized(&v, "Pending");
    assert_eq!(
        (c.status, c.reason, c.message.as_str()),
        (
            false,
            "ContainersNotInitialized",
            "containers with incomplete status: [init]"
        )
    );
    let cs = [
        (Kind::Init, "init", ended(1)),
        (Kind::Regular, "main", waiting()),
    ];
    assert_eq!(phase(&views(&cs), "Never", false), "Failed");
    assert_eq!(phase(&views(&cs), "OnFailure", false), "Pending");
    let cs = [
        (Kind::Init, "init", ended(0)),
        (Kind::Regular, "main", running()),
    ];
    let v = views(&cs);
    assert_eq!(phase(&v, "Never", false), "Running");
    assert_eq!(initialized(&v, "Running"), Cond::ok());
    assert_eq!(containers_ready(&v, "Running"), Cond::ok());
}

#[test]
fn sidecars_count_for_readiness_not_for_completion() {
    let unstarted = st(State::Running("t".into()), false, Value::Null);
    let cs = [
        (Kind::Sidecar, "side", unstarted),
        (Kind::Regular, "main", waiting()),
    ];
    assert_eq!(phase(&views(&cs), "Never", false), "Pending");
    let cs = [
        (Kind::Sidecar, "side", running()),
        (Kind::Regular, "main", ended(0)),
    ];
    let v = views(&cs);
    assert_eq!(phase(&v, "Never", false), "Running");
    assert_eq!(
        phase(&v, "Never", true),
        "Running",
        "until the sidecar is stopped"
    );
    let cs = [
        (Kind::Sidecar, "side", ended(137)),
        (Kind::Regular, "main", ended(0)),
    ];
    let v = views(&cs);
    assert_eq!(phase(&v, "Never", true), "Succeeded");
    assert_eq!(initialized(&v, "Succeeded").reason, "PodCompleted");
    let unready = st(State::Running("t".into()), true, Value::Null);
    let cs = [
        (
            Kind::Sidecar,
            "side",
            CStatus {
                ready: false,
                ..unready
            },
        ),
        (Kind::Regular, "a", running()),
        (Kind::Regular, "b", waiting()),
    ];
    assert_eq!(
        containers_ready(&views(&cs), "Running").message,
        "containers with unready status: [side b]"
    );
}

#[test]
fn restart_policies_decide_an_ended_pod() {
    let cs = [
        (Kind::Regular, "a", ended(0)),
        (Kind::Regular, "b", ended(2)),
    ];
    let v = views(&cs);
    assert_eq!(phase(&v, "Never", false), "Failed");
    assert_eq!(phase(&v, "OnFailure", false), "Running");
    assert_eq!(phase(&v, "Always", false), "Running");
    let backing_off = CStatus {
        last_state: json!({"terminated": {"exitCode": 1}}),
        ..CStatus::waiting("CrashLoopBackOff")
    };
    let cs = [(Kind::Regular, "a", backing_off)];
    assert_eq!(phase(&views(&cs), "Always", false), "Running");
}
