//! The rounds' state machine against a stand-in for PRRTE's daemon states: what is reported for
//! each outcome, in each phase, over more than one round.
use super::*;
use crate::launch::targets::PodAddr;
use std::cell::RefCell;
use std::net::Ipv4Addr;

const URI: &str = "prte-x-1@0.0;tcp4://10.250.0.2:7120";

/// PRRTE as far as the rounds see it: the daemons' states, updated as the PLM's actions would.
#[derive(Default)]
struct Prrte {
    states: RefCell<BTreeMap<u32, DaemonState>>,
    exit_status: RefCell<i32>,
}

impl DaemonStates for Prrte {
    fn state(&self, vpid: u32) -> Option<DaemonState> {
        self.states.borrow().get(&vpid).copied()
    }
}

impl Prrte {
    fn set(&self, vpid: u32, state: DaemonState) {
        self.states.borrow_mut().insert(vpid, state);
    }

    /// Carries out what PRRTE's state would show at once (the PLM marks a failed daemon
    /// itself); returns the actions.
    fn apply(&self, actions: Vec<Action>) -> Vec<Action> {
        for a in &actions {
            match a {
                Action::FailDaemon(v) => self.set(*v, DaemonState::FailedToStart),
                Action::SetExitStatus(s) => *self.exit_status.borrow_mut() = *s,
                _ => {}
            }
        }
        actions
    }
}

fn pods() -> PodTable {
    let mut t = PodTable::new();
    for i in 0..8u8 {
        t.record(
            &format!("w-{i}"),
            PodAddr {
                pod: format!("job-{i}-xyz"),
                namespace: "ns".into(),
                ip: Ipv4Addr::new(10, 250, 0, 10 + i),
            },
        );
    }
    t
}

fn params() -> PlmParams {
    PlmParams {
        secret_file: None,
        agent_port: 7117,
        launch_timeout: 4,
        connect_timeout: 2,
        heartbeat_interval: 2,
        heartbeat_misses: 4,
        insecure: true,
        preempt_signal: None,
        priority: 0,
    }
}

fn prted() -> PrtedTemplate {
    let argv: Vec<String> = ["prted", "--prtemca", "ess_base_vpid", "<template>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    PrtedTemplate::from_prrte(&argv, 3).unwrap()
}

/// Nodes `w-<vpid>` for the given vpids.
fn nodes(vpids: &[u32]) -> Vec<DaemonNode> {
    vpids
        .iter()
        .map(|&v| DaemonNode {
            vpid: v,
            name: format!("w-{v}"),
            raw_name: Some(format!("w-{v}")),
        })
        .collect()
}

fn begin_with(rounds: &mut Rounds, params: &PlmParams, vpids: &[u32]) -> Begun {
    let (pods, prted) = (pods(), prted());
    rounds.begin(RoundRequest {
        params,
        prted: &prted,
        env: vec![
            ("PRTE_MCA_prte_if_include".into(), "10.250.0.0/24".into()),
            ("PRTE_MCA_plm".into(), "k8s".into()),
            ("HOME".into(), "/root".into()),
        ],
        server_uri: Some(URI.into()),
        nodes: nodes(vpids),
        pods: &pods,
    })
}

/// Begins a round that launches; its generation.
fn begin(rounds: &mut Rounds, vpids: &[u32]) -> u64 {
    match begin_with(rounds, &params(), vpids).start {
        Start::Launch(l) => l.generation,
        other => panic!("expected a launch, got {other:?}"),
    }
}

fn started(id: u32) -> LaunchEvent {
    LaunchEvent::Started {
        id,
        pod: format!("job-{id}-xyz"),
        pid: 100 + id,
    }
}

fn failed(id: u32, reason: &str) -> LaunchEvent {
    LaunchEvent::Failed {
        id,
        pod: format!("job-{id}-xyz"),
        reason: reason.into(),
    }
}

fn exited(id: u32, status: ExitDesc) -> LaunchEvent {
    LaunchEvent::Exited {
        id,
        pod: format!("job-{id}-xyz"),
        status,
    }
}

fn lost() -> ExitDesc {
    ExitDesc::ConnectionLost("connection reset".into())
}

/// The error boxes among `actions`, as (title, body).
fn errors(actions: &[Action]) -> Vec<(String, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ReportError { title, body } => Some((title.clone(), body.clone())),
            _ => None,
        })
        .collect()
}

