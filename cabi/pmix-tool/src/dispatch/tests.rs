use std::cell::RefCell;
use std::sync::mpsc::{channel, Receiver};

use super::*;
use crate::callbacks::{ProbeAnswer, Raw};

#[derive(Default)]
struct FakeAsker {
    asked: RefCell<Vec<(u64, String)>>,
    probed: RefCell<Vec<(u64, String)>>,
    warnings: RefCell<Vec<String>>,
    refuse: bool,
}

impl Asker for FakeAsker {
    fn ask_hosts(&self, key: u64, nspace: &str) -> bool {
        self.asked.borrow_mut().push((key, nspace.to_owned()));
        !self.refuse
    }
    fn ask_state(&self, key: u64, nspace: &str) -> bool {
        self.probed.borrow_mut().push((key, nspace.to_owned()));
        !self.refuse
    }
    fn status_name(&self, status: i32) -> String {
        format!("S{status}")
    }
    fn warn(&self, text: &str) {
        self.warnings.borrow_mut().push(text.to_owned());
    }
}

fn registered(d: &mut Dispatcher, a: &FakeAsker, keys: &[u64]) -> Receiver<(u64, Update)> {
    let (tx, rx) = channel();
    for &key in keys {
        d.handle(
            Msg::Register {
                key,
                tx: tx.clone(),
            },
            a,
        );
    }
    rx
}

fn spawned(key: u64, ns: &str) -> Msg {
    Msg::Raw(Raw::Spawned {
        key,
        status: 0,
        nspace: ns.into(),
    })
}

fn end(ns: &str, status: i32) -> Msg {
    Msg::Raw(Raw::JobEnd {
        nspace: ns.into(),
        status,
        rank: Some(0),
        message: None,
    })
}

fn hosts(key: u64, h: &[&str]) -> Msg {
    Msg::Raw(Raw::Hosts {
        key,
        hosts: Some(h.iter().map(|s| s.to_string()).collect()),
    })
}

fn ended(status: i32, pods: &[&str]) -> Update {
    Update::Ended(Ended {
        status,
        rank: Some(0),
        message: None,
        pods: pods.iter().map(|s| s.to_string()).collect(),
    })
}

#[test]
fn a_task_ends_once_its_end_and_hosts_are_known_in_either_order() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let rx = registered(&mut d, &a, &[1, 2]);
    d.handle(spawned(1, "j@1"), &a);
    d.handle(spawned(2, "j@2"), &a);
    assert_eq!(a.asked.borrow().len(), 2);
    d.handle(end("j@1", 0), &a);
    d.handle(hosts(2, &["p1"]), &a);
    d.handle(hosts(1, &["p0"]), &a);
    d.handle(end("j@2", 3), &a);
    let got: Vec<_> = rx.try_iter().collect();
    assert_eq!(
        got,
        vec![
            (
                1,
                Update::Started {
                    nspace: "j@1".into()
                }
            ),
            (
                2,
                Update::Started {
                    nspace: "j@2".into()
                }
            ),
            (1, ended(0, &["p0"])),
            (2, ended(3, &["p1"])),
        ]
    );
    assert!(d.tasks.is_empty() && d.by_nspace.is_empty());
}

#[test]
fn an_end_before_the_spawn_answer_is_kept_for_it() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let rx = registered(&mut d, &a, &[7]);
    d.handle(end("j@7", 137), &a);
    d.handle(spawned(7, "j@7"), &a);
    d.handle(hosts(7, &["p3"]), &a);
    let got: Vec<_> = rx.try_iter().map(|(_, u)| u).collect();
    assert_eq!(got.last(), Some(&ended(137, &["p3"])));
    assert!(d.early.is_empty());
}

#[test]
fn a_refused_spawn_and_an_unaskable_proc_table_still_end_the_task() {
    let (mut d, a) = (
        Dispatcher::default(),
        FakeAsker {
            refuse: true,
            ..Default::default()
        },
    );
    let rx = registered(&mut d, &a, &[1, 2]);
    d.handle(
        Msg::Raw(Raw::Spawned {
            key: 1,
            status: -46,
            nspace: String::new(),
        }),
        &a,
    );
    d.handle(spawned(2, "j@2"), &a);
    d.handle(end("j@2", 0), &a);
    let got: Vec<_> = rx.try_iter().collect();
    assert_eq!(
        got[0],
        (
            1,
            Update::SpawnFailed {
                status: -46,
                message: "S-46".into()
            }
        )
    );
    assert_eq!(got.last(), Some(&(2, ended(0, &[]))));
}

