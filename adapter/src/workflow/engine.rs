//! The thread behind a [`Dvm`](super::Dvm): it spawns the submitted tasks through the PMIx tool
//! connection, matches the connection's updates to them, kills a task past its timeout, retries
//! a spawn the DVM could not place as [`Admission`] decides, fails a task whose spawn goes
//! unanswered (killing its job should it start later), keeps each task's output apart when
//! asked, times each task's phases ([`PhaseTimes`]), and answers each task with its
//! [`TaskResult`] (or [`Error::NotStarted`]). One thread, one loop: what it does is decided from
//! its own state alone, so the tests drive it with a stand-in for the connection.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prrte_k8s_pmix_tool::{Task, Update};
use tokio::sync::oneshot;

use super::admission::{Admission, NoRoom};
use super::error::Error;
use super::results::{Exit, TaskResult};
use super::tasks::TaskLine;
use super::timing::PhaseTimes;

/// How long a killed task's end is awaited before it is reported as timed out anyway.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(10);
/// PMIx's status when the DVM cannot place a job now (its slots are taken).
pub(crate) const FAILED_TO_MAP: i32 = -179;
/// How long a spawn may go unanswered before its task is reported failed (an answer names the
/// job once the DVM has launched it, within seconds even under load).
pub(crate) const SPAWN_ANSWER_WITHIN: Duration = Duration::from_secs(120);
/// How often timeouts are looked at when nothing else happens.
const TICK: Duration = Duration::from_millis(100);

/// Where a task's answer goes.
pub(crate) type Reply = oneshot::Sender<Result<TaskResult, Error>>;

/// What the engine thread receives.
pub(crate) enum Ev {
    /// A task to run.
    Submit {
        task: TaskLine,
        reply: Reply,
    },
    /// What the connection reports of a spawned task (by its id).
    Update(u64, Update),
    /// Answer once no output has come for `quiet` (output may follow a task's end).
    Quiet {
        quiet: Duration,
        reply: Sender<()>,
    },
    Stop,
}

/// What the engine asks of the PMIx tool connection.
pub(crate) trait Spawner: Send + 'static {
    /// Spawns `task`; its updates go to `tx` with the returned id.
    fn submit_to(
        &self,
        task: &Task,
        tx: Sender<(u64, Update)>,
    ) -> Result<u64, prrte_k8s_pmix_tool::Error>;
    /// Kills the job `nspace`.
    fn kill(&self, nspace: &str) -> Result<(), prrte_k8s_pmix_tool::Error>;
    /// PMIx's name for a status.
    fn status_name(&self, status: i32) -> String;
}

impl Spawner for Arc<prrte_k8s_pmix_tool::Dvm> {
    fn submit_to(
        &self,
        task: &Task,
        tx: Sender<(u64, Update)>,
    ) -> Result<u64, prrte_k8s_pmix_tool::Error> {
        prrte_k8s_pmix_tool::Dvm::submit_to(self, task, tx)
    }

    fn kill(&self, nspace: &str) -> Result<(), prrte_k8s_pmix_tool::Error> {
        prrte_k8s_pmix_tool::Dvm::kill(self, nspace)
    }

    fn status_name(&self, status: i32) -> String {
        prrte_k8s_pmix_tool::Dvm::status_name(self, status)
    }
}

/// Counters a caller may read while tasks run.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Tasks spawned whose end is not known yet.
    pub(crate) running: AtomicUsize,
    /// Where the time of the tasks that ran to their end went.
    pub(crate) times: Mutex<PhaseTimes>,
}

impl Stats {
    fn record(&self, launched: Option<Duration>, ended: Duration, total: Duration) {
        self.times
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(launched, ended, total);
    }
}

struct Running {
    task: TaskLine,
    reply: Reply,
    start: jiff::Timestamp,
    /// When the spawn was requested and when its answer came.
    requested: Instant,
    launched: Option<Instant>,
    deadline: Option<Instant>,
    nspace: Option<String>,
    killed: Option<Instant>,
}

pub(crate) struct Engine<S> {
    spawner: S,
    /// Given with every spawn: the connection's updates come back on it.
    updates: Sender<(u64, Update)>,
    output: Option<PathBuf>,
    todo: VecDeque<(TaskLine, Reply)>,
    running: HashMap<u64, Running>,
    /// Every spawned task's index by id: output may come after a task's end.
    index_of: HashMap<u64, usize>,
    /// When the next task may be spawned (after a spawn the DVM could not place).
    admission: Admission,
    /// Tasks reported failed before their spawn was answered: a late answer's job is killed.
    abandoned: HashSet<u64>,
    /// The connection is lost: nothing more is spawned.
    lost: bool,
    last_output: Option<Instant>,
    quiet: Vec<(Instant, Duration, Sender<()>)>,
    stats: Arc<Stats>,
}