/// Every action except the error boxes.
fn effects(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::ReportError { .. }))
        .cloned()
        .collect()
}

#[test]
fn a_round_launches_every_node_through_its_pods_agent() {
    let mut rounds = Rounds::new();
    let begun = begin_with(&mut rounds, &params(), &[1, 2]);
    assert_eq!(
        begun.actions,
        vec![verbose(
            1,
            "plm:k8s: launching 2 daemons through their pods' agents"
        )]
    );
    let Start::Launch(launch) = begun.start else {
        panic!("{:?}", begun.start)
    };
    assert_eq!(launch.generation, 1);
    assert_eq!(launch.startup_timeout, Duration::from_secs(4));
    assert_eq!(launch.options.request_timeout, Duration::from_secs(4));
    assert_eq!(launch.options.connect_timeout, Duration::from_secs(2));
    assert!(launch.options.secret.is_none());
    let (target, request) = &launch.targets[1];
    assert_eq!(
        target,
        &LaunchTarget {
            id: 2,
            pod: "job-2-xyz".into(),
            addr: "10.250.0.12:7117".parse().unwrap(),
        }
    );
    assert_eq!(request.argv, vec!["--prtemca", "ess_base_vpid", "2"]);
    assert_eq!(
        request.env,
        vec![("PRTE_MCA_prte_if_include".into(), "10.250.0.0/24".into())],
        "only MCA settings, less our own selections"
    );
    assert_eq!(request.dvm_uri.as_deref(), Some(URI));
    assert_eq!(launch.targets[0].0.id, 1);
}

#[test]
fn success_reports_each_daemon_started_and_nothing_else() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2]);
    for id in [1, 2] {
        prrte.set(id, DaemonState::Starting);
        let got = rounds.on_event(g, started(id), &prrte);
        assert_eq!(
            got,
            vec![verbose(
                1,
                format!(
                    "plm:k8s: daemon {id} started in pod job-{id}-xyz (node w-{id}) as pid {}",
                    100 + id
                )
            )]
        );
        prrte.set(id, DaemonState::Running);
    }
    assert!(rounds.on_timeout(g, &prrte).is_empty(), "all reported back");
    // A daemon ending normally while the DVM runs is not a failure.
    assert!(rounds
        .on_event(g, exited(1, ExitDesc::Code(0)), &prrte)
        .is_empty());
    assert_eq!(*prrte.exit_status.borrow(), 0);
}

#[test]
fn a_failed_agent_is_named_and_its_daemon_failed() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2]);
    prrte.set(1, DaemonState::Starting);
    prrte.set(2, DaemonState::Starting);
    let got = prrte.apply(rounds.on_event(g, failed(2, "secret mismatch"), &prrte));
    assert_eq!(
        errors(&got),
        vec![(
            "The k8s PLM component could not start PRRTE's daemon in pod job-2-xyz.".into(),
            "Daemon 2 (node w-2): secret mismatch".into()
        )]
    );
    assert_eq!(
        effects(&got),
        vec![Action::SetExitStatus(1), Action::FailDaemon(2)]
    );
    // Failed once is failed once: a daemon PRRTE already knows failed is not failed again.
    let again = rounds.on_event(g, failed(2, "again"), &prrte);
    assert_eq!(errors(&again).len(), 1);
    assert!(effects(&again).is_empty(), "{again:?}");
    // The timeout names only the daemon that did not fail already.
    let t = rounds.on_timeout(g, &prrte);
    let e = errors(&t);
    assert_eq!(e.len(), 1);
    assert!(
        e[0].1.contains("pod job-1-xyz (node w-1, daemon 1)"),
        "{e:?}"
    );
    assert!(!e[0].1.contains("job-2-xyz"), "{e:?}");
    assert_eq!(
        effects(&t),
        vec![Action::SetExitStatus(1), Action::FailDaemon(1)]
    );
}

#[test]
fn a_daemon_exiting_before_it_reported_back_is_failed_once() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1]);
    prrte.set(1, DaemonState::Starting);
    rounds.on_event(g, started(1), &prrte);
    let got = prrte.apply(rounds.on_event(g, exited(1, ExitDesc::Code(1)), &prrte));
    assert_eq!(
        errors(&got),
        vec![(
            "PRRTE's daemon in pod job-1-xyz exited before it reported back.".into(),
            "Daemon 1 (node w-1): exit code 1. Check the pod's agent log for prted's output."
                .into()
        )]
    );
    assert_eq!(
        effects(&got),
        vec![Action::SetExitStatus(1), Action::FailDaemon(1)]
    );
    // A daemon PRRTE does not know is named, with nothing to fail, and named once.
    let g2 = begin(&mut rounds, &[2]);
    let got = rounds.on_event(g2, exited(2, ExitDesc::Code(2)), &prrte);
    assert_eq!(errors(&got).len(), 1);
    assert!(effects(&got).is_empty(), "{got:?}");
    assert!(rounds
        .on_event(g2, exited(2, ExitDesc::Code(2)), &prrte)
        .is_empty());
}

