use std::cell::RefCell;
use std::sync::mpsc::{channel, Receiver};

use super::*;
use crate::callbacks::Raw;

#[derive(Default)]
struct FakeAsker {
    asked: RefCell<Vec<(u64, String)>>,
    refuse: bool,
}

impl Asker for FakeAsker {
    fn ask_hosts(&self, key: u64, nspace: &str) -> bool {
        self.asked.borrow_mut().push((key, nspace.to_owned()));
        !self.refuse
    }
    fn status_name(&self, status: i32) -> String {
        format!("S{status}")
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