pub(crate) fn to_task(t: &TaskLine) -> Task {
    Task {
        argv: t.argv.clone(),
        np: t.np,
        hosts: t.hosts.clone(),
        cwd: t.cwd.clone(),
        env: t.env.clone(),
    }
}

fn result(
    t: &TaskLine,
    start: jiff::Timestamp,
    exit: Exit,
    pods: Vec<String>,
    error: Option<String>,
) -> TaskResult {
    TaskResult {
        index: t.index,
        exit,
        start: start.to_string(),
        end: jiff::Timestamp::now().to_string(),
        pods,
        error,
    }
}

impl<S: Spawner> Engine<S> {
    pub(crate) fn new(
        spawner: S,
        updates: Sender<(u64, Update)>,
        output: Option<PathBuf>,
        stats: Arc<Stats>,
    ) -> Self {
        Engine {
            spawner,
            updates,
            output,
            todo: VecDeque::new(),
            running: HashMap::new(),
            index_of: HashMap::new(),
            admission: Admission::default(),
            abandoned: HashSet::new(),
            lost: false,
            last_output: None,
            quiet: Vec::new(),
            stats,
        }
    }

    /// The loop, until [`Ev::Stop`]. Tasks still waiting then are answered by their replies'
    /// drop ([`Error::Stopped`]).
    pub(crate) fn run(mut self, rx: Receiver<Ev>) {
        loop {
            match rx.recv_timeout(TICK) {
                Ok(Ev::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(ev) => self.handle(ev, Instant::now()),
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.tick(Instant::now());
        }
    }

    pub(crate) fn handle(&mut self, ev: Ev, now: Instant) {
        match ev {
            Ev::Submit { task, reply } => {
                self.todo.push_back((task, reply));
                self.spawn_ready(now);
            }
            Ev::Update(id, u) => self.update(id, u, now),
            Ev::Quiet { quiet, reply } => self.quiet.push((now, quiet, reply)),
            Ev::Stop => {}
        }
        self.stats
            .running
            .store(self.running.len(), Ordering::Relaxed);
    }

    /// Spawns what waits, unless held or lost; once lost, what waits is answered as not
    /// started.
    fn spawn_ready(&mut self, now: Instant) {
        if self.lost {
            for (task, reply) in self.todo.drain(..) {
                let _ = reply.send(Err(Error::NotStarted(task.index)));
            }
            return;
        }
        while self.admission.may_spawn(now) {
            let Some((task, reply)) = self.todo.pop_front() else {
                break;
            };
            let start = jiff::Timestamp::now();
            match self
                .spawner
                .submit_to(&to_task(&task), self.updates.clone())
            {
                Ok(id) => {
                    self.index_of.insert(id, task.index);
                    let deadline = task.timeout.map(|d| now + d);
                    self.running.insert(
                        id,
                        Running {
                            task,
                            reply,
                            start,
                            requested: now,
                            launched: None,
                            deadline,
                            nspace: None,
                            killed: None,
                        },
                    );
                }
                Err(prrte_k8s_pmix_tool::Error::Lost) => {
                    self.todo.push_front((task, reply));
                    self.lost = true;
                    self.spawn_ready(now);
                    return;
                }
                Err(e) => {
                    let r = result(&task, start, Exit::Error(e.to_string()), vec![], None);
                    let _ = reply.send(Ok(r));
                }
            }
        }
    }

    fn update(&mut self, id: u64, u: Update, now: Instant) {
        if let Update::Output { stderr, bytes, .. } = u {
            self.last_output = Some(now);
            save_output(
                self.output.as_deref(),
                self.index_of.get(&id),
                stderr,
                &bytes,
            );
            return;
        }
        let Some(r) = self.running.get_mut(&id) else {
            if let (true, Update::Started { nspace }) = (self.abandoned.remove(&id), &u) {
                if let Err(e) = self.spawner.kill(nspace) {
                    eprintln!(
                        "prrte-k8s: job {nspace} started after its task was reported failed and \
                         could not be killed: {e}"
                    );
                }
            }
            return;
        };
        match u {
            Update::Started { nspace } => {
                self.admission.placed(r.task.index);
                if r.killed.is_none() && r.deadline.is_some_and(|d| now >= d) {
                    kill(&self.spawner, &nspace, r, now);
                }
                r.nspace = Some(nspace);
                r.launched = Some(now);
            }
            Update::Ended(e) => {
                let Some(r) = self.running.remove(&id) else {
                    return;
                };
                let exit = if r.killed.is_some() {
                    Exit::Timeout
                } else {
                    Exit::from_status(e.status, |s| self.spawner.status_name(s))
                };
                self.admission.left();
                let ended = now.saturating_duration_since(r.requested);
                let _ = r
                    .reply
                    .send(Ok(result(&r.task, r.start, exit, e.pods, e.message)));
                let launched = r.launched.map(|l| l.saturating_duration_since(r.requested));
                // The result is handed over as the end is seen: request to result is the end.
                self.stats.record(launched, ended, ended);
                self.spawn_ready(now);
            }
            Update::SpawnFailed { status, message } => {
                let Some(r) = self.running.remove(&id) else {
                    return;
                };
                let retry = status == FAILED_TO_MAP
                    && self
                        .admission
                        .no_room(r.task.index, self.running.len(), now)
                        != NoRoom::GiveUp;
                if retry {
                    // The DVM's slots are taken (by our own tasks, or not yet released): tried
                    // again when one of ours leaves, or after a pause.
                    self.todo.push_front((r.task, r.reply));
                } else {
                    self.admission.left();
                    let exit = Exit::Error(message);
                    let _ = r
                        .reply
                        .send(Ok(result(&r.task, r.start, exit, vec![], None)));
                    self.spawn_ready(now);
                }
            }
            Update::Lost { .. } => {
                let Some(r) = self.running.remove(&id) else {
                    return;
                };
                self.admission.left();
                self.lost = true;
                let _ = r
                    .reply
                    .send(Ok(result(&r.task, r.start, Exit::Lost, vec![], None)));
                self.spawn_ready(now);
            }
            Update::Output { .. } => {}
        }
    }

    /// Kills what ran past its deadline, gives up on a killed task whose end does not come and
    /// on a spawn left unanswered, answers who waits for quiet output.
    pub(crate) fn tick(&mut self, now: Instant) {
        let mut gone = Vec::new();
        for (id, r) in self.running.iter_mut() {
            match (r.deadline, r.killed, &r.nspace) {
                (Some(d), None, Some(ns)) if now >= d => {
                    let ns = ns.clone();
                    kill(&self.spawner, &ns, r, now);
                }
                (_, Some(k), _) if now.saturating_duration_since(k) >= KILL_GRACE => {
                    gone.push((*id, Exit::Timeout, timeout_unconfirmed()))
                }
                // Never answered: past its own timeout (and the grace a kill gets), or past
                // the bound on any spawn's answer.
                (d, None, None)
                    if d.is_some_and(|d| now >= d + KILL_GRACE)
                        || now.saturating_duration_since(r.requested) >= SPAWN_ANSWER_WITHIN =>
                {
                    let waited = now.saturating_duration_since(r.requested).as_secs();
                    eprintln!(
                        "prrte-k8s: warning: task {} got no answer to its spawn request in \
                         {waited} s: reported failed (its job is killed if it starts later)",
                        r.task.index
                    );
                    let msg = format!("the DVM did not answer its spawn request in {waited} s");
                    let exit = if d.is_some_and(|d| now >= d) {
                        Exit::Timeout
                    } else {
                        Exit::Error(msg.clone())
                    };
                    gone.push((*id, exit, msg));
                    self.abandoned.insert(*id);
                }
                _ => {}
            }
        }
        for (id, exit, msg) in gone {
            if let Some(r) = self.running.remove(&id) {
                self.admission.left();
                let _ = r
                    .reply
                    .send(Ok(result(&r.task, r.start, exit, vec![], Some(msg))));
            }
        }
        if !self.todo.is_empty() {
            self.spawn_ready(now);
        }
        let last = self.last_output;
        self.quiet.retain(|(asked, quiet, reply)| {
            let since = last.map_or(*asked, |l| l.max(*asked));
            if now.duration_since(since) >= *quiet {
                let _ = reply.send(());
                false
            } else {
                true
            }
        });
        self.stats
            .running
            .store(self.running.len(), Ordering::Relaxed);
    }
}

fn timeout_unconfirmed() -> String {
    format!("killed after its timeout; its end was not confirmed within {KILL_GRACE:?}")
}

fn kill<S: Spawner>(spawner: &S, nspace: &str, r: &mut Running, now: Instant) {
    r.killed = Some(now);
    if let Err(e) = spawner.kill(nspace) {
        eprintln!(
            "prrte-k8s: task {} (job {nspace}) ran past its timeout and could not be killed: {e}",
            r.task.index
        );
    }
}

/// Appends a task's output to DIR/<index>.out or .err; a write that fails is reported, the run
/// goes on.
fn save_output(dir: Option<&Path>, index: Option<&usize>, stderr: bool, bytes: &[u8]) {
    let (Some(dir), Some(i)) = (dir, index) else {
        return;
    };
    let path = dir.join(format!("{i}.{}", if stderr { "err" } else { "out" }));
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(bytes));
    if let Err(e) = r {
        eprintln!("prrte-k8s: cannot write {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests;