#[test]
fn a_lost_connection_ends_every_task_and_later_ones() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let rx = registered(&mut d, &a, &[1, 2]);
    d.handle(spawned(1, "j@1"), &a);
    d.handle(Msg::Raw(Raw::Lost { status: -61 }), &a);
    let _late = registered(&mut d, &a, &[3]);
    let mut lost: Vec<u64> = rx
        .try_iter()
        .filter(|(_, u)| matches!(u, Update::Lost { status: -61 }))
        .map(|(k, _)| k)
        .collect();
    lost.sort();
    assert_eq!(lost, vec![1, 2]);
    assert_eq!(
        _late.try_recv().ok(),
        Some((3, Update::Lost { status: -61 }))
    );
}

#[test]
fn an_end_whose_proc_table_never_comes_is_reported_after_the_grace() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let rx = registered(&mut d, &a, &[1]);
    d.handle(spawned(1, "j@1"), &a);
    d.handle(end("j@1", 0), &a);
    d.expire(Instant::now());
    assert_eq!(rx.try_iter().count(), 1, "only Started before the grace");
    d.expire(Instant::now() + HOSTS_GRACE);
    assert_eq!(rx.try_recv().ok(), Some((1, ended(0, &[]))));
}

fn output(ns: &str, text: &str) -> Msg {
    Msg::Raw(Raw::Output {
        nspace: ns.into(),
        rank: 0,
        stderr: false,
        bytes: text.as_bytes().to_vec(),
    })
}

#[test]
fn output_goes_to_its_task_before_during_and_after_its_run() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let rx = registered(&mut d, &a, &[1]);
    d.handle(output("j@1", "early"), &a);
    d.handle(spawned(1, "j@1"), &a);
    d.handle(output("j@1", "during"), &a);
    d.handle(end("j@1", 0), &a);
    d.handle(hosts(1, &["p0"]), &a);
    d.handle(output("j@1", "late"), &a);
    d.handle(output("other@9", "not ours"), &a);
    let texts: Vec<String> = rx
        .try_iter()
        .filter_map(|(k, u)| match u {
            Update::Output { bytes, .. } => {
                Some(format!("{k}:{}", String::from_utf8_lossy(&bytes)))
            }
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["1:early", "1:during", "1:late"]);
}

fn probe(key: u64, answer: ProbeAnswer) -> Msg {
    Msg::Raw(Raw::Probe { key, answer })
}

/// A started task (its proc table answered), the instant it started, and its receiver.
fn started_task(
    d: &mut Dispatcher,
    a: &FakeAsker,
    key: u64,
    ns: &str,
) -> (Instant, Receiver<(u64, Update)>) {
    let rx = registered(d, a, &[key]);
    d.handle(spawned(key, ns), a);
    let t0 = Instant::now();
    d.handle(hosts(key, &["p0"]), a);
    (t0, rx)
}

#[test]
fn a_job_that_ended_before_its_launch_was_reported_is_started_not_failed() {
    // PRRTE answers the spawn of a job that ended before its launch was processed with the
    // job's exit status; its end event carries the same.
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let rx = registered(&mut d, &a, &[1]);
    d.handle(
        Msg::Raw(Raw::Spawned {
            key: 1,
            status: 3,
            nspace: "j@1".into(),
        }),
        &a,
    );
    d.handle(end("j@1", 3), &a);
    d.handle(hosts(1, &["p2"]), &a);
    let got: Vec<_> = rx.try_iter().map(|(_, u)| u).collect();
    assert_eq!(
        got,
        vec![
            Update::Started {
                nspace: "j@1".into()
            },
            ended(3, &["p2"])
        ]
    );
}

#[test]
fn early_ends_are_dropped_oldest_first_never_all_at_once() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let t0 = Instant::now();
    let e = |s| Ended {
        status: s,
        rank: None,
        message: None,
        pods: vec![],
    };
    d.keep_early("mine@1".into(), e(0), t0);
    for i in 0..EARLY_MAX {
        d.keep_early(format!("other@{i}"), e(0), t0);
    }
    assert!(!d.early.contains_key("mine@1"), "the oldest goes first");
    assert!(d.early.contains_key("other@1") && d.early.len() == EARLY_MAX);
    d.keep_early("mine@2".into(), e(5), t0 + EARLY_KEEP);
    assert_eq!(d.early.len(), 1, "stale ends are dropped");
    let rx = registered(&mut d, &a, &[2]);
    d.handle(spawned(2, "mine@2"), &a);
    d.handle(hosts(2, &[]), &a);
    assert_eq!(
        rx.try_iter().last().map(|(_, u)| u),
        Some(Update::Ended(e(5)))
    );
}

