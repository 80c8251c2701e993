//! PLM `k8s`: PRRTE's daemons are started by each pod's agent.
//!
//! On `LAUNCH_DAEMONS` (PRRTE's event thread) we set up the virtual machine, build prted's
//! arguments with PRRTE's own helpers and hand every launch to the launcher, which talks to the
//! agents in parallel on its own threads. Outcomes come back through the main-loop mailbox.
//! We add what PRRTE lacks: a daemon-startup timeout, and a message naming the pod and the reason
//! whenever a daemon fails to start or dies.
use crate::{ffi, mainloop, params, pods, prrte, prted_args, shim};
use prrte_k8s::launch::{self, ExitDesc, LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::os::raw::{c_int, c_short, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

static mut MODULE: ffi::prte_plm_base_module_t = ffi::prte_plm_base_module_t {
    init: Some(init),
    set_hnp_name: Some(ffi::prte_plm_base_set_hnp_name),
    spawn: Some(spawn),
    remote_spawn: Some(remote_spawn),
    terminate_job: Some(ffi::prte_plm_base_prted_terminate_job),
    terminate_orteds: Some(terminate_orteds),
    terminate_procs: Some(ffi::prte_plm_base_prted_kill_local_procs),
    signal_job: Some(ffi::prte_plm_base_prted_signal_local_procs),
    finalize: Some(finalize),
};

/// One round of daemon launches (the initial DVM, or daemons added later).
struct Round {
    generation: u64,
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

/// The module PRRTE gets from `query`.
pub fn module_ptr() -> *const ffi::prte_plm_base_module_t {
    std::ptr::addr_of!(MODULE)
}

pub unsafe extern "C" fn register_params() -> c_int {
    crate::abi::boundary("plm k8s register", prrte::ERROR, || {
        params::register_plm(crate::component::plm_component_ptr());
        prrte::SUCCESS
    })
}

pub unsafe extern "C" fn query(module: *mut *mut ffi::pmix_mca_base_module_t, priority: *mut c_int) -> c_int {
    crate::abi::boundary("plm k8s query", prrte::ERROR, || {
        if module.is_null() || priority.is_null() {
            return prrte::ERROR;
        }
        // SAFETY: PMIx passes valid out-pointers.
        unsafe {
            *module = std::ptr::null_mut();
            *priority = 0;
        }
        if !prrte::is_master() {
            return prrte::ERROR;
        }
        let p = params::plm();
        let fw = std::ptr::addr_of!(ffi::prte_plm_base_framework);
        let explicit = prrte::selection_names(prrte::framework_selection(fw).as_deref(), "k8s");
        let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            && p.secret_file.as_deref().is_some_and(|f| std::path::Path::new(f).is_file());
        if !explicit && !in_cluster {
            shim::verbose(shim::FRAMEWORK_PLM, 2, "plm:k8s: not in a Kubernetes pod with an agent secret mounted: declining");
            return prrte::ERROR;
        }
        // SAFETY: out-pointers are valid; MODULE lives for the process (PRRTE copies it).
        unsafe {
            *module = std::ptr::addr_of_mut!(MODULE) as *mut ffi::pmix_mca_base_module_t;
            *priority = p.priority;
        }
        prrte::SUCCESS
    })
}

unsafe extern "C" fn init() -> c_int {
    crate::abi::boundary("plm k8s init", prrte::ERROR, || {
        if let Err(e) = mainloop::ensure() {
            prrte::error_box("The k8s PLM component could not set up its event.", &e);
            return prrte::ERROR;
        }
        // SAFETY: main thread during PLM init; these are PRRTE's documented hooks for a launcher.
        unsafe {
            let rc = ffi::prte_plm_base_comm_start();
            if rc != prrte::SUCCESS {
                return rc;
            }
            ffi::prte_plm_globals.daemon_nodes_assigned_at_launch = true;
            let add = ffi::prte_state.add_job_state.expect("PRRTE's state module has add_job_state");
            add(ffi::PRTE_JOB_STATE_LAUNCH_DAEMONS as ffi::prte_job_state_t, Some(launch_daemons))
        }
    })
}

unsafe extern "C" fn spawn(jdata: *mut ffi::prte_job_t) -> c_int {
    crate::abi::boundary("plm k8s spawn", prrte::ERROR, || {
        prrte::activate_job_state(jdata, ffi::PRTE_JOB_STATE_INIT);
        prrte::SUCCESS
    })
}

unsafe extern "C" fn remote_spawn() -> c_int {
    crate::abi::boundary("plm k8s remote_spawn", prrte::ERROR, || ffi::PRTE_ERR_NOT_SUPPORTED)
}

unsafe extern "C" fn terminate_orteds() -> c_int {
    crate::abi::boundary("plm k8s terminate_orteds", prrte::ERROR, || {
        SHUTTING_DOWN.store(true, Ordering::Release);
        // SAFETY: main thread; PRRTE's own way to order every daemon to exit.
        unsafe { shim::prrte_k8s_shim_prted_exit() }
    })
}

unsafe extern "C" fn finalize() -> c_int {
    crate::abi::boundary("plm k8s finalize", prrte::ERROR, || {
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
        mainloop::shutdown();
        // SAFETY: main thread at PLM finalize, as PRRTE's own launchers do.
        unsafe { ffi::prte_plm_base_comm_stop() }
    })
}

/// Why the launch could not even be handed to the agents.
fn launch_error(state_job: *mut ffi::prte_job_t, msg: &str) {
    prrte::error_box("The k8s PLM component could not launch PRRTE's daemons.", msg);
    // SAFETY: a plain global PRRTE reports as its exit status.
    unsafe { shim::prrte_k8s_shim_update_exit_status(1) };
    prrte::activate_job_state(state_job, ffi::PRTE_JOB_STATE_FAILED_TO_START);
}

unsafe extern "C" fn launch_daemons(_fd: c_int, _args: c_short, cbdata: *mut c_void) {
    crate::abi::boundary("plm k8s launch_daemons", (), || {
        let caddy = cbdata as *mut ffi::prte_state_caddy_t;
        // SAFETY: PRRTE passes the state caddy of this activation; we release it when done.
        let jdata = unsafe { (*caddy).jdata };
        launch_round(jdata);
        // SAFETY: the caddy is ours to release (PMIX_RELEASE), as every state callback does.
        unsafe { shim::prrte_k8s_shim_release(caddy as *mut c_void) };
    })
}

fn daemons_reported_now(jdata: *mut ffi::prte_job_t) {
    // SAFETY: main thread; same steps PRRTE's launchers take when nothing needs launching.
    unsafe { (*jdata).state = ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED as ffi::prte_job_state_t };
    prrte::activate_job_state(jdata, ffi::PRTE_JOB_STATE_DAEMONS_REPORTED);
}

fn launch_round(jdata: *mut ffi::prte_job_t) {
    let daemons = prrte::daemons_job();
    if daemons.is_null() {
        return launch_error(jdata, "PRRTE has no daemon job object");
    }
    // SAFETY: main thread; PRRTE's helper computes which nodes need new daemons.
    let rc = unsafe { ffi::prte_plm_base_setup_virtual_machine(jdata) };
    if rc != prrte::SUCCESS {
        return launch_error(jdata, &format!("setting up the virtual machine failed (PRRTE error {rc})"));
    }
    // SAFETY: attribute lookup on a live job object.
    let do_not_launch = unsafe {
        ffi::prte_get_attribute(&mut (*daemons).attributes, ffi::PRTE_JOB_DO_NOT_LAUNCH as u16, std::ptr::null_mut(), ffi::PMIX_BOOL as ffi::pmix_data_type_t)
    };
    // SAFETY: the daemon job's map is set by setup_virtual_machine.
    let map = unsafe { (*daemons).map };
    // SAFETY: read only when the map exists.
    let new_daemons = if map.is_null() { 0 } else { unsafe { (*map).num_new_daemons } };
    if do_not_launch || (!map.is_null() && new_daemons == 0) {
        shim::verbose(shim::FRAMEWORK_PLM, 1, "plm:k8s: no new daemons to launch");
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
    let p = params::plm();
    let secret = if p.insecure {
        None
    } else {
        let file = p.secret_file.clone().unwrap_or_default();
        match prrte_k8s::protocol::read_secret_file(std::path::Path::new(&file)) {
            Ok(s) => Some(s),
            Err(e) => return launch_error(jdata, &format!("{e} (parameter plm_k8s_secret_file = {file})")),
        }
    };
    let port = match u16::try_from(p.agent_port) {
        Ok(port) if port > 0 => port,
        _ => return launch_error(jdata, &format!("plm_k8s_agent_port must be a TCP port (1-65535), not {}", p.agent_port)),
    };
    if p.launch_timeout <= 0 || p.connect_timeout <= 0 {
        return launch_error(jdata, "plm_k8s_launch_timeout and plm_k8s_connect_timeout must be positive numbers of seconds");
    }

    // prte's own PMIx tool URI, for the agents to publish in their pods (so `prrte-k8s prun`
    // works from any pod), when it is one other pods can reach.
    let dvm_uri = shim::server_uri().filter(|u| {
        prrte_k8s::protocol::validate_dvm_uri(u).is_ok() && !u.contains("tcp4://127.")
    });
    if dvm_uri.is_none() {
        shim::verbose(shim::FRAMEWORK_PLM, 1, "plm:k8s: prte's tool listener is not reachable from other pods (set --pmixmca ptl_base_if_include to the pod network); no DVM URI published");
    }

    let mut targets = Vec::new();
    let mut names = BTreeMap::new();
    let mut unresolved = Vec::new();
    // SAFETY: map->nodes is a live pointer array of prte_node_t on the main thread.
    let nodes = unsafe { (*map).nodes };
    // SAFETY: as above.
    let size = unsafe { (*nodes).size };
    for i in 0..size {
        let node: *mut ffi::prte_node_t = prrte::array_get(nodes, i);
        if node.is_null() {
            continue;
        }
        // SAFETY: a live node of the map.
        let (flags, daemon, name, raw) = unsafe { ((*node).flags, (*node).daemon, prrte::string((*node).name), prrte::string((*node).rawname)) };
        if flags & ffi::PRTE_NODE_FLAG_DAEMON_LAUNCHED as ffi::prte_node_flags_t != 0 || daemon.is_null() {
            continue;
        }
        let name = name.unwrap_or_default();
        // SAFETY: a live daemon proc object.
        let vpid = unsafe { (*daemon).name.rank };
        let addr = raw
            .as_deref()
            .and_then(|r| r.parse::<IpAddr>().ok())
            .or_else(|| pods::lookup(&name).map(|a| IpAddr::V4(a.ip)));
        let pod = pods::lookup(&name).map(|a| a.pod).unwrap_or_else(|| name.clone());
        match addr {
            Some(ip) => {
                names.insert(vpid, (pod.clone(), name.clone()));
                targets.push((
                    LaunchTarget { id: vpid, pod, addr: SocketAddr::new(ip, port) },
                    LaunchRequest { argv: prted_args::for_vpid(&template, vpid_slot, vpid), env: env.clone(), dvm_uri: dvm_uri.clone() },
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
    shim::verbose(shim::FRAMEWORK_PLM, 1, &format!("plm:k8s: launching {} daemons through their pods' agents", targets.len()));
    let opts = LaunchOptions {
        secret,
        connect_timeout: Duration::from_secs(p.connect_timeout as u64),
        request_timeout: Duration::from_secs(p.launch_timeout as u64),
        kill_grace: Duration::from_secs(5),
    };
    let launcher = Launcher::start(targets, opts, Box::new(move |ev| mainloop::post(move || on_event(generation, ev))));

    // The startup timeout PRRTE lacks.
    let (timer_tx, timer_rx) = mpsc::channel::<()>();
    let timeout = Duration::from_secs(p.launch_timeout as u64);
    let _ = std::thread::Builder::new().name("prrte-k8s-launch-timer".into()).spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = timer_rx.recv_timeout(timeout) {
            mainloop::post(move || on_timeout(generation, timeout));
        }
    });
    ROUNDS.lock().unwrap_or_else(|e| e.into_inner()).push(Round {
        generation,
        daemons: daemons as usize,
        targets: names,
        failed: BTreeSet::new(),
        launcher: Some(launcher),
        _timer: timer_tx,
    });
    // SAFETY: main thread; as PRRTE's launchers: launched, and the daemons' callbacks do the rest.
    unsafe {
        (*jdata).state = ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED as ffi::prte_job_state_t;
        (*daemons).state = ffi::PRTE_JOB_STATE_DAEMONS_LAUNCHED as ffi::prte_job_state_t;
    }
}

/// prted's arguments (without the executable) and the index of the vpid in them.
fn build_template() -> Result<(Vec<String>, usize), String> {
    let mut argc: c_int = 0;
    let mut argv: *mut *mut std::os::raw::c_char = std::ptr::null_mut();
    let mut vpid_index: c_int = -1;
    let ess = crate::abi::cstring("env");
    // SAFETY: PRRTE's helpers append to a PMIx argv we own and free below; `ess` outlives the call.
    let rc = unsafe {
        let rc = ffi::prte_plm_base_setup_prted_cmd(&mut argc, &mut argv);
        if rc < 0 {
            rc
        } else {
            ffi::prte_plm_base_prted_append_basic_args(&mut argc, &mut argv, ess.as_ptr() as *mut _, &mut vpid_index)
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
            full.push(prrte::string(p).unwrap_or_default());
            i += 1;
        }
        // SAFETY: frees the argv PMIx allocated.
        unsafe { ffi::PMIx_Argv_free(argv) };
    }
    if rc != prrte::SUCCESS {
        return Err(format!("building prted's command line failed (PRRTE error {rc})"));
    }
    shim::verbose(shim::FRAMEWORK_PLM, 2, &format!("plm:k8s: prted command: {}", full.join(" ")));
    usize::try_from(vpid_index)
        .ok()
        .and_then(|i| prted_args::agent_template(&full, i))
        .ok_or_else(|| "PRRTE's prted command line has no vpid slot".to_string())
}

fn with_round<R>(generation: u64, f: impl FnOnce(&mut Round) -> R) -> Option<R> {
    let mut rounds = ROUNDS.lock().unwrap_or_else(|e| e.into_inner());
    rounds.iter_mut().find(|r| r.generation == generation).map(f)
}

/// Current state of a daemon proc, if it exists.
fn daemon_state(daemons: *mut ffi::prte_job_t, vpid: u32) -> Option<(*mut ffi::prte_proc_t, u32)> {
    // SAFETY: main thread; the daemon job's procs array holds prte_proc_t by vpid.
    let procs = unsafe { (*daemons).procs };
    let proc_: *mut ffi::prte_proc_t = prrte::array_get(procs, vpid as c_int);
    if proc_.is_null() {
        None
    } else {
        // SAFETY: a live proc object.
        Some((proc_, unsafe { (*proc_).state } as u32))
    }
}

/// Mark a daemon failed to start, the way PRRTE's launchers do; PRRTE then aborts the DVM.
fn fail_daemon(daemons: *mut ffi::prte_job_t, vpid: u32) {
    let Some((proc_, state)) = daemon_state(daemons, vpid) else { return };
    if state == ffi::PRTE_PROC_STATE_FAILED_TO_START {
        return;
    }
    // SAFETY: main thread; updates of PRRTE's daemon bookkeeping as its own launchers make them.
    unsafe {
        (*proc_).state = ffi::PRTE_PROC_STATE_FAILED_TO_START as ffi::prte_proc_state_t;
        (*daemons).num_terminated += 1;
        ffi::prte_rml_route_lost(vpid);
        shim::prrte_k8s_shim_update_exit_status(1);
        shim::prrte_k8s_shim_activate_proc_state(&mut (*proc_).name as *mut _ as *mut c_void, ffi::PRTE_PROC_STATE_FAILED_TO_START as c_int);
    }
}

fn on_event(generation: u64, ev: LaunchEvent) {
    if FINALIZED.load(Ordering::Acquire) {
        return;
    }
    // While PRRTE shuts the daemons down, only an abnormal end (a signal, a non-zero code, a lost
    // agent) is still worth reporting: it may be why PRRTE is shutting down.
    if SHUTTING_DOWN.load(Ordering::Acquire) && !matches!(&ev, LaunchEvent::Exited { status, .. } if abnormal(status)) {
        return;
    }
    // After we asked the agents to stop their daemons, SIGTERM and a lost connection are ours.
    if FINAL_SWEEP.load(Ordering::Acquire)
        && matches!(&ev, LaunchEvent::Exited { status: ExitDesc::Signal(15) | ExitDesc::ConnectionLost(_), .. })
    {
        return;
    }
    let Some((daemons, node)) = with_round(generation, |r| {
        let id = match &ev {
            LaunchEvent::Started { id, .. } | LaunchEvent::Failed { id, .. } | LaunchEvent::Exited { id, .. } => *id,
        };
        (r.daemons as *mut ffi::prte_job_t, r.targets.get(&id).map(|t| t.1.clone()).unwrap_or_default())
    }) else {
        return;
    };
    match ev {
        LaunchEvent::Started { id, pod, pid } => {
            shim::verbose(shim::FRAMEWORK_PLM, 1, &format!("plm:k8s: daemon {id} started in pod {pod} (node {node}) as pid {pid}"));
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
                // SAFETY: a plain global PRRTE reports as its exit status.
                unsafe { shim::prrte_k8s_shim_update_exit_status(1) };
                prrte::error_box(
                    &format!("PRRTE's daemon in pod {pod} ended while the DVM was running."),
                    &format!("Daemon {id} (node {node}): {status}. PRRTE will now shut the DVM down."),
                );
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
    let Some((daemons, targets, failed)) = with_round(generation, |r| (r.daemons as *mut ffi::prte_job_t, r.targets.clone(), r.failed.clone())) else {
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
    let list: Vec<String> = missing.iter().map(|(id, pod, node)| format!("  pod {pod} (node {node}, daemon {id})")).collect();
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
