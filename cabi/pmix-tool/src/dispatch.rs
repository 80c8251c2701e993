//! The dispatcher thread: matches what PMIx's callbacks report (by task key and job namespace)
//! to the submitted tasks and sends each task its [`Update`]s.
//!
//! A started job's end comes as a `PMIX_EVENT_JOB_END` event (registered for before any spawn,
//! so none comes too early to be seen; one that comes before its spawn's answer is kept for
//! it). Should one never come, a job quiet for [`PROBE_AFTER`] is asked about (its proc table,
//! from the DVM): a DVM that no longer knows the job has ended it, and if its end still has not
//! come [`SETTLE`] later the task ends as failed with an unknown status, with a warning naming
//! it. A job the DVM still holds is left running (a task's own timeout ends it), with a warning
//! when none of its processes is running any more.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::callbacks::ProbeAnswer;
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
    /// Asks the DVM about `nspace` (its proc table, fresh); the answer comes back as
    /// `Raw::Probe { key }`. False if the question could not be sent.
    fn ask_state(&self, key: u64, nspace: &str) -> bool;
    /// PMIx's name for a status.
    fn status_name(&self, status: i32) -> String;
    /// Reports something the caller should know (a task whose end had to be recovered).
    fn warn(&self, text: &str);
}

/// How long a job's end waits for the proc table answer before it is reported without pods.
const HOSTS_GRACE: Duration = Duration::from_secs(5);
/// How long a started job may be quiet (no end) before the DVM is asked about it.
pub(crate) const PROBE_AFTER: Duration = Duration::from_secs(30);
/// The longest gap between two questions about one quiet job (the gap doubles up to it).
const PROBE_GAP_MAX: Duration = Duration::from_secs(300);
/// How long after the DVM said it no longer knows a job its end event may still arrive (it is
/// sent before the job is forgotten, but may be slower than the answer).
pub(crate) const SETTLE: Duration = Duration::from_secs(20);
/// How long a question about a quiet job may go unanswered before it is asked again.
const PROBE_ANSWER_WITHIN: Duration = Duration::from_secs(60);
/// How long a spawn may go unanswered before a warning names its task.
pub(crate) const SPAWN_QUIET: Duration = Duration::from_secs(60);
/// PMIx's `PMIX_ERR_NOT_FOUND`: the status of a job whose end was recovered from the DVM's
/// not knowing it any more (its real status is lost).
pub(crate) const END_UNKNOWN: i32 = crate::ffi::PMIX_ERR_NOT_FOUND;

struct Entry {
    tx: Sender<(u64, Update)>,
    nspace: Option<String>,
    end: Option<(Ended, Instant)>,
    hosts: Option<Vec<String>>,
    /// When the task was registered (before its spawn).
    since: Instant,
    /// When the DVM is next asked about the quiet job (`None` before it started).
    next_probe: Option<Instant>,
    probe_gap: Duration,
    /// When the question about it still unanswered was asked.
    probing: Option<Instant>,
    /// When the DVM first said it no longer knows the job.
    forgotten: Option<Instant>,
    /// A warning about it was given (once a task).
    warned: bool,
}

impl Entry {
    fn new(tx: Sender<(u64, Update)>, now: Instant) -> Self {
        Self {
            tx,
            nspace: None,
            end: None,
            hosts: None,
            since: now,
            next_probe: None,
            probe_gap: PROBE_AFTER,
            probing: None,
            forgotten: None,
            warned: false,
        }
    }
}

