//! Rounds of daemon launches through the pods' agents: PRRTE's side of
//! [`prrte_k8s::launch::rounds`].
//!
//! On `LAUNCH_DAEMONS` (PRRTE's event thread) [`launch_round`] sets up the virtual machine, reads
//! the nodes that need a daemon from the daemon map and builds prted's arguments with PRRTE's own
//! helpers; the rounds' state machine decides what to launch, and the launcher talks to the
//! agents in parallel on its own threads. Its events and each round's startup timeout come back
//! through the main-loop mailbox; the state machine answers each with [`Action`]s, which are
//! carried out here, in PRRTE. A later round's nodes that were added to the running DVM by
//! name (`--add-host`) are first resolved to the job's ready pods by a discovery on a thread of
//! our own ([`prrte_k8s::launch::added`]).
use super::daemons::{self, Procs};
use crate::boundary::{self, WorkerError};
use crate::pointers::Carried;
use crate::prrte::JobRef;
use crate::shim::{self, Framework};
use crate::{dvm, ffi, mainloop, params, pods, prrte};
use prrte_k8s::discovery::{self, DiscoveryConfig, DiscoveryError};
use prrte_k8s::launch::added;
use prrte_k8s::launch::prted_args::PrtedTemplate;
use prrte_k8s::launch::rounds::{Action, RoundLaunch, RoundRequest, Rounds, Start};
use prrte_k8s::launch::targets::DaemonNode;
use prrte_k8s::launch::{own_pod_target, LaunchEvent, Launcher, Watcher};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::Duration;

/// How long finalize waits for the agents to report their daemons stopped.
const FINAL_SWEEP_WAIT: Duration = Duration::from_secs(5);

/// A round's launcher (until finalize takes it) and its startup timer.
struct Running {
    launcher: Option<Launcher>,
    /// Dropping this ends the round's timeout thread early.
    _timer: mpsc::Sender<()>,
}

/// The PLM's rounds and what runs for them.
struct Plm {
    rounds: Rounds,
    /// The daemon job object (carried: the launcher's threads never touch it); it lives until
    /// prte exits. None before the first round.
    dvm: Option<Carried<ffi::prte_job_t>>,
    running: Vec<Running>,
    /// The watch of our own pod's agent (its preemption notice), from the first round on.
    watcher: Option<Watcher>,
}

static PLM: Mutex<Plm> = Mutex::new(Plm {
    rounds: Rounds::new(),
    dvm: None,
    running: Vec::new(),
    watcher: None,
});

fn plm() -> MutexGuard<'static, Plm> {
    PLM.lock().unwrap_or_else(|e| e.into_inner())
}

/// PRRTE ordered the daemons to exit: from now on a daemon ending is expected.
pub(crate) fn shutting_down() {
    plm().rounds.shutting_down();
}

/// At PLM finalize (main thread, PRRTE's event loop stopped): report what is still pending, ask
/// every agent to stop its daemon, report the final outcomes, and drop every round.
pub(crate) fn finalize() {
    plm().rounds.shutting_down();
    // Outcomes that arrived while PRRTE was shutting down (e.g. the agent's report of the
    // daemon whose loss made PRRTE stop) are reported before anything else is torn down.
    mainloop::run_pending();
    // The event loop has stopped; waiting here (bounded) delays nothing else. Agents stop
    // whatever prted is still running and report every final outcome, which we look at once
    // more: a daemon killed by anything but our own SIGTERM, or failing, is still reported.
    let launchers: Vec<Launcher> = plm()
        .running
        .iter_mut()
        .filter_map(|r| r.launcher.take())
        .collect();
    for l in &launchers {
        l.shutdown(FINAL_SWEEP_WAIT);
    }
    plm().rounds.final_sweep();
    mainloop::run_pending();
    plm().rounds.finalized();
    drop(launchers);
    plm().running.clear();
    let watcher = plm().watcher.take();
    drop(watcher);
    super::daemons_up::finalize();
}

/// Why the launch could not even be handed to the agents.
fn launch_error(state_job: JobRef, msg: &str) {
    prrte::error_box(
        "The k8s PLM component could not launch PRRTE's daemons.",
        msg,
    );
    shim::update_exit_status(1);
    state_job.activate(ffi::PRTE_JOB_STATE_FAILED_TO_START);
}

/// Same steps PRRTE's launchers take when nothing needs launching.
fn daemons_reported_now(job: JobRef) {
    job.set_state(ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED);
    job.activate(ffi::PRTE_JOB_STATE_DAEMONS_REPORTED);
}

