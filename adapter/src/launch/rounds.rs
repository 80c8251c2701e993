//! The rounds of daemon launches of one DVM, and what the PLM reports to PRRTE about them.
//!
//! Each activation of PRRTE's `LAUNCH_DAEMONS` that needs new daemons is a round: the first
//! builds the DVM, later ones add daemons on nodes added to the running DVM while the earlier
//! rounds' daemons keep running. [`Rounds::begin`] checks the settings, resolves the round's
//! nodes to pods and returns what to hand to a [`Launcher`](super::Launcher); the launcher's
//! events ([`Rounds::on_event`]) and the round's startup timeout ([`Rounds::on_timeout`]) come
//! back as lists of [`Action`]s for the PLM to carry out in PRRTE, in order. The state machine
//! reads the daemons' states in PRRTE through [`DaemonStates`] and touches nothing itself.
//!
//! We add what PRRTE lacks: a daemon-startup timeout, and a message naming the pod and the
//! reason whenever a daemon fails to start or dies (a daemon its agent stopped because the
//! pod was told to end counts, whatever its status). Once PRRTE shuts the DVM down
//! ([`Rounds::shutting_down`]) only abnormal ends are reported; after the agents were asked to
//! stop their daemons ([`Rounds::final_sweep`]) SIGTERM and a lost connection are our own doing;
//! after [`Rounds::finalized`] nothing is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use super::event::{ExitDesc, LaunchEvent};
use super::prted_args::{forwarded_env, PrtedTemplate};
use super::request::{LaunchOptions, LaunchRequest, LaunchTarget};
use super::settings::{self, reachable_dvm_uri, NO_DVM_URI};
use super::targets::{resolve, DaemonNode, PodTable};
use crate::settings::mca::PlmParams;

#[cfg(test)]
mod tests;

/// A daemon's state in PRRTE, as far as the rounds tell states apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonState {
    /// Launched but not reported back (below PRRTE's `RUNNING`).
    Starting,
    /// Reported back: PRRTE's `RUNNING`, the state a daemon keeps while the DVM runs.
    Running,
    /// Past `RUNNING`, not ended (from `REGISTERED` up to `UNTERMINATED`).
    Reported,
    /// Ended as far as PRRTE knows (`UNTERMINATED` and beyond), other than failed to start.
    Ended,
    /// PRRTE's `FAILED_TO_START`.
    FailedToStart,
}

impl DaemonState {
    /// The daemon called back to prte (`RUNNING` or later, errors included).
    fn reported_back(self) -> bool {
        self != DaemonState::Starting
    }

    /// PRRTE knows the daemon ended.
    fn ended(self) -> bool {
        matches!(self, DaemonState::Ended | DaemonState::FailedToStart)
    }
}

/// The daemons' states in PRRTE, by vpid; `None` when PRRTE has no such daemon.
pub trait DaemonStates {
    fn state(&self, vpid: u32) -> Option<DaemonState>;
}

impl<F: Fn(u32) -> Option<DaemonState>> DaemonStates for F {
    fn state(&self, vpid: u32) -> Option<DaemonState> {
        self(vpid)
    }
}

/// What the PLM is to do in PRRTE, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A line on the PLM's verbose stream, shown from `plm_base_verbose` `level` on.
    Verbose { level: i32, message: String },
    /// A boxed error message on PRRTE's error output.
    ReportError { title: String, body: String },
    /// PRRTE's exit status becomes this.
    SetExitStatus(i32),
    /// Mark the daemon failed to start, as PRRTE's own launchers do: PRRTE aborts the DVM.
    FailDaemon(u32),
    /// Tell PRRTE the running daemon's connection is lost, as its OOB does when a daemon's
    /// connection breaks: PRRTE aborts the DVM instead of waiting for that pod forever.
    LostDaemon(u32),
    /// Tell every rank of the DVM's jobs, in every pod, that pod `pod` is told to end and the
    /// ranks have `seconds` left: the PMIx event, and `signal` if the site chose one.
    Preempt {
        pod: String,
        seconds: u64,
        signal: Option<i32>,
    },
}

