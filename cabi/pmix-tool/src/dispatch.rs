//! The dispatcher thread: matches what PMIx's callbacks report (by task key and job namespace)
//! to the submitted tasks and sends each task its [`Update`]s.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::{Ended, Update};

/// What the dispatcher receives: from callbacks, and from [`crate::Dvm`].
#[derive(Debug)]
pub(crate) enum Msg {
    Raw(crate::callbacks::Raw),
    /// A task about to be spawned: where its updates go.
    Register {
        key: u64,
        tx: Sender<(u64, Update)>,
    },
    /// The spawn call itself failed: forget the task.
    Forget {
        key: u64,
    },
    Stop,
}

/// What the dispatcher asks of PMIx (the proc table of a started job).
pub(crate) trait Asker {
    /// Asks where `nspace`'s ranks run; the answer comes back as `Raw::Hosts { key }`. False if
    /// the question could not be sent.
    fn ask_hosts(&self, key: u64, nspace: &str) -> bool;
    /// PMIx's name for a status.
    fn status_name(&self, status: i32) -> String;
}

/// How long a job's end waits for the proc table answer before it is reported without pods.
const HOSTS_GRACE: Duration = Duration::from_secs(5);

struct Entry {
    tx: Sender<(u64, Update)>,
    nspace: Option<String>,
    end: Option<(Ended, Instant)>,
    hosts: Option<Vec<String>>,
}

#[derive(Default)]
pub(crate) struct Dispatcher {
    tasks: HashMap<u64, Entry>,
    by_nspace: HashMap<String, u64>,
    /// Ends of jobs whose spawn answer has not come yet (or that are not ours).
    early: HashMap<String, Ended>,
    lost: Option<i32>,
    /// Output of jobs not (yet) matched to a task.
    early_output: HashMap<String, Vec<(u32, bool, Vec<u8>)>>,
    /// Ended jobs whose late output still goes to their task (the oldest forgotten first).
    ended: HashMap<String, (u64, Sender<(u64, Update)>)>,
    ended_order: std::collections::VecDeque<String>,
}

/// Bound on remembered ended jobs for late output.
const ENDED_MAX: usize = 10_000;

/// Bound on remembered ends of unknown jobs (another tool's jobs end too).
const EARLY_MAX: usize = 100_000;

impl Dispatcher {
    pub(crate) fn run(mut self, rx: Receiver<Msg>, asker: &dyn Asker) {
        loop {
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(m) => self.handle(m, asker),
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.expire(Instant::now());
        }
    }

    pub(crate) fn handle(&mut self, m: Msg, asker: &dyn Asker) {
        use crate::callbacks::Raw;
        match m {
            Msg::Register { key, tx } => {
                if let Some(status) = self.lost {
                    let _ = tx.send((key, Update::Lost { status }));
                    return;
                }
                self.tasks.insert(
                    key,
                    Entry {
                        tx,
                        nspace: None,
                        end: None,
                        hosts: None,
                    },
                );
            }
            Msg::Forget { key } => {
                self.tasks.remove(&key);
            }
            Msg::Stop => {}
            Msg::Raw(Raw::Spawned {
                key,
                status,
                nspace,
            }) => {
                let Some(e) = self.tasks.get_mut(&key) else {
                    return;
                };
                if status != 0 || nspace.is_empty() {
                    let message = asker.status_name(status);
                    let _ = e.tx.send((key, Update::SpawnFailed { status, message }));
                    self.tasks.remove(&key);
                    return;
                }
                let _ = e.tx.send((
                    key,
                    Update::Started {
                        nspace: nspace.clone(),
                    },
                ));
                e.nspace = Some(nspace.clone());
                for (rank, stderr, bytes) in self.early_output.remove(&nspace).unwrap_or_default() {
                    let _ = e.tx.send((
                        key,
                        Update::Output {
                            rank,
                            stderr,
                            bytes,
                        },
                    ));
                }
                if let Some(end) = self.early.remove(&nspace) {
                    e.end = Some((end, Instant::now()));
                }
                if !asker.ask_hosts(key, &nspace) {
                    e.hosts = Some(Vec::new());
                }
                self.by_nspace.insert(nspace, key);
                self.finish(key);
            }
            Msg::Raw(Raw::JobEnd {
                nspace,
                status,
                rank,
                message,
            }) => {
                let end = Ended {
                    status,
                    rank,
                    message,
                    pods: Vec::new(),
                };
                match self.by_nspace.get(&nspace).copied() {
                    Some(key) => {
                        if let Some(e) = self.tasks.get_mut(&key) {
                            e.end = Some((end, Instant::now()));
                        }
                        self.finish(key);
                    }
                    None => {
                        if self.early.len() >= EARLY_MAX {
                            self.early.clear();
                        }
                        self.early.insert(nspace, end);
                    }
                }
            }
            Msg::Raw(Raw::Hosts { key, hosts }) => {
                if let Some(e) = self.tasks.get_mut(&key) {
                    e.hosts = Some(hosts.unwrap_or_default());
                }
                self.finish(key);
            }
            Msg::Raw(Raw::Output {
                nspace,
                rank,
                stderr,
                bytes,
            }) => {
                let to = match self.by_nspace.get(&nspace) {
                    Some(key) => self.tasks.get(key).map(|e| (*key, e.tx.clone())),
                    None => self.ended.get(&nspace).cloned(),
                };
                match to {
                    Some((key, tx)) => {
                        let _ = tx.send((
                            key,
                            Update::Output {
                                rank,
                                stderr,
                                bytes,
                            },
                        ));
                    }
                    None => {
                        if self.early_output.len() >= EARLY_MAX {
                            self.early_output.clear();
                        }
                        self.early_output
                            .entry(nspace)
                            .or_default()
                            .push((rank, stderr, bytes));
                    }
                }
            }
            Msg::Raw(Raw::Lost { status }) => {
                self.lost = Some(status);
                for (key, e) in self.tasks.drain() {
                    let _ = e.tx.send((key, Update::Lost { status }));
                }
                self.by_nspace.clear();
            }
        }
    }

    /// Reports a task's end once both its end and its hosts are known.
    fn finish(&mut self, key: u64) {
        let done = matches!(self.tasks.get(&key), Some(e) if e.end.is_some() && e.hosts.is_some());
        if done {
            if let Some(e) = self.tasks.remove(&key) {
                self.send_end(key, e);
            }
        }
    }

    fn send_end(&mut self, key: u64, e: Entry) {
        if let Some(ns) = &e.nspace {
            self.by_nspace.remove(ns);
            if self.ended_order.len() >= ENDED_MAX {
                if let Some(old) = self.ended_order.pop_front() {
                    self.ended.remove(&old);
                }
            }
            self.ended.insert(ns.clone(), (key, e.tx.clone()));
            self.ended_order.push_back(ns.clone());
        }
        if let Some((mut end, _)) = e.end {
            end.pods = e.hosts.unwrap_or_default();
            let _ = e.tx.send((key, Update::Ended(end)));
        }
    }

    /// Ends waiting too long for their proc table are reported without pods.
    pub(crate) fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .tasks
            .iter()
            .filter(|(_, e)| {
                e.hosts.is_none()
                    && e.end
                        .as_ref()
                        .is_some_and(|(_, at)| now.duration_since(*at) >= HOSTS_GRACE)
            })
            .map(|(k, _)| *k)
            .collect();
        for key in late {
            if let Some(e) = self.tasks.remove(&key) {
                self.send_end(key, e);
            }
        }
    }
}

#[cfg(test)]
mod tests;