/// Launches the daemons `jdata` needs (PRRTE's `LAUNCH_DAEMONS` state, main thread).
pub(crate) fn launch_round(jdata: JobRef) {
    super::daemons_up::launch_began();
    let Some(dvm) = prrte::daemons_job() else {
        return launch_error(jdata, "PRRTE has no daemon job object");
    };
    let nodes = match daemons::nodes_needing_daemons(jdata, dvm) {
        Ok(Some(nodes)) => nodes,
        Ok(None) => {
            shim::verbose(Framework::Plm, 1, "plm:k8s: no new daemons to launch");
            return daemons_reported_now(jdata);
        }
        Err(e) => return launch_error(jdata, &e.to_string()),
    };
    // prted's command line from PRRTE's own helpers.
    let prted = match daemons::build_template() {
        Ok(t) => t,
        Err(e) => return launch_error(jdata, &e.to_string()),
    };
    // prte and every prted start local processes on their main threads unless the site chose
    // otherwise (the short-job hang of PRRTE's launch threads); jobs of departed tools end.
    let prted = if dvm::launch_on_main_thread(Framework::Plm).for_prteds() {
        prted.with_default(dvm::LAUNCH_THREADS, "0")
    } else {
        prted
    };
    dvm::watch_tools(Framework::Plm);
    // Hosts added to the running DVM that the RAS never allocated: found among the job's
    // ready pods first, on our own thread.
    let unknown = pods::with(|p| added::unknown_nodes(&nodes, p));
    if unknown.is_empty() {
        begin_round(jdata, dvm, nodes, &prted);
    } else {
        resolve_added_then_begin(jdata, dvm, nodes, prted, unknown);
    }
}

/// Resolves the added hosts `unknown` to ready pods of the job through a discovery (as `ras
/// k8s` runs it: its parameters, readiness rules and timeout) on a thread of our own, then
/// begins the round on the main thread; a host that is not a ready pod of the job fails the
/// launch, named.
fn resolve_added_then_begin(
    jdata: JobRef,
    dvm: JobRef,
    nodes: Vec<DaemonNode>,
    prted: PrtedTemplate,
    unknown: Vec<String>,
) {
    let cfg = match DiscoveryConfig::from_params(&params::ras()) {
        Ok(c) => c,
        Err(e) => return launch_error(jdata, &e.to_string()),
    };
    shim::verbose(
        Framework::Plm,
        1,
        &format!(
            "plm:k8s: resolving added host(s) {} to the job's ready pods",
            unknown.join(", ")
        ),
    );
    // Kept alive until the completion below releases it.
    jdata.retain();
    let (job, daemons) = (jdata.carry(), dvm.carry());
    let spawned = boundary::spawn_worker(
        "prrte-k8s-add-hosts",
        move |rt| rt.block_on(discovery::discover(&cfg)),
        move |outcome| {
            let result = match outcome {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(WorkerError::Panicked(_)) => Err(
                    "the discovery of the added hosts panicked; please report this as a bug"
                        .to_string(),
                ),
                Err(e) => Err(DiscoveryError::Internal {
                    detail: e.to_string(),
                }
                .to_string()),
            }
            .and_then(|alloc| added::resolve_added(&unknown, &alloc).map_err(|e| e.to_string()));
            mainloop::post(move || {
                // SAFETY: the job object was retained above and is released just below; the
                // daemon job lives until prte exits; the mailbox runs this on the main thread.
                let (jdata, dvm) = unsafe { (JobRef::arrived(job), JobRef::arrived(daemons)) };
                match result {
                    Ok(found) => {
                        for (host, addr) in found {
                            pods::record(&host, addr);
                        }
                        begin_round(jdata, dvm, nodes, &prted);
                    }
                    Err(e) => {
                        let vpids: Vec<u32> = nodes.iter().map(|n| n.vpid).collect();
                        daemons::drop_unlaunched(dvm, &vpids);
                        launch_error(jdata, &e);
                    }
                }
                // SAFETY: releases the reference taken above (`jdata` is not used after this).
                unsafe { jdata.release() };
            })
        },
    );
    if let Err(e) = spawned {
        // SAFETY: undoes the retain above; the job stays alive for PRRTE's state callback, which
        // holds its own reference.
        unsafe { jdata.release() };
        launch_error(
            jdata,
            &format!("cannot start the thread resolving added hosts: {e}"),
        );
    }
}

