//! Running a pod whose sandbox is up: its init containers in order, then its regular
//! containers (each restarted by the pod's restart policy), native sidecars alongside, until
//! the pod is done, evicted or deleted (gracefully: `terminate`). Every change of a container's state is reported at once.

use super::backoff::Backoff;
use super::container_status::{terminated, CStatus, State};
use super::containers::{Kind, Pod};
use super::control::Ctl;
use super::pod::PodCtx;
use super::prepare::PodPrep;
use super::probe::Readiness;
use super::status::{set_cond_reason, PodView};
use crate::api::defaults::now_rfc3339;
use crate::runtime::podnet::{PodExit, RunningPod};
use serde_json::json;
use std::net::Ipv4Addr;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often running containers are checked for having exited.
const EXIT_POLL: Duration = Duration::from_millis(50);

/// The first wait before a container is restarted (it doubles each time).
const FIRST_RESTART_BACKOFF: Duration = Duration::from_millis(500);

/// The first wait before a missing image is looked for again.
const FIRST_PULL_BACKOFF: Duration = Duration::from_secs(1);

/// How long a container waits before what it needs (a Secret, ...) is looked for again.
pub(super) const PREPARE_RETRY: Duration = Duration::from_secs(1);

/// What the worker keeps of a container besides its status.
pub(super) struct Supervision {
    /// When to start it (again); None while it runs or once it is done.
    pub(super) due: Option<Instant>,
    pub(super) restart_backoff: Backoff,
    pub(super) pull_attempts: u32,
    pub(super) pull_backoff: Backoff,
    /// The last waiting message reported as an event (not repeated).
    pub(super) last_error: String,
    /// When the current run started.
    pub(super) since: Instant,
    pub(super) started_at: String,
    pub(super) readiness: Readiness,
    pub(super) next_readiness: Option<Instant>,
    pub(super) next_startup: Option<Instant>,
    pub(super) startup_fails: u32,
    /// Whether it ever started (a sidecar that did no longer holds up the init containers).
    pub(super) ever_started: bool,
}

impl Supervision {
    fn new(now: Instant) -> Supervision {
        Supervision {
            due: Some(now),
            restart_backoff: Backoff::new(FIRST_RESTART_BACKOFF),
            pull_attempts: 0,
            pull_backoff: Backoff::new(FIRST_PULL_BACKOFF),
            last_error: String::new(),
            since: now,
            started_at: String::new(),
            readiness: Readiness::new(None),
            next_readiness: None,
            next_startup: None,
            startup_fails: 0,
            ever_started: false,
        }
    }
}

/// A pod that fails as a whole: the reason and message of its status.
pub(super) struct PodFailure(pub(super) &'static str, pub(super) String);

/// What comes next in the pod's initialization.
enum InitStep {
    /// Start (when due) init container `i`.
    Start(usize),
    /// Wait for a running init container (to end, or a sidecar to start).
    Wait,
    /// Every init container is done.
    Done,
}

/// One pod's containers on the node, from its sandbox's creation to its end.
pub(super) struct Worker<'a> {
    pub(super) ctx: &'a PodCtx,
    pub(super) pod: Pod,
    pub(super) prep: PodPrep,
    pub(super) sandbox: Arc<RunningPod>,
    pub(super) ip: Ipv4Addr,
    pub(super) start_time: String,
    /// Per container of `pod`, in its order.
    pub(super) cs: Vec<CStatus>,
    pub(super) sup: Vec<Supervision>,
    /// Every init container has completed (a sidecar: started) once.
    pub(super) initialized: bool,
    /// No container will start again.
    pub(super) terminal: bool,
    /// While the pod is being deleted: when what still runs gets SIGKILL.
    pub(super) stop_by: Option<Instant>,
    /// The sidecars have been told to stop (the other containers have ended).
    pub(super) sidecars_stopping: bool,
}