#[test]
fn a_quiet_job_the_dvm_has_forgotten_ends_failed_with_a_warning_naming_it() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let (t0, rx) = started_task(&mut d, &a, 4, "j@4");
    d.watch(t0 + PROBE_AFTER / 2, &a);
    assert!(a.probed.borrow().is_empty(), "not asked before it is quiet");
    d.watch(t0 + PROBE_AFTER, &a);
    assert_eq!(*a.probed.borrow(), vec![(4, "j@4".to_string())]);
    d.watch(t0 + PROBE_AFTER, &a);
    assert_eq!(a.probed.borrow().len(), 1, "one question at a time");
    d.watch(t0 + PROBE_AFTER + PROBE_ANSWER_WITHIN, &a);
    assert_eq!(a.probed.borrow().len(), 2, "asked again when unanswered");
    let asked = t0 + PROBE_AFTER;
    d.probed(4, ProbeAnswer::Unknown, asked, &a);
    d.watch(asked + SETTLE / 2, &a);
    assert_eq!(
        rx.try_iter().count(),
        1,
        "only Started: its end may still come"
    );
    d.watch(asked + SETTLE, &a);
    let last = rx.try_iter().last().map(|(_, u)| u);
    let Some(Update::Ended(e)) = last else {
        panic!("{last:?}")
    };
    assert_eq!((e.status, e.pods), (END_UNKNOWN, vec!["p0".to_string()]));
    assert!(e.message.unwrap_or_default().contains("j@4"));
    let w = a.warnings.borrow();
    assert!(
        w.len() == 1 && w[0].contains("task 4") && w[0].contains("j@4"),
        "{w:?}"
    );
    assert!(d.tasks.is_empty() && d.by_nspace.is_empty());
}

#[test]
fn an_end_arriving_after_the_dvm_forgot_the_job_is_the_one_reported() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let (t0, rx) = started_task(&mut d, &a, 1, "j@1");
    d.watch(t0 + PROBE_AFTER, &a);
    d.handle(probe(1, ProbeAnswer::Unknown), &a);
    assert!(d.tasks[&1].forgotten.is_some());
    d.handle(end("j@1", 0), &a);
    d.watch(t0 + PROBE_AFTER + SETTLE, &a);
    let got: Vec<_> = rx.try_iter().map(|(_, u)| u).collect();
    assert_eq!(got.last(), Some(&ended(0, &["p0"])));
    assert_eq!(got.len(), 2);
    assert!(a.warnings.borrow().is_empty());
}

#[test]
fn a_job_the_dvm_still_runs_is_left_running_and_asked_about_less_often() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let (t0, rx) = started_task(&mut d, &a, 1, "j@1");
    let mut t = t0 + PROBE_AFTER;
    d.watch(t, &a);
    let running = || ProbeAnswer::Known {
        hosts: vec!["p0".into()],
        running: 1,
    };
    d.probed(1, running(), t, &a);
    d.watch(t + PROBE_AFTER, &a);
    assert_eq!(a.probed.borrow().len(), 1, "the gap doubled");
    t += PROBE_AFTER * 2;
    d.watch(t, &a);
    assert_eq!(a.probed.borrow().len(), 2);
    // Still held by the DVM though nothing runs: a warning, once, and still no end.
    for _ in 0..2 {
        d.probed(
            1,
            ProbeAnswer::Known {
                hosts: vec!["p0".into(), "p1".into()],
                running: 0,
            },
            t,
            &a,
        );
    }
    d.watch(t + SETTLE * 10, &a);
    assert_eq!(rx.try_iter().count(), 1, "only Started");
    let w = a.warnings.borrow();
    assert!(
        w.len() == 1 && w[0].contains("j@1") && w[0].contains("2 processes"),
        "{w:?}"
    );
}

#[test]
fn an_unanswered_spawn_is_warned_about_once() {
    let (mut d, a) = (Dispatcher::default(), FakeAsker::default());
    let _rx = registered(&mut d, &a, &[9]);
    let t0 = Instant::now();
    d.watch(t0 + SPAWN_QUIET / 2, &a);
    assert!(a.warnings.borrow().is_empty());
    d.watch(t0 + SPAWN_QUIET + Duration::from_secs(1), &a);
    d.watch(t0 + SPAWN_QUIET * 2, &a);
    let w = a.warnings.borrow();
    assert!(w.len() == 1 && w[0].contains("task 9"), "{w:?}");
    assert!(a.probed.borrow().is_empty(), "no job to ask about");
}

#[test]
fn only_live_states_count_as_running() {
    use crate::callbacks::{known, ProcInfo};
    let p = |rank, state| ProcInfo {
        rank,
        host: format!("p{rank}"),
        state,
    };
    // PRRTE 3.0.8: running 5, connected 6, ended normally 0 (undefined), killed 51.
    let a = known(vec![p(0, 5), p(1, 6), p(2, 0), p(3, 51)]);
    assert_eq!(
        a,
        ProbeAnswer::Known {
            hosts: vec!["p0".into(), "p1".into(), "p2".into(), "p3".into()],
            running: 2
        }
    );
}