#[test]
fn a_lost_daemon_ends_the_dvm_naming_its_pod() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2, 3]);
    for id in [1, 2, 3] {
        prrte.set(id, DaemonState::Running);
    }
    let got = prrte.apply(rounds.on_event(g, exited(1, lost()), &prrte));
    assert_eq!(
        got,
        vec![
            Action::SetExitStatus(1),
            report(
                "PRRTE's daemon in pod job-1-xyz ended while the DVM was running.".into(),
                "Daemon 1 (node w-1): agent connection lost: connection reset. PRRTE will now \
                 shut the DVM down."
                    .into()
            ),
            Action::LostDaemon(1),
        ]
    );
    // Killed: reported, but PRRTE learns of the loss from its own connection.
    let got = rounds.on_event(g, exited(2, ExitDesc::Signal(9)), &prrte);
    assert_eq!(effects(&got), vec![Action::SetExitStatus(1)]);
    assert!(errors(&got)[0].1.contains("killed by signal 9 (SIGKILL)"));
    // A lost connection of a daemon PRRTE already knows ended is only reported.
    prrte.set(3, DaemonState::Ended);
    let got = rounds.on_event(g, exited(3, lost()), &prrte);
    assert_eq!(effects(&got), vec![Action::SetExitStatus(1)]);
}

/// prted exits 0 on its agent's SIGTERM when the pod is deleted or evicted: still a loss the
/// DVM cannot go on without, named with its cause; and in every phase before the final sweep.
#[test]
fn a_daemon_stopped_because_its_pod_was_told_to_end_is_named() {
    let told = |code| ExitDesc::of_exited(Some(code), None, Some(15)).unwrap();
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2, 3, 4]);
    for id in [1, 2, 3, 4] {
        prrte.set(id, DaemonState::Running);
    }
    let got = prrte.apply(rounds.on_event(g, exited(1, told(0)), &prrte));
    assert_eq!(
        got,
        vec![
            Action::SetExitStatus(1),
            report(
                "PRRTE's daemon in pod job-1-xyz ended while the DVM was running.".into(),
                "Daemon 1 (node w-1): its pod was told to end (SIGTERM: deleted, evicted or \
                 preempted) and its agent stopped it (exit code 0). PRRTE will now shut the DVM \
                 down."
                    .into()
            ),
        ]
    );
    // The notice of pod 3's end comes while the DVM runs (the agent holds prted for the grace
    // period); PRRTE then notices daemons 2 and 3 end before their agents' reports arrive: both
    // named, pod 3's end as a cause, pod 2's as the likely one.
    let preempt = LaunchEvent::Preempt {
        id: 3,
        pod: "job-3-xyz".into(),
        seconds: 24,
    };
    assert!(!rounds.on_event(g, preempt, &prrte).is_empty());
    rounds.shutting_down();
    let got = rounds.on_event(g, exited(2, told(0)), &prrte);
    assert_eq!(effects(&got), vec![Action::SetExitStatus(1)]);
    assert_eq!(
        errors(&got)[0].0,
        "PRRTE's daemon in pod job-2-xyz ended as the DVM shut down."
    );
    let got = rounds.on_event(g, exited(3, told(1)), &prrte);
    assert_eq!(
        errors(&got),
        vec![(
            "PRRTE's daemon in pod job-3-xyz ended while the DVM was running.".into(),
            "Daemon 3 (node w-3): its pod was told to end (SIGTERM: deleted, evicted or \
             preempted) and its agent stopped it (exit code 1). PRRTE is shutting the DVM down."
                .into()
        )]
    );
    // After the final sweep too: the launcher's own kill is never reported so.
    rounds.final_sweep();
    let got = rounds.on_event(g, exited(4, told(0)), &prrte);
    assert!(
        errors(&got)[0].1.contains("its pod was told to end"),
        "{got:?}"
    );
    rounds.finalized();
    assert!(rounds.on_event(g, exited(4, told(0)), &prrte).is_empty());
}

