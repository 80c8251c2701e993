//! Rounds of daemon launches through the pods' agents.
//!
//! On `LAUNCH_DAEMONS` (PRRTE's event thread) [`launch_round`] sets up the virtual machine,
//! builds prted's arguments with PRRTE's own helpers and hands every launch to the launcher, which
//! talks to the agents in parallel on its own threads. Outcomes come back through the main-loop
//! mailbox. We add what PRRTE lacks: a daemon-startup timeout, and a message naming the pod and
//! the reason whenever a daemon fails to start or dies.
use super::prted_args;
use crate::cstr;
use crate::prrte::JobRef;
use crate::shim::{self, Framework};
use crate::{ffi, mainloop, params, pods, prrte};
use prrte_k8s::launch::{
    ExitDesc, LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// One round of daemon launches (the initial DVM, or daemons added later).
struct Round {
    generation: u64,
    /// The daemon job object (an address: rounds are shared with the launcher's threads, which
    /// never touch it); it lives until prte exits.
    daemons: usize,
    /// vpid -> (pod, node name)
    targets: BTreeMap<u32, (String, String)>,
    failed: BTreeSet<u32>,
    launcher: Option<Launcher>,
    /// Dropping this ends the round's timeout thread early.
    _timer: mpsc::Sender<()>,
}

static ROUNDS: Mutex<Vec<Round>> = Mutex::new(Vec::new());
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Set when PRRTE orders the daemons to exit: from then on a daemon ending is expected.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
/// Set at finalize once the agents were told to stop their daemons.
static FINAL_SWEEP: AtomicBool = AtomicBool::new(false);
/// Set at the end of finalize: nothing more is reported.
static FINALIZED: AtomicBool = AtomicBool::new(false);

/// PRRTE ordered the daemons to exit: from now on a daemon ending is expected.
pub fn shutting_down() {
    SHUTTING_DOWN.store(true, Ordering::Release);
}

/// At PLM finalize (main thread, PRRTE's event loop stopped): report what is still pending, ask
/// every agent to stop its daemon, report the final outcomes, and drop every round.
pub fn finalize() {
    SHUTTING_DOWN.store(true, Ordering::Release);
    // Outcomes that arrived while PRRTE was shutting down (e.g. the agent's report of the
    // daemon whose loss made PRRTE stop) are reported before anything else is torn down.
    mainloop::run_pending();
    // The event loop has stopped; waiting here (bounded) delays nothing else. Agents stop
    // whatever prted is still running and report every final outcome, which we look at once
    // more: a daemon killed by anything but our own SIGTERM, or failing, is still reported.
    let launchers: Vec<Launcher> = ROUNDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter_mut()
        .filter_map(|r| r.launcher.take())
        .collect();
    for l in &launchers {
        l.shutdown(Duration::from_secs(5));
    }
    FINAL_SWEEP.store(true, Ordering::Release);
    mainloop::run_pending();
    FINALIZED.store(true, Ordering::Release);
    drop(launchers);
    ROUNDS.lock().unwrap_or_else(|e| e.into_inner()).clear();
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
pub fn launch_round(jdata: JobRef) {
    let Some(daemons_ref) = prrte::daemons_job() else {
        return launch_error(jdata, "PRRTE has no daemon job object");
    };
    let daemons = daemons_ref.as_ptr();
    // SAFETY: main thread, live job (`JobRef`); PRRTE's helper computes which nodes need new
    // daemons.
    let rc = unsafe { ffi::prte_plm_base_setup_virtual_machine(jdata.as_ptr()) };
    if rc != prrte::SUCCESS {
        return launch_error(
            jdata,
            &format!("setting up the virtual machine failed (PRRTE error {rc})"),
        );
    }
    // SAFETY: attribute lookup on the live daemon job object (`JobRef`).
    let do_not_launch = unsafe {
        ffi::prte_get_attribute(
            &mut (*daemons).attributes,
            ffi::PRTE_JOB_DO_NOT_LAUNCH as u16,
            std::ptr::null_mut(),
            ffi::PMIX_BOOL as ffi::pmix_data_type_t,
        )
    };
    // SAFETY: the daemon job's map is set by setup_virtual_machine.
    let map = unsafe { (*daemons).map };
    let new_daemons = if map.is_null() {
        0
    } else {
        // SAFETY: the map exists (not NULL) and belongs to the live daemon job.
        unsafe { (*map).num_new_daemons }
    };
    if do_not_launch || (!map.is_null() && new_daemons == 0) {
        shim::verbose(Framework::Plm, 1, "plm:k8s: no new daemons to launch");
        return daemons_reported_now(jdata);
    }
    if map.is_null() {
        return launch_error(jdata, "the daemon job has no map");
    }

    // prted's command line from PRRTE's own helpers.
    let (template, vpid_slot) = match build_template() {
        Ok(t) => t,
        Err(e) => return launch_error(jdata, &e),
    };
    let env = prted_args::forwarded_env(std::env::vars());
    let p = match params::plm().check(&|k| std::env::var(k).ok()) {
        Ok(p) => p,
        Err(e) => return launch_error(jdata, &e.to_string()),
    };
    let secret = match &p.secret_file {
        None => None,
        Some(file) => match prrte_k8s::protocol::read_secret_file(file) {
            Ok(s) => Some(s),
            Err(e) => {
                return launch_error(
                    jdata,
                    &format!(
                        "{e} (parameter {} = {})",
                        prrte_k8s::settings::mca::SECRET_FILE.name(),
                        file.display()
                    ),
                )
            }
        },
    };
    let port = p.agent_port;

    // prte's own PMIx tool URI, for the agents to publish in their pods (so `prrte-k8s prun`
    // works from any pod), when it is one other pods can reach.
    let dvm_uri = shim::server_uri()
        .filter(|u| prrte_k8s::protocol::validate_dvm_uri(u).is_ok() && !u.contains("tcp4://127."));
    if dvm_uri.is_none() {
        shim::verbose(Framework::Plm, 1, "plm:k8s: prte's tool listener is not reachable from other pods (set --pmixmca ptl_base_if_include to the pod network); no DVM URI published");
    }

    let mut targets = Vec::new();
    let mut names = BTreeMap::new();
    let mut unresolved = Vec::new();
    // SAFETY: map->nodes is a live pointer array of prte_node_t on the main thread.
    let nodes = unsafe { (*map).nodes };
    // SAFETY: as above.
    let size = unsafe { (*nodes).size };
    for i in 0..size {
        // SAFETY: the map's node array holds prte_node_t, main thread.
        let node: *mut ffi::prte_node_t = unsafe { prrte::array_get(nodes, i) };
        if node.is_null() {
            continue;
        }
        // SAFETY: a live node of the map.
        let (flags, daemon, name, raw) = unsafe {
            (
                (*node).flags,
                (*node).daemon,
                cstr::string((*node).name),
                cstr::string((*node).rawname),
            )
        };
        if flags & ffi::PRTE_NODE_FLAG_DAEMON_LAUNCHED as ffi::prte_node_flags_t != 0
            || daemon.is_null()
        {
            continue;
        }
        let name = name.unwrap_or_default();
        // SAFETY: a live daemon proc object.
        let vpid = unsafe { (*daemon).name.rank };
        let addr = raw
            .as_deref()
            .and_then(|r| r.parse::<IpAddr>().ok())
            .or_else(|| pods::lookup(&name).map(|a| IpAddr::V4(a.ip)));
        let pod = pods::lookup(&name)
            .map(|a| a.pod)
            .unwrap_or_else(|| name.clone());
        match addr {
            Some(ip) => {
                names.insert(vpid, (pod.clone(), name.clone()));
                targets.push((
                    LaunchTarget {
                        id: vpid,
                        pod,
                        addr: SocketAddr::new(ip, port),
                    },
                    LaunchRequest {
                        argv: prted_args::for_vpid(&template, vpid_slot, vpid),
                        env: env.clone(),
                        dvm_uri: dvm_uri.clone(),
                    },
                ));
            }
            None => unresolved.push(name),
        }
    }
    if !unresolved.is_empty() {
        return launch_error(jdata, &format!(
            "no pod IP is known for node(s) {}. The k8s PLM launches through the agents of pods that the k8s RAS \
             allocated; use --prtemca ras k8s (or give nodes by IP address).",
            unresolved.join(", ")
        ));
    }
    if targets.is_empty() {
        return daemons_reported_now(jdata);
    }

    let generation = GENERATION.fetch_add(1, Ordering::AcqRel) + 1;
    shim::verbose(
        Framework::Plm,
        1,
        &format!(
            "plm:k8s: launching {} daemons through their pods' agents",
            targets.len()
        ),
    );
    let opts = LaunchOptions {
        secret,
        connect_timeout: p.connect_timeout,
        request_timeout: p.launch_timeout,
        kill_grace: Duration::from_secs(5),
    };
    let launcher = Launcher::start(
        targets,
        opts,
        Box::new(move |ev| mainloop::post(move || on_event(generation, ev))),
    );

    // The startup timeout PRRTE lacks.
    let (timer_tx, timer_rx) = mpsc::channel::<()>();
    let timeout = p.launch_timeout;
    let _ = std::thread::Builder::new()
        .name("prrte-k8s-launch-timer".into())
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = timer_rx.recv_timeout(timeout) {
                mainloop::post(move || on_timeout(generation, timeout));
            }
        });
    ROUNDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Round {
            generation,
            daemons: daemons as usize,
            targets: names,
            failed: BTreeSet::new(),
            launcher: Some(launcher),
            _timer: timer_tx,
        });
    // As PRRTE's launchers: launched, and the daemons' callbacks do the rest.
    jdata.set_state(ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED);
    daemons_ref.set_state(ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED);
}