/// Begins a round for `nodes`, all of which the pod table now resolves (main thread).
fn begin_round(jdata: JobRef, dvm: JobRef, nodes: Vec<DaemonNode>, prted: &PrtedTemplate) {
    let (params, env, server_uri) = (
        params::plm(),
        std::env::vars().collect(),
        shim::server_uri(),
    );
    let begun = {
        let mut plm = plm();
        plm.dvm = Some(dvm.carry());
        pods::with(|pods| {
            plm.rounds.begin(RoundRequest {
                params: &params,
                prted,
                env,
                server_uri,
                nodes,
                pods,
            })
        })
    };
    perform(dvm, begun.actions);
    match begun.start {
        Start::Refused(e) => launch_error(jdata, &e),
        Start::Nothing => daemons_reported_now(jdata),
        Start::Launch(launch) => {
            start(launch);
            // As PRRTE's launchers: launched, and the daemons' callbacks do the rest.
            jdata.set_state(ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED);
            dvm.set_state(ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED);
        }
    }
}

/// Hands a round to a launcher, whose events come back on the main thread, and starts the
/// round's startup timer (the timeout PRRTE lacks).
fn start(launch: RoundLaunch) {
    let generation = launch.generation;
    watch_own_pod(&launch);
    let launcher = Launcher::start(
        launch.targets,
        launch.options,
        Box::new(move |ev| mainloop::post(move || on_event(generation, ev))),
    );
    let (timer_tx, timer_rx) = mpsc::channel::<()>();
    let timeout = launch.startup_timeout;
    let _ = std::thread::Builder::new()
        .name("prrte-k8s-launch-timer".into())
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = timer_rx.recv_timeout(timeout) {
                mainloop::post(move || on_timeout(generation));
            }
        });
    plm().running.push(Running {
        launcher: Some(launcher),
        _timer: timer_tx,
    });
}

/// Watches our own pod's agent (once), so that its pod being told to end reaches the ranks
/// too; its notices come back on the main thread as the round's events do.
fn watch_own_pod(launch: &RoundLaunch) {
    if plm().watcher.is_some() {
        return;
    }
    let Some(port) = launch.targets.first().map(|(t, _)| t.addr.port()) else {
        return;
    };
    let env = |k: &str| std::env::var(k).ok();
    let Some(target) = own_pod_target(&env, port) else {
        shim::verbose(
            Framework::Plm,
            2,
            "plm:k8s: no POD_IP: this pod's agent is not watched for a preemption notice",
        );
        return;
    };
    let generation = launch.generation;
    let watcher = Watcher::start(
        target,
        launch.options.clone(),
        Box::new(move |ev| mainloop::post(move || on_event(generation, ev))),
    );
    plm().watcher = Some(watcher);
}

/// Carries out the rounds' actions, in order (main thread).
fn perform(dvm: JobRef, actions: Vec<Action>) {
    for action in actions {
        match action {
            Action::Verbose { level, message } => shim::verbose(Framework::Plm, level, &message),
            Action::ReportError { title, body } => prrte::error_box(&title, &body),
            Action::SetExitStatus(status) => shim::update_exit_status(status),
            Action::FailDaemon(vpid) => daemons::fail_daemon(dvm, vpid),
            Action::LostDaemon(vpid) => daemons::lost_daemon(dvm, vpid),
            Action::Preempt {
                pod,
                seconds,
                signal,
            } => super::preempt::tell_ranks(&pod, seconds, signal),
        }
    }
}

/// Runs `f` on the rounds with the daemons' states, then carries out its actions with the
/// rounds unlocked.
fn decide(f: impl FnOnce(&mut Rounds, &Procs) -> Vec<Action>) {
    let (dvm, actions) = {
        let mut plm = plm();
        let Some(dvm) = daemons::daemon_job(plm.dvm) else {
            return;
        };
        let actions = f(&mut plm.rounds, &Procs::new(dvm));
        (dvm, actions)
    };
    perform(dvm, actions);
}

fn on_event(generation: u64, event: LaunchEvent) {
    decide(|rounds, procs| {
        // `pterm` halts the DVM without calling the PLM's terminate_orteds: PRRTE's own flag
        // tells that it ordered its daemons to exit (HALT_VM, EXIT, prted_exit).
        // SAFETY: PRRTE globals and the live daemon job, read on the main thread.
        let (ordered, aborted) = unsafe {
            (
                ffi::prte_prteds_term_ordered,
                (*procs.dvm().as_ptr()).flags & ffi::PRTE_JOB_FLAG_ABORTED as u16 != 0,
            )
        };
        rounds.prrte_state(ordered, aborted);
        rounds.on_event(generation, event, procs)
    });
}

fn on_timeout(generation: u64) {
    decide(|rounds, procs| rounds.on_timeout(generation, procs));
}