#[test]
fn the_startup_timeout_names_the_missing_pods_and_fails_their_daemons() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[0, 1, 2, 3]);
    prrte.set(0, DaemonState::Running);
    prrte.set(1, DaemonState::Starting);
    prrte.set(3, DaemonState::Reported);
    // Daemon 2 is not in PRRTE's daemon job: named, nothing to fail.
    let got = prrte.apply(rounds.on_timeout(g, &prrte));
    let e = errors(&got);
    assert_eq!(e.len(), 1, "{got:?}");
    assert_eq!(
        e[0].0,
        "PRRTE's daemons in 3 pod(s) did not report back within 4 s."
    );
    let lines: Vec<&str> = e[0].1.lines().collect();
    assert_eq!(
        &lines[..3],
        [
            "  pod job-1-xyz (node w-1, daemon 1)",
            "  pod job-2-xyz (node w-2, daemon 2)",
            "  pod job-3-xyz (node w-3, daemon 3)",
        ]
    );
    assert!(
        e[0].1.contains("Raise plm_k8s_launch_timeout"),
        "{}",
        e[0].1
    );
    assert_eq!(
        effects(&got),
        vec![
            Action::SetExitStatus(1),
            Action::FailDaemon(1),
            Action::SetExitStatus(1),
            Action::FailDaemon(3),
        ]
    );
    // Each missing daemon is failed once.
    assert!(rounds.on_timeout(g, &prrte).is_empty());
    // A timeout of a round that does not exist is nothing.
    assert!(rounds.on_timeout(g + 1, &prrte).is_empty());
}

#[test]
fn shutting_down_reports_only_abnormal_ends() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2, 3, 4]);
    prrte.set(1, DaemonState::Starting);
    for id in [2, 3, 4] {
        prrte.set(id, DaemonState::Running);
    }
    rounds.shutting_down();
    assert_eq!(rounds.phase(), Phase::ShuttingDown);
    assert!(rounds.on_event(g, started(1), &prrte).is_empty());
    assert!(rounds.on_event(g, failed(1, "late"), &prrte).is_empty());
    assert!(
        rounds.on_timeout(g, &prrte).is_empty(),
        "no timeout while shutting down"
    );
    assert!(rounds
        .on_event(g, exited(2, ExitDesc::Code(0)), &prrte)
        .is_empty());
    // SIGTERM from PRRTE's own shutdown is still abnormal before the final sweep: it may be
    // what ended the DVM.
    let got = rounds.on_event(g, exited(3, ExitDesc::Signal(15)), &prrte);
    assert_eq!(effects(&got), vec![Action::SetExitStatus(1)]);
    let got = rounds.on_event(g, exited(4, lost()), &prrte);
    assert_eq!(
        effects(&got),
        vec![Action::SetExitStatus(1), Action::LostDaemon(4)]
    );
}

/// `pterm` halts a DVM of more than 64 daemons: those below another daemon in PRRTE's routing
/// tree exit with code 1 when their parent relayed the halt and ended first. That is not a
/// failure; other ends still are, and after a loss nothing is taken for a halt.
#[test]
fn a_halt_with_no_loss_before_it_takes_exit_code_1_as_expected() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2, 3, 4]);
    for id in [1, 2, 3, 4] {
        prrte.set(id, DaemonState::Running);
    }
    // Not ordered yet: nothing changes.
    rounds.prrte_state(false, false);
    assert_eq!(rounds.phase(), Phase::Running);
    rounds.prrte_state(true, false);
    assert_eq!(rounds.phase(), Phase::ShuttingDown);
    let got = rounds.on_event(g, exited(1, ExitDesc::Code(1)), &prrte);
    assert!(errors(&got).is_empty(), "{got:?}");
    assert!(
        !got.iter().any(|a| matches!(a, Action::SetExitStatus(_))),
        "{got:?}"
    );
    assert!(
        format!("{got:?}").contains("exited with code 1 as the DVM halted"),
        "{got:?}"
    );
    assert!(rounds
        .on_event(g, exited(2, ExitDesc::Code(0)), &prrte)
        .is_empty());
    // A signal or another code is still abnormal.
    let got = rounds.on_event(g, exited(3, ExitDesc::Signal(9)), &prrte);
    assert_eq!(effects(&got)[0], Action::SetExitStatus(1), "{got:?}");
    let got = rounds.on_event(g, exited(4, ExitDesc::Code(3)), &prrte);
    assert!(errors(&got)[0].1.contains("exit code 3"), "{got:?}");

    // Ordered after a daemon was lost (the job aborted): exit code 1 is reported as before.
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2]);
    for id in [1, 2] {
        prrte.set(id, DaemonState::Running);
    }
    rounds.prrte_state(true, true);
    let got = rounds.on_event(g, exited(1, ExitDesc::Code(1)), &prrte);
    assert_eq!(effects(&got), vec![Action::SetExitStatus(1)], "{got:?}");
    assert!(errors(&got)[0].1.contains("exit code 1"), "{got:?}");
}