/// prted's arguments (without the executable) and the index of the vpid in them.
fn build_template() -> Result<(Vec<String>, usize), String> {
    let mut argc: c_int = 0;
    let mut argv: *mut *mut std::os::raw::c_char = std::ptr::null_mut();
    let mut vpid_index: c_int = -1;
    let ess = cstr::cstring("env");
    // SAFETY: PRRTE's helpers append to a PMIx argv we own and free below; `ess` outlives the call.
    let rc = unsafe {
        let rc = ffi::prte_plm_base_setup_prted_cmd(&mut argc, &mut argv);
        if rc < 0 {
            rc
        } else {
            ffi::prte_plm_base_prted_append_basic_args(
                &mut argc,
                &mut argv,
                ess.as_ptr() as *mut _,
                &mut vpid_index,
            )
        }
    };
    let mut full = Vec::new();
    if !argv.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: a NULL-terminated argv built by PMIx's argv functions.
            let p = unsafe { *argv.add(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: `p` is one of the argv's NUL-terminated strings, freed only below.
            full.push(unsafe { cstr::string(p) }.unwrap_or_default());
            i += 1;
        }
        // SAFETY: frees the argv PMIx allocated.
        unsafe { ffi::PMIx_Argv_free(argv) };
    }
    if rc != prrte::SUCCESS {
        return Err(format!(
            "building prted's command line failed (PRRTE error {rc})"
        ));
    }
    shim::verbose(
        Framework::Plm,
        2,
        &format!("plm:k8s: prted command: {}", full.join(" ")),
    );
    usize::try_from(vpid_index)
        .ok()
        .and_then(|i| prted_args::agent_template(&full, i))
        .ok_or_else(|| "PRRTE's prted command line has no vpid slot".to_string())
}