fn verbose(level: i32, message: impl Into<String>) -> Action {
    Action::Verbose {
        level,
        message: message.into(),
    }
}

fn report(title: String, body: String) -> Action {
    Action::ReportError { title, body }
}

/// Where the PLM is in PRRTE's life cycle; each phase reports less than the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Daemons are launched and supervised.
    Running,
    /// PRRTE ordered the daemons to exit: a daemon ending is expected.
    ShuttingDown,
    /// The agents were asked to stop their daemons: SIGTERM and the launcher's own closing are ours.
    FinalSweep,
    /// Nothing more is reported.
    Finalized,
}

/// What a round is asked to launch.
pub struct RoundRequest<'a> {
    /// The PLM's parameters, checked for every round.
    pub params: &'a PlmParams,
    /// prted's arguments as PRRTE built them.
    pub prted: &'a PrtedTemplate,
    /// prte's environment; its MCA settings go with every launch (`forwarded_env`).
    pub env: Vec<(String, String)>,
    /// prte's own PMIx tool URI, published by the agents when other pods can reach it.
    pub server_uri: Option<String>,
    /// The nodes that need a daemon in this round (only those: PRRTE marks the others).
    pub nodes: Vec<DaemonNode>,
    /// The pods discovery allocated.
    pub pods: &'a PodTable,
}

/// How a round begins.
#[derive(Debug)]
pub enum Start {
    /// Hand the targets to a launcher; its events go to [`Rounds::on_event`] with
    /// `generation`, and [`Rounds::on_timeout`] is due after `startup_timeout`.
    Launch(RoundLaunch),
    /// No node needs a daemon: PRRTE is told the daemons reported, at once.
    Nothing,
    /// The round cannot start; the message says why and what to do.
    Refused(String),
}

/// A round to hand to a launcher.
#[derive(Debug)]
pub struct RoundLaunch {
    pub generation: u64,
    pub targets: Vec<(LaunchTarget, LaunchRequest)>,
    pub options: LaunchOptions,
    pub startup_timeout: Duration,
}

/// The answer to [`Rounds::begin`]: actions to carry out first, then how the round starts.
#[derive(Debug)]
pub struct Begun {
    pub actions: Vec<Action>,
    pub start: Start,
}

/// A daemon of a round, for messages.
#[derive(Debug, Clone)]
struct Daemon {
    pod: String,
    node: String,
}

/// One round: its daemons and those already known to have failed.
#[derive(Debug)]
struct Round {
    startup_timeout: Duration,
    daemons: BTreeMap<u32, Daemon>,
    failed: BTreeSet<u32>,
    /// Daemons whose pods were told to end (the agent's notice) while the DVM ran.
    told_to_end: BTreeSet<u32>,
}

/// Every round of the DVM; see the module documentation.
#[derive(Debug)]
pub struct Rounds {
    last_generation: u64,
    rounds: BTreeMap<u64, Round>,
    phase: Phase,
    /// `plm_k8s_preempt_signal` as the last round read it.
    preempt_signal: Option<i32>,
    /// The ranks were told of a preemption (they are told once per DVM).
    preempted: bool,
    /// PRRTE ordered its daemons to exit with no daemon lost before (`pterm`, the DVM's end).
    halt: bool,
}

impl Default for Rounds {
    fn default() -> Self {
        Rounds::new()
    }
}