#[test]
fn after_the_final_sweep_our_own_stops_are_not_reported() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2, 3, 4]);
    for id in [1, 2, 3, 4] {
        prrte.set(id, DaemonState::Running);
    }
    rounds.shutting_down();
    rounds.final_sweep();
    rounds.shutting_down(); // phases only advance
    assert_eq!(rounds.phase(), Phase::FinalSweep);
    assert!(rounds
        .on_event(g, exited(1, ExitDesc::Signal(15)), &prrte)
        .is_empty());
    assert!(rounds
        .on_event(g, exited(2, ExitDesc::ClosedByLauncher), &prrte)
        .is_empty());
    let got = rounds.on_event(g, exited(3, ExitDesc::Signal(9)), &prrte);
    assert!(errors(&got)[0].1.contains("killed by signal 9"), "{got:?}");
    let got = rounds.on_event(g, exited(4, ExitDesc::Code(3)), &prrte);
    assert!(errors(&got)[0].1.contains("exit code 3"), "{got:?}");
}

/// A pod deleted outright: PRRTE may notice its daemon's loss (and shut down) before the agent's
/// closed connection is read, which then comes during the final sweep. It is still reported,
/// naming the pod; only the launcher's own closing is ours. A daemon that exits non-zero
/// while PRRTE shuts down is named as possibly a consequence.
#[test]
fn a_lost_agent_read_during_the_final_sweep_is_still_named() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1, 2]);
    for id in [1, 2] {
        prrte.set(id, DaemonState::Running);
    }
    rounds.shutting_down();
    let got = rounds.on_event(g, exited(1, ExitDesc::Code(1)), &prrte);
    let e = errors(&got);
    assert_eq!(
        e[0].0,
        "PRRTE's daemon in pod job-1-xyz ended abnormally as the DVM shut down."
    );
    assert!(e[0].1.contains("exit code 1") && e[0].1.contains("because of it"));
    rounds.final_sweep();
    prrte.set(2, DaemonState::Ended);
    let got = rounds.on_event(g, exited(2, lost()), &prrte);
    let e = errors(&got);
    assert_eq!(e.len(), 1, "{got:?}");
    assert!(e[0].0.contains("pod job-2-xyz"), "{got:?}");
    assert!(e[0].1.contains("agent connection lost: connection reset"));
    // PRRTE knows it ended: nothing more to tell PRRTE.
    assert_eq!(effects(&got), vec![Action::SetExitStatus(1)]);
}

#[test]
fn nothing_is_reported_after_finalize() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1]);
    prrte.set(1, DaemonState::Running);
    rounds.finalized();
    assert_eq!(rounds.phase(), Phase::Finalized);
    assert!(rounds
        .on_event(g, exited(1, ExitDesc::Signal(9)), &prrte)
        .is_empty());
    assert!(rounds.on_event(g, failed(1, "x"), &prrte).is_empty());
    assert!(rounds.on_timeout(g, &prrte).is_empty());
}