impl<'a> Worker<'a> {
    pub(super) fn new(
        ctx: &'a PodCtx,
        pod: Pod,
        prep: PodPrep,
        sandbox: Arc<RunningPod>,
        ip: Ipv4Addr,
        start_time: String,
    ) -> Worker<'a> {
        let now = Instant::now();
        let cs = initial_statuses(&pod);
        let sup = pod
            .containers
            .iter()
            .map(|_| Supervision::new(now))
            .collect();
        Worker {
            ctx,
            initialized: !pod.containers.iter().any(|c| c.kind.is_init()),
            pod,
            prep,
            sandbox,
            ip,
            start_time,
            cs,
            sup,
            terminal: false,
            stop_by: None,
            sidecars_stopping: false,
        }
    }

    /// Runs the pod until it is done, evicted or deleted, or the cluster stops.
    pub(super) fn run(mut self, rx: &Receiver<Ctl>) {
        self.publish();
        loop {
            match rx.recv_timeout(self.wait()) {
                Ok(Ctl::Delete) | Ok(Ctl::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.sandbox.kill();
                    return;
                }
                Ok(Ctl::Evict(message, done)) => {
                    self.evict(&message);
                    let _ = done.send(Ok(()));
                    return;
                }
                Ok(Ctl::Terminate(grace)) => self.terminate(grace),
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.poll_exits();
            if self.stop_by.is_some() {
                if self.terminated() {
                    return;
                }
                continue;
            }
            self.probe();
            if self.done() {
                self.finish();
                return;
            }
            if let Err(PodFailure(reason, message)) = self.advance() {
                let _ = self.sandbox.kill();
                self.ctx.fail(reason, &message);
                return;
            }
        }
    }

    /// Until the next exit check, probe or start.
    fn wait(&self) -> Duration {
        let now = Instant::now();
        let starts = self.startable().into_iter().filter_map(|i| self.sup[i].due);
        let probes = self
            .sup
            .iter()
            .flat_map(|s| [s.next_readiness, s.next_startup]);
        starts
            .chain(probes.flatten())
            .chain(self.stop_by)
            .map(|t| t.saturating_duration_since(now))
            .fold(EXIT_POLL, Duration::min)
    }

    /// Records the end of every container that has ended since the last look.
    fn poll_exits(&mut self) {
        for i in 0..self.cs.len() {
            if !self.cs[i].is_running() {
                continue;
            }
            let name = self.pod.containers[i].name.clone();
            match self.sandbox.container_exit(&name) {
                Ok(Some(exit)) => self.ended(i, Some(exit), None),
                Ok(None) => {}
                Err(e) => tracing::warn!(pod = %self.ctx.name, "container {name}: {e:#}"),
            }
        }
    }

    /// Container `i` ended with `exit` (None: killed, its exit unknown), or could not start
    /// (`start_error`), and the pod's status says so.
    pub(super) fn ended(&mut self, i: usize, exit: Option<PodExit>, start_error: Option<&str>) {
        self.record_end(i, exit, start_error);
        self.publish();
    }

    /// Container `i` ended (see [`Worker::ended`]): it is terminated, or waits to be restarted
    /// by its pod's restart policy (an init container that failed unless the policy is Never,
    /// a sidecar always), unless the pod is done.
    fn record_end(&mut self, i: usize, exit: Option<PodExit>, start_error: Option<&str>) {
        let now = now_rfc3339();
        let cid = self.cs[i].container_id.clone().unwrap_or_default();
        let mut term = terminated(exit, &self.sup[i].started_at, &now, &cid);
        if let Some(m) = termination_message(&self.ctx.dir, &self.pod.containers[i].name) {
            term["message"] = json!(m);
        }
        if let Some(m) = start_error {
            term = json!({"exitCode": 128, "reason": "StartError", "message": m,
                "startedAt": self.sup[i].started_at, "finishedAt": now, "containerID": cid});
        }
        let code = term["exitCode"].as_i64().unwrap_or(0);
        let policy = self.pod.restart_policy().to_string();
        let restart = !self.terminal
            && match self.pod.containers[i].kind {
                Kind::Init => code != 0 && policy != "Never",
                Kind::Sidecar => true,
                Kind::Regular => policy == "Always" || (policy == "OnFailure" && code != 0),
            };
        let (st, sup) = (&mut self.cs[i], &mut self.sup[i]);
        (st.ready, st.started) = (false, false);
        (sup.next_readiness, sup.next_startup) = (None, None);
        if !restart {
            st.state = State::Terminated(term);
            sup.due = None;
            return;
        }
        let wait = sup.restart_backoff.next();
        sup.due = Some(Instant::now() + wait);
        st.restarts += 1;
        st.last_state = json!({"terminated": term});
        let message = format!(
            "back-off {}ms restarting failed container={} pod={}_{}",
            wait.as_millis(),
            self.pod.containers[i].name,
            self.ctx.name,
            self.ctx.ns
        );
        self.ctx.event("Warning", "BackOff", &message);
        st.state = State::Waiting("CrashLoopBackOff".into(), message);
    }

    /// Kills the running containers, the last first, and records how they ended.
    pub(super) fn kill_running(&mut self) {
        for i in (0..self.cs.len()).rev() {
            if self.cs[i].is_running() {
                let name = self.pod.containers[i].name.clone();
                let exit = self.sandbox.kill_container(&name).ok();
                self.record_end(i, exit, None);
            }
        }
    }

    /// Whether the pod is done: an init container failed under restart policy Never, or every
    /// regular container has ended for good.
    fn done(&self) -> bool {
        let regular_done = |(c, st): (&super::containers::PodContainer, &CStatus)| {
            c.kind != Kind::Regular || matches!(st.state, State::Terminated(_))
        };
        if !self.initialized {
            return self.pod.containers.iter().zip(&self.cs).any(|(c, st)| {
                match (&st.state, c.kind) {
                    (State::Terminated(t), Kind::Init) => t["exitCode"] != 0,
                    _ => false,
                }
            });
        }
        self.pod.containers.iter().zip(&self.cs).all(regular_done)
    }

    /// The pod is done: its sidecars are stopped (in reverse order), and it ends Succeeded or
    /// Failed.
    fn finish(&mut self) {
        self.terminal = true;
        self.kill_running();
        self.publish();
    }

    /// The containers that may start now or later: before the pod is initialized, the next
    /// init container and the sidecars that started once (restarts); then all.
    fn startable(&self) -> Vec<usize> {
        if self.initialized {
            return (0..self.cs.len()).collect();
        }
        let mut v: Vec<usize> = (0..self.cs.len())
            .filter(|&i| self.pod.containers[i].kind == Kind::Sidecar && self.sup[i].ever_started)
            .collect();
        if let InitStep::Start(i) = self.init_step() {
            v.push(i);
        }
        v
    }

    /// Starts what is due among the [`Worker::startable`] containers; marks the pod
    /// initialized once every init container is done (reported before the regular containers
    /// start: `PodInitializing`).
    fn advance(&mut self) -> Result<(), PodFailure> {
        let now = Instant::now();
        for i in self.startable() {
            if !self.cs[i].is_running() && self.sup[i].due.is_some_and(|d| d <= now) {
                self.start(i)?;
            }
        }
        if !self.initialized && matches!(self.init_step(), InitStep::Done) {
            self.initialized = true;
            self.publish();
        }
        Ok(())
    }

    /// The next step of the initialization.
    fn init_step(&self) -> InitStep {
        for (i, c) in self.pod.containers.iter().enumerate() {
            let st = &self.cs[i];
            match c.kind {
                Kind::Regular => continue,
                Kind::Init => match &st.state {
                    State::Terminated(t) if t["exitCode"] == 0 => continue,
                    State::Running(_) => return InitStep::Wait,
                    _ => return InitStep::Start(i),
                },
                Kind::Sidecar if self.sup[i].ever_started => continue,
                Kind::Sidecar if st.is_running() => return InitStep::Wait,
                Kind::Sidecar => return InitStep::Start(i),
            }
        }
        InitStep::Done
    }

    /// Reports the pod Failed, Evicted with `message`, then kills every container and reports
    /// their ends. As a node's kubelet does: the eviction's status (phase, reason, the
    /// `DisruptionTarget` condition) is written before the containers are killed, so the pod's
    /// controller sees the eviction before anything its end sets off in other pods (a launcher
    /// that fails because this pod's daemon went away).
    fn evict(&mut self, message: &str) {
        self.terminal = true;
        let evicted = |st: &mut serde_json::Value, now: &str| {
            st["reason"] = json!("Evicted");
            st["message"] = json!(message);
            set_cond_reason(
                st,
                "DisruptionTarget",
                true,
                now,
                "TerminationByKubelet",
                message,
            );
        };
        self.write_status(Some("Failed"), evicted);
        self.kill_running();
        let _ = self.sandbox.kill();
        self.write_status(Some("Failed"), evicted);
        self.ctx.event("Warning", "Evicted", message);
    }

    /// Reports the pod's status as it is now.
    pub(super) fn publish(&self) {
        self.write_status(None, |_, _| {});
    }

    /// Writes the pod's status (its phase `phase` unless None), then has `more` change it.
    pub(super) fn write_status(
        &self,
        phase: Option<&'static str>,
        more: impl FnOnce(&mut serde_json::Value, &str),
    ) {
        let gw = self.ctx.net.gateway().to_string();
        let view = PodView {
            pod: &self.pod,
            cs: &self.cs,
            ip: Some(self.ip),
            host_ip: &gw,
            start_time: &self.start_time,
            sandbox: true,
            terminal: self.terminal,
            phase,
        };
        self.ctx.status(|st| {
            let now = now_rfc3339();
            view.write(st, &now);
            more(st, &now);
        });
    }
}
/// The statuses of a pod's containers before any starts: init containers and, when there are
/// some, the regular ones wait with `PodInitializing`, else with `ContainerCreating`.
pub(super) fn initial_statuses(pod: &Pod) -> Vec<CStatus> {
    let has_init = pod.containers.iter().any(|c| c.kind.is_init());
    pod.containers
        .iter()
        .map(|c| {
            let reason = if c.kind.is_init() || has_init {
                "PodInitializing"
            } else {
                "ContainerCreating"
            };
            CStatus::waiting(reason)
        })
        .collect()
}

/// What container `name` wrote to its termination message file, if anything (the first
/// [`TERMINATION_MESSAGE_MAX`](super::paths::TERMINATION_MESSAGE_MAX) bytes).
fn termination_message(dir: &std::path::Path, name: &str) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(super::paths::termination_log(dir, name)).ok()?;
    let mut buf = Vec::new();
    f.take(super::paths::TERMINATION_MESSAGE_MAX)
        .read_to_end(&mut buf)
        .ok()?;
    (!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned())
}