fn with_round<R>(generation: u64, f: impl FnOnce(&mut Round) -> R) -> Option<R> {
    let mut rounds = ROUNDS.lock().unwrap_or_else(|e| e.into_inner());
    rounds
        .iter_mut()
        .find(|r| r.generation == generation)
        .map(f)
}

/// The daemon job of a round, on the main thread.
fn round_daemons(daemons: usize) -> Option<JobRef> {
    // SAFETY: `Round::daemons` is the daemon job object, which lives until prte exits; rounds'
    // outcomes are handled on the main thread (posted through the mailbox).
    unsafe { JobRef::new(daemons as *mut ffi::prte_job_t) }
}

/// Current state of a daemon proc, if it exists.
fn daemon_state(daemons: JobRef, vpid: u32) -> Option<(*mut ffi::prte_proc_t, u32)> {
    // SAFETY: main thread, live daemon job (`JobRef`); its procs array holds prte_proc_t by vpid.
    let proc_: *mut ffi::prte_proc_t =
        unsafe { prrte::array_get((*daemons.as_ptr()).procs, vpid as c_int) };
    if proc_.is_null() {
        None
    } else {
        // SAFETY: a live proc object of the daemon job.
        Some((proc_, unsafe { (*proc_).state }))
    }
}

/// Mark a daemon failed to start, the way PRRTE's launchers do; PRRTE then aborts the DVM.
fn fail_daemon(daemons: JobRef, vpid: u32) {
    let Some((proc_, state)) = daemon_state(daemons, vpid) else {
        return;
    };
    if state == ffi::PRTE_PROC_STATE_FAILED_TO_START {
        return;
    }
    // SAFETY: main thread, live daemon job and proc; updates of PRRTE's daemon bookkeeping as its
    // own launchers make them.
    unsafe {
        (*proc_).state = ffi::PRTE_PROC_STATE_FAILED_TO_START as ffi::prte_proc_state_t;
        (*daemons.as_ptr()).num_terminated += 1;
        ffi::prte_rml_route_lost(vpid);
    }
    shim::update_exit_status(1);
    // SAFETY: as above; the state machine copies the proc's name.
    unsafe {
        ffi::prrte_k8s_shim_activate_proc_state(
            std::ptr::addr_of_mut!((*proc_).name).cast(),
            ffi::PRTE_PROC_STATE_FAILED_TO_START as c_int,
        )
    };
}