impl Rounds {
    pub const fn new() -> Rounds {
        Rounds {
            last_generation: 0,
            rounds: BTreeMap::new(),
            phase: Phase::Running,
            preempt_signal: None,
            preempted: false,
            halt: false,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Begins a round: checks the settings, resolves the nodes to their pods and, if there is
    /// anything to launch, opens a round of a new generation.
    pub fn begin(&mut self, request: RoundRequest<'_>) -> Begun {
        let mut actions = Vec::new();
        let env = |k: &str| {
            request
                .env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        let settings = match settings::check(request.params, &env) {
            Ok(s) => s,
            Err(e) => return refused(actions, e.to_string()),
        };
        self.preempt_signal = settings.preempt_signal;
        let dvm_uri = reachable_dvm_uri(request.server_uri);
        if dvm_uri.is_none() {
            actions.push(verbose(1, NO_DVM_URI));
        }
        let targets = match resolve(&request.nodes, request.pods) {
            Ok(t) => t,
            Err(e) => return refused(actions, e.to_string()),
        };
        if targets.is_empty() {
            return Begun {
                actions,
                start: Start::Nothing,
            };
        }
        self.last_generation += 1;
        let generation = self.last_generation;
        actions.push(verbose(
            1,
            format!(
                "plm:k8s: launching {} daemons through their pods' agents",
                targets.len()
            ),
        ));
        let daemons = targets
            .iter()
            .map(|t| {
                let d = Daemon {
                    pod: t.pod.clone(),
                    node: t.node.clone(),
                };
                (t.vpid, d)
            })
            .collect();
        self.rounds.insert(
            generation,
            Round {
                startup_timeout: settings.startup_timeout,
                daemons,
                failed: BTreeSet::new(),
                told_to_end: BTreeSet::new(),
            },
        );
        let env = forwarded_env(request.env.into_iter());
        let targets = targets
            .into_iter()
            .map(|t| {
                let request = LaunchRequest {
                    argv: request.prted.for_vpid(t.vpid),
                    env: env.clone(),
                    dvm_uri: dvm_uri.clone(),
                };
                let target = LaunchTarget {
                    id: t.vpid,
                    pod: t.pod,
                    addr: SocketAddr::new(t.ip, settings.port),
                };
                (target, request)
            })
            .collect();
        let launch = RoundLaunch {
            generation,
            targets,
            options: settings.options,
            startup_timeout: settings.startup_timeout,
        };
        Begun {
            actions,
            start: Start::Launch(launch),
        }
    }

    /// One event of round `generation`'s launcher.
    pub fn on_event(
        &mut self,
        generation: u64,
        event: LaunchEvent,
        states: &impl DaemonStates,
    ) -> Vec<Action> {
        if self.suppressed(&event) {
            return Vec::new();
        }
        if let LaunchEvent::Preempt { id, pod, seconds } = event {
            if self.phase == Phase::Running {
                if let Some(round) = self.rounds.get_mut(&generation) {
                    round.told_to_end.insert(id);
                }
            }
            return self.on_preempt(id, pod, seconds);
        }
        let shutting_down = self.phase >= Phase::ShuttingDown;
        if let (
            true,
            LaunchEvent::Exited {
                id,
                pod,
                status: ExitDesc::Code(1),
            },
        ) = (self.halt, &event)
        {
            // What a prted below another prted in PRRTE's routing tree does when its parent
            // relayed the order to exit and ended first: "lifeline lost", exit code 1.
            return vec![verbose(
                2,
                format!("plm:k8s: daemon {id} in pod {pod} exited with code 1 as the DVM halted (its parent in PRRTE's routing tree ended first)"),
            )];
        }
        match self.rounds.get_mut(&generation) {
            Some(round) => round.on_event(event, states, shutting_down),
            None => Vec::new(),
        }
    }

    /// Round `generation`'s startup timeout passed: its daemons that have not reported back
    /// (and have not failed already) are named and failed.
    pub fn on_timeout(&mut self, generation: u64, states: &impl DaemonStates) -> Vec<Action> {
        if self.phase >= Phase::ShuttingDown {
            return Vec::new();
        }
        match self.rounds.get_mut(&generation) {
            Some(round) => round.on_timeout(states),
            None => Vec::new(),
        }
    }

    /// A pod's agent was told to end: the ranks are told, the first time only (the pods of a
    /// deleted Job are all told to end at once).
    fn on_preempt(&mut self, id: u32, pod: String, seconds: u64) -> Vec<Action> {
        if std::mem::replace(&mut self.preempted, true) {
            return vec![verbose(
                2,
                format!("plm:k8s: pod {pod} (daemon {id}) is told to end too; the ranks were told already"),
            )];
        }
        vec![
            verbose(
                1,
                format!("plm:k8s: pod {pod} (daemon {id}) is told to end: telling every rank, {seconds} s left"),
            ),
            Action::Preempt {
                pod,
                seconds,
                signal: self.preempt_signal,
            },
        ]
    }

    /// What PRRTE's state says before an event is handled: whether it ordered its daemons to
    /// exit (`pterm`'s halt, which does not go through the PLM, or the DVM's end), and whether
    /// its daemon job was aborted (a daemon was lost first). An order with no loss before it
    /// is a halt: a prted below another prted in PRRTE's routing tree (beyond the radix's
    /// first level, 64 by default) then exits with code 1 when its parent relayed the order
    /// and ended first ("lifeline lost"), which is expected. After a loss, every end is
    /// reported as before.
    pub fn prrte_state(&mut self, exit_ordered: bool, aborted: bool) {
        if exit_ordered && !aborted {
            self.halt = true;
            self.advance(Phase::ShuttingDown);
        }
    }

    /// PRRTE ordered the daemons to exit.
    pub fn shutting_down(&mut self) {
        self.advance(Phase::ShuttingDown);
    }

    /// The agents were asked to stop their daemons.
    pub fn final_sweep(&mut self) {
        self.advance(Phase::FinalSweep);
    }

    /// The PLM is finalized: every round is dropped and nothing more is reported.
    pub fn finalized(&mut self) {
        self.advance(Phase::Finalized);
        self.rounds.clear();
    }

    fn advance(&mut self, to: Phase) {
        self.phase = self.phase.max(to);
    }

    /// Whether the phase leaves `event` unreported.
    fn suppressed(&self, event: &LaunchEvent) -> bool {
        let abnormal_end = matches!(event, LaunchEvent::Exited { status, .. } if abnormal(status));
        let ours = matches!(
            event,
            LaunchEvent::Exited {
                status: ExitDesc::Signal(15) | ExitDesc::ClosedByLauncher,
                ..
            }
        );
        match self.phase {
            Phase::Running => false,
            // An abnormal end (a signal, a non-zero code, a lost agent) may be why PRRTE is
            // shutting down.
            Phase::ShuttingDown => !abnormal_end,
            Phase::FinalSweep => !abnormal_end || ours,
            Phase::Finalized => true,
        }
    }
}

fn refused(actions: Vec<Action>, why: String) -> Begun {
    Begun {
        actions,
        start: Start::Refused(why),
    }
}

/// An end of a daemon that is not a normal exit. A daemon its agent stopped because the pod
/// was told to end (deleted, evicted, preempted) ended abnormally whatever its status: prted
/// exits 0 on the agent's SIGTERM, but the DVM lost the pod.
fn abnormal(status: &ExitDesc) -> bool {
    !matches!(status, ExitDesc::Code(0))
}

/// Failing daemon `vpid`, unless PRRTE has no such daemon or already knows it failed to start.
fn fail(vpid: u32, state: Option<DaemonState>) -> Vec<Action> {
    match state {
        Some(s) if s != DaemonState::FailedToStart => {
            vec![Action::SetExitStatus(1), Action::FailDaemon(vpid)]
        }
        _ => Vec::new(),
    }
}

impl Round {
    /// The node name of daemon `vpid`, for messages.
    fn node(&self, vpid: u32) -> &str {
        self.daemons.get(&vpid).map_or("", |d| d.node.as_str())
    }

    /// One event; `shutting_down`: PRRTE is already shutting the DVM down.
    fn on_event(
        &mut self,
        event: LaunchEvent,
        states: &impl DaemonStates,
        shutting_down: bool,
    ) -> Vec<Action> {
        match event {
            LaunchEvent::Started { id, pod, pid } => vec![verbose(
                1,
                format!(
                    "plm:k8s: daemon {id} started in pod {pod} (node {}) as pid {pid}",
                    self.node(id)
                ),
            )],
            LaunchEvent::Failed { id, pod, reason } => {
                self.failed.insert(id);
                let mut actions = vec![report(
                    format!("The k8s PLM component could not start PRRTE's daemon in pod {pod}."),
                    format!("Daemon {id} (node {}): {reason}", self.node(id)),
                )];
                actions.extend(fail(id, states.state(id)));
                actions
            }
            LaunchEvent::Exited { id, pod, status } => {
                self.on_exit(id, &pod, status, states.state(id), shutting_down)
            }
            // Handled by the rounds as a whole.
            LaunchEvent::Preempt { .. } => Vec::new(),
        }
    }

    fn on_exit(
        &mut self,
        id: u32,
        pod: &str,
        status: ExitDesc,
        state: Option<DaemonState>,
        shutting_down: bool,
    ) -> Vec<Action> {
        let node = self.node(id).to_string();
        let already_failed = !self.failed.insert(id);
        if !state.is_some_and(DaemonState::reported_back) {
            if already_failed {
                return Vec::new();
            }
            let mut actions = vec![report(
                format!("PRRTE's daemon in pod {pod} exited before it reported back."),
                format!(
                    "Daemon {id} (node {node}): {status}. Check the pod's agent log for prted's \
                     output."
                ),
            )];
            actions.extend(fail(id, state));
            return actions;
        }
        if !abnormal(&status) {
            return Vec::new();
        }
        // The DVM cannot continue without it; make prte's own exit say so. Once PRRTE is
        // shutting down, the end may be the cause (reported late) or a consequence of another
        // daemon's loss: say which is which as far as known.
        // A pod told to end before the shutdown began (its agent's notice came while the DVM
        // ran) is a cause, even when PRRTE noticed the daemon's end before the agent's report.
        let told_to_end = matches!(status, ExitDesc::PodToldToEnd { .. });
        let running = format!("PRRTE's daemon in pod {pod} ended while the DVM was running.");
        let (title, then) = match (shutting_down, told_to_end) {
            (false, _) => (running, "PRRTE will now shut the DVM down."),
            (true, true) if self.told_to_end.contains(&id) => {
                (running, "PRRTE is shutting the DVM down.")
            }
            (true, true) => (
                format!("PRRTE's daemon in pod {pod} ended as the DVM shut down."),
                "The pod's end may be why the DVM shut down.",
            ),
            (true, false) => (
                format!("PRRTE's daemon in pod {pod} ended abnormally as the DVM shut down."),
                "If another daemon is named as lost, this one may have ended because of it.",
            ),
        };
        let mut actions = vec![
            Action::SetExitStatus(1),
            report(
                title,
                format!("Daemon {id} (node {node}): {status}. {then}"),
            ),
        ];
        // PRRTE's own connection to it may stall without ever failing; the agent stops the
        // daemon when it sees the launcher's connection end.
        if status.connection_ended() && !state.is_some_and(DaemonState::ended) {
            actions.push(Action::LostDaemon(id));
        }
        actions
    }

    fn on_timeout(&mut self, states: &impl DaemonStates) -> Vec<Action> {
        let missing: Vec<(u32, Daemon, Option<DaemonState>)> = self
            .daemons
            .iter()
            .filter(|(id, _)| !self.failed.contains(id))
            .map(|(id, d)| (*id, d.clone(), states.state(*id)))
            .filter(|(_, _, state)| *state != Some(DaemonState::Running))
            .collect();
        if missing.is_empty() {
            return Vec::new();
        }
        let list: Vec<String> = missing
            .iter()
            .map(|(id, d, _)| format!("  pod {} (node {}, daemon {id})", d.pod, d.node))
            .collect();
        let mut actions = vec![report(
            format!(
                "PRRTE's daemons in {} pod(s) did not report back within {} s.",
                missing.len(),
                self.startup_timeout.as_secs()
            ),
            format!(
                "{}\nA daemon that starts but cannot reach prte usually means the pods cannot \
                 reach prte's address (NetworkPolicy, or prte_if_include/oob_tcp_if_include \
                 naming the wrong network). Raise plm_k8s_launch_timeout if the pods are merely \
                 slow.",
                list.join("\n")
            ),
        )];
        for (id, _, state) in missing {
            self.failed.insert(id);
            actions.extend(fail(id, state));
        }
        actions
    }
}