#[derive(Default)]
pub(crate) struct Dispatcher {
    tasks: HashMap<u64, Entry>,
    by_nspace: HashMap<String, u64>,
    /// Ends of jobs whose spawn answer has not come yet (or that are not ours), with when they
    /// came, oldest first in `early_order`.
    early: HashMap<String, (Ended, Instant)>,
    early_order: std::collections::VecDeque<(String, Instant)>,
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
/// How long the end of a job not (yet) ours is kept for its spawn's answer.
const EARLY_KEEP: Duration = Duration::from_secs(600);

impl Dispatcher {
    pub(crate) fn run(mut self, rx: Receiver<Msg>, asker: &dyn Asker) {
        loop {
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(m) => self.handle(m, asker),
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.watch(Instant::now(), asker);
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
                self.tasks.insert(key, Entry::new(tx, Instant::now()));
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
                // A job that ends before its launch is reported is answered when it ends, with
                // its exit status (positive) and its namespace: it did start, and its end event
                // follows (or came). Negative statuses are the DVM's refusals and failures.
                if status < 0 || nspace.is_empty() {
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
                e.next_probe = Some(Instant::now() + e.probe_gap);
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
                if let Some((end, _)) = self.early.remove(&nspace) {
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
                    None => self.keep_early(nspace, end, Instant::now()),
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
            Msg::Raw(Raw::Probe { key, answer }) => self.probed(key, answer, Instant::now(), asker),
            Msg::Raw(Raw::Lost { status }) => {
                self.lost = Some(status);
                for (key, e) in self.tasks.drain() {
                    let _ = e.tx.send((key, Update::Lost { status }));
                }
                self.by_nspace.clear();
            }
        }
    }

    /// Keeps the end of a job not known to be ours, for its spawn's answer: the oldest are
    /// dropped past [`EARLY_KEEP`] or [`EARLY_MAX`] (never all at once, which could drop the
    /// end of a job whose answer is about to come).
    fn keep_early(&mut self, nspace: String, end: Ended, now: Instant) {
        self.early.insert(nspace.clone(), (end, now));
        self.early_order.push_back((nspace, now));
        while let Some((ns, at)) = self.early_order.front().cloned() {
            let stale = now.saturating_duration_since(at) >= EARLY_KEEP;
            if !stale && self.early_order.len() <= EARLY_MAX {
                break;
            }
            self.early_order.pop_front();
            if self.early.get(&ns).is_some_and(|(_, t)| *t == at) {
                self.early.remove(&ns);
            }
        }
    }

    /// The DVM's answer about a quiet job.
    fn probed(&mut self, key: u64, answer: ProbeAnswer, now: Instant, asker: &dyn Asker) {
        let Some(e) = self.tasks.get_mut(&key) else {
            return;
        };
        e.probing = None;
        e.probe_gap = (e.probe_gap * 2).min(PROBE_GAP_MAX);
        e.next_probe = Some(now + e.probe_gap);
        if e.end.is_some() {
            return;
        }
        let ns = e.nspace.clone().unwrap_or_default();
        let quiet = now.saturating_duration_since(e.since).as_secs();
        match answer {
            ProbeAnswer::Unknown => {
                e.forgotten.get_or_insert(now);
            }
            ProbeAnswer::Known { hosts, running } => {
                if e.hosts.as_ref().is_none_or(Vec::is_empty) && !hosts.is_empty() {
                    e.hosts = Some(hosts.clone());
                }
                if running == 0 && !hosts.is_empty() && !e.warned {
                    e.warned = true;
                    asker.warn(&format!(
                        "task {key} (job {ns}): no end after {quiet} s, and the DVM still \
                             holds the job although none of its {} processes is running (its \
                             end was lost inside the DVM); waiting for it (a timeout ends it)",
                        hosts.len()
                    ));
                }
            }
            ProbeAnswer::Failed(_) => {}
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

    /// Ends waiting too long for their proc table are reported without pods; quiet jobs are
    /// asked about, and those the DVM has forgotten without their end reaching us are ended.
    pub(crate) fn watch(&mut self, now: Instant, asker: &dyn Asker) {
        let mut recovered = Vec::new();
        for (key, e) in self.tasks.iter_mut() {
            if e.end.is_some() {
                continue;
            }
            let quiet = now.saturating_duration_since(e.since).as_secs();
            let Some(ns) = e.nspace.clone() else {
                if !e.warned && now.saturating_duration_since(e.since) >= SPAWN_QUIET {
                    e.warned = true;
                    asker.warn(&format!(
                        "task {key}: no answer to its spawn request after {quiet} s"
                    ));
                }
                continue;
            };
            if e.forgotten
                .is_some_and(|f| now.saturating_duration_since(f) >= SETTLE)
            {
                recovered.push(*key);
                asker.warn(&format!(
                    "task {key} (job {ns}): no end event after {quiet} s, and the DVM no longer \
                     knows the job (it ended and was cleaned up): its end notification was \
                     lost; reported failed, exit status unknown"
                ));
                e.end = Some((
                    Ended {
                        status: END_UNKNOWN,
                        rank: None,
                        message: Some(format!(
                            "job {ns} ended in the DVM but its end was never reported to this \
                             tool: exit status unknown"
                        )),
                        pods: Vec::new(),
                    },
                    now,
                ));
                e.hosts.get_or_insert_with(Vec::new);
                continue;
            }
            let unanswered = e
                .probing
                .is_some_and(|t| now.saturating_duration_since(t) < PROBE_ANSWER_WITHIN);
            if !unanswered && e.next_probe.is_some_and(|t| now >= t) {
                if asker.ask_state(*key, &ns) {
                    e.probing = Some(now);
                } else {
                    e.next_probe = Some(now + e.probe_gap);
                }
            }
        }
        for key in recovered {
            self.finish(key);
        }
        self.expire(now);
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