/// A running daemon whose agent can no longer be reached (the pod cut off from the network, the
/// agent gone): PRRTE's own connection to it may stall without ever failing, so tell PRRTE the
/// daemon is lost, as its OOB does when a daemon's connection breaks; PRRTE then aborts the DVM
/// ("node died") instead of waiting for that pod forever. The agent stops the daemon when it
/// sees the launcher's connection end.
fn lost_daemon(daemons: JobRef, vpid: u32) {
    let Some((proc_, state)) = daemon_state(daemons, vpid) else {
        return;
    };
    if state >= ffi::PRTE_PROC_STATE_UNTERMINATED {
        // PRRTE already knows it ended.
        return;
    }
    // SAFETY: main thread, live daemon job and proc; the state machine copies the proc's name.
    unsafe {
        ffi::prrte_k8s_shim_activate_proc_state(
            std::ptr::addr_of_mut!((*proc_).name).cast(),
            ffi::PRTE_PROC_STATE_COMM_FAILED as c_int,
        )
    };
}

fn on_event(generation: u64, ev: LaunchEvent) {
    if FINALIZED.load(Ordering::Acquire) {
        return;
    }
    // While PRRTE shuts the daemons down, only an abnormal end (a signal, a non-zero code, a lost
    // agent) is still worth reporting: it may be why PRRTE is shutting down.
    if SHUTTING_DOWN.load(Ordering::Acquire)
        && !matches!(&ev, LaunchEvent::Exited { status, .. } if abnormal(status))
    {
        return;
    }
    // After we asked the agents to stop their daemons, SIGTERM and a lost connection are ours.
    if FINAL_SWEEP.load(Ordering::Acquire)
        && matches!(
            &ev,
            LaunchEvent::Exited {
                status: ExitDesc::Signal(15) | ExitDesc::ConnectionLost(_),
                ..
            }
        )
    {
        return;
    }
    let Some((daemons, node)) = with_round(generation, |r| {
        let id = match &ev {
            LaunchEvent::Started { id, .. }
            | LaunchEvent::Failed { id, .. }
            | LaunchEvent::Exited { id, .. } => *id,
        };
        (
            r.daemons,
            r.targets.get(&id).map(|t| t.1.clone()).unwrap_or_default(),
        )
    }) else {
        return;
    };
    let Some(daemons) = round_daemons(daemons) else {
        return;
    };
    match ev {
        LaunchEvent::Started { id, pod, pid } => {
            shim::verbose(
                Framework::Plm,
                1,
                &format!("plm:k8s: daemon {id} started in pod {pod} (node {node}) as pid {pid}"),
            );
        }
        LaunchEvent::Failed { id, pod, reason } => {
            with_round(generation, |r| r.failed.insert(id));
            prrte::error_box(
                &format!("The k8s PLM component could not start PRRTE's daemon in pod {pod}."),
                &format!("Daemon {id} (node {node}): {reason}"),
            );
            fail_daemon(daemons, id);
        }
        LaunchEvent::Exited { id, pod, status } => {
            // Below RUNNING: the daemon never reported back (later states, errors included,
            // mean it had).
            let reported = matches!(daemon_state(daemons, id), Some((_, s)) if s >= ffi::PRTE_PROC_STATE_RUNNING);
            let already = with_round(generation, |r| !r.failed.insert(id)).unwrap_or(true);
            if !reported {
                if !already {
                    prrte::error_box(
                        &format!("PRRTE's daemon in pod {pod} exited before it reported back."),
                        &format!("Daemon {id} (node {node}): {status}. Check the pod's agent log for prted's output."),
                    );
                    fail_daemon(daemons, id);
                }
            } else if abnormal(&status) {
                // The DVM cannot continue without it; make prte's own exit say so.
                shim::update_exit_status(1);
                prrte::error_box(
                    &format!("PRRTE's daemon in pod {pod} ended while the DVM was running."),
                    &format!(
                        "Daemon {id} (node {node}): {status}. PRRTE will now shut the DVM down."
                    ),
                );
                if matches!(status, ExitDesc::ConnectionLost(_)) {
                    lost_daemon(daemons, id);
                }
            }
        }
    }
}