#[test]
fn a_second_round_adds_daemons_while_the_first_rounds_run() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let first = begin(&mut rounds, &[1, 2]);
    for id in [1, 2] {
        prrte.set(id, DaemonState::Running);
    }
    // Nodes added to the running DVM: only they are in the second round.
    let begun = begin_with(&mut rounds, &params(), &[3]);
    assert_eq!(
        begun.actions,
        vec![verbose(
            1,
            "plm:k8s: launching 1 daemons through their pods' agents"
        )]
    );
    let Start::Launch(launch) = begun.start else {
        panic!("{:?}", begun.start)
    };
    let second = launch.generation;
    assert_ne!(second, first);
    let ids: Vec<u32> = launch.targets.iter().map(|(t, _)| t.id).collect();
    assert_eq!(ids, vec![3]);
    prrte.set(3, DaemonState::Starting);
    let got = rounds.on_event(second, started(3), &prrte);
    assert!(
        matches!(&got[..], [Action::Verbose { message, .. }] if message.contains("(node w-3)"))
    );
    // The first round's timeout finds its daemons running, whatever the second round does.
    assert!(rounds.on_timeout(first, &prrte).is_empty());
    // The second round's timeout names only its own daemon.
    let got = prrte.apply(rounds.on_timeout(second, &prrte));
    let e = errors(&got);
    assert_eq!(
        e[0].0,
        "PRRTE's daemons in 1 pod(s) did not report back within 4 s."
    );
    assert!(
        e[0].1.starts_with("  pod job-3-xyz (node w-3, daemon 3)\n"),
        "{}",
        e[0].1
    );
    assert_eq!(
        effects(&got),
        vec![Action::SetExitStatus(1), Action::FailDaemon(3)]
    );
    // A first-round daemon lost meanwhile is reported with its own node.
    let got = rounds.on_event(first, exited(2, lost()), &prrte);
    assert!(
        errors(&got)[0].1.starts_with("Daemon 2 (node w-2)"),
        "{got:?}"
    );
    assert_eq!(
        effects(&got),
        vec![Action::SetExitStatus(1), Action::LostDaemon(2)]
    );
}

#[test]
fn rounds_that_cannot_start_say_why_and_open_no_generation() {
    let mut rounds = Rounds::new();
    // A node no pod is known for.
    let (pods, prted) = (pods(), prted());
    let begun = rounds.begin(RoundRequest {
        params: &params(),
        prted: &prted,
        env: vec![],
        server_uri: Some("prte-x-1@0.0;tcp4://127.0.0.1:7120".into()),
        nodes: vec![DaemonNode {
            vpid: 1,
            name: "elsewhere".into(),
            raw_name: None,
        }],
        pods: &pods,
    });
    assert_eq!(
        begun.actions,
        vec![verbose(1, NO_DVM_URI)],
        "loopback is not published"
    );
    assert!(
        matches!(&begun.start, Start::Refused(e) if e.contains("node(s) elsewhere")),
        "{:?}",
        begun.start
    );
    // Bad settings.
    let mut bad = params();
    bad.agent_port = 70000;
    let begun = begin_with(&mut rounds, &bad, &[1]);
    assert!(begun.actions.is_empty());
    assert!(
        matches!(&begun.start, Start::Refused(e) if e.contains("plm_k8s_agent_port")),
        "{:?}",
        begun.start
    );
    // Nothing to launch.
    let begun = begin_with(&mut rounds, &params(), &[]);
    assert!(begun.actions.is_empty());
    assert!(matches!(begun.start, Start::Nothing), "{:?}", begun.start);
    // The first round that launches is the first generation.
    assert_eq!(begin(&mut rounds, &[1]), 1);
}

fn preempt(id: u32, seconds: u64) -> LaunchEvent {
    LaunchEvent::Preempt {
        id,
        pod: format!("job-{id}-xyz"),
        seconds,
    }
}

fn preempts(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Preempt { .. }))
        .cloned()
        .collect()
}

#[test]
fn the_first_pod_told_to_end_tells_the_ranks_once_with_the_sites_signal() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let mut s = params();
    s.preempt_signal = Some("SIGUSR1".into());
    let g = match begin_with(&mut rounds, &s, &[1, 2]).start {
        Start::Launch(l) => l.generation,
        other => panic!("expected a launch, got {other:?}"),
    };
    let first = rounds.on_event(g, preempt(2, 24), &prrte);
    assert_eq!(
        preempts(&first),
        vec![Action::Preempt {
            pod: "job-2-xyz".into(),
            seconds: 24,
            signal: Some(10),
        }]
    );
    // The watch of our own pod reports with any generation; the ranks were told already.
    assert!(preempts(&rounds.on_event(0, preempt(0, 24), &prrte)).is_empty());
    assert!(preempts(&rounds.on_event(g, preempt(1, 23), &prrte)).is_empty());
}

#[test]
fn a_notice_while_shutting_down_is_not_passed_on() {
    let (mut rounds, prrte) = (Rounds::new(), Prrte::default());
    let g = begin(&mut rounds, &[1]);
    rounds.shutting_down();
    assert!(rounds.on_event(g, preempt(1, 24), &prrte).is_empty());
}