/// An end of a daemon that is not a normal exit.
fn abnormal(status: &ExitDesc) -> bool {
    !matches!(status, ExitDesc::Code(0))
}

fn on_timeout(generation: u64, timeout: Duration) {
    if SHUTTING_DOWN.load(Ordering::Acquire) {
        return;
    }
    let Some((daemons, targets, failed)) = with_round(generation, |r| {
        (r.daemons, r.targets.clone(), r.failed.clone())
    }) else {
        return;
    };
    let Some(daemons) = round_daemons(daemons) else {
        return;
    };
    let missing: Vec<(u32, String, String)> = targets
        .iter()
        .filter(|(id, _)| !failed.contains(id))
        .filter(|(id, _)| !matches!(daemon_state(daemons, **id), Some((_, s)) if s == ffi::PRTE_PROC_STATE_RUNNING))
        .map(|(id, (pod, node))| (*id, pod.clone(), node.clone()))
        .collect();
    if missing.is_empty() {
        return;
    }
    let list: Vec<String> = missing
        .iter()
        .map(|(id, pod, node)| format!("  pod {pod} (node {node}, daemon {id})"))
        .collect();
    prrte::error_box(
        &format!("PRRTE's daemons in {} pod(s) did not report back within {} s.", missing.len(), timeout.as_secs()),
        &format!(
            "{}\nA daemon that starts but cannot reach prte usually means the pods cannot reach prte's address \
             (NetworkPolicy, or prte_if_include/oob_tcp_if_include naming the wrong network). Raise \
             plm_k8s_launch_timeout if the pods are merely slow.",
            list.join("\n")
        ),
    );
    for (id, _, _) in missing {
        with_round(generation, |r| r.failed.insert(id));
        fail_daemon(daemons, id);
    }
}
