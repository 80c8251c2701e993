//! PRRTE's daemon job as a round sees it, on the main thread: the nodes of the daemon map that
//! need a daemon, prted's command line from PRRTE's own helpers, the daemons' states, and the
//! two ways the PLM tells PRRTE about a daemon (failed to start, lost).
use crate::cstr;
use crate::pointers::Carried;
use crate::prrte::JobRef;
use crate::shim::{self, Framework};
use crate::{ffi, prrte, version_guard};
use prrte_k8s::launch::prted_args::PrtedTemplate;
use prrte_k8s::launch::rounds::{DaemonState, DaemonStates};
use prrte_k8s::launch::targets::DaemonNode;
use prrte_k8s::launch::PrtedArgsError;
use prrte_k8s::profile::ProcStates;
use std::os::raw::c_int;

/// Why PRRTE's daemon job cannot be read or prted's command line not built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DaemonsError {
    #[error("setting up the virtual machine failed (PRRTE error {0})")]
    VirtualMachine(c_int),
    #[error("the daemon job has no map")]
    NoMap,
    #[error("building prted's command line failed (PRRTE error {0})")]
    PrtedCommand(c_int),
    #[error(transparent)]
    PrtedArgs(#[from] PrtedArgsError),
}

/// Sets up the virtual machine and reads the nodes of the daemon map that need a daemon; `None`
/// when PRRTE needs no new daemons.
pub(crate) fn nodes_needing_daemons(
    jdata: JobRef,
    dvm: JobRef,
) -> Result<Option<Vec<DaemonNode>>, DaemonsError> {
    // SAFETY: main thread, live job (`JobRef`); PRRTE's helper computes which nodes need new
    // daemons.
    let rc = unsafe { ffi::prte_plm_base_setup_virtual_machine(jdata.as_ptr()) };
    if rc != prrte::SUCCESS {
        return Err(DaemonsError::VirtualMachine(rc));
    }
    // SAFETY: attribute lookup on the live daemon job object (`JobRef`).
    let do_not_launch = unsafe {
        ffi::prte_get_attribute(
            &mut (*dvm.as_ptr()).attributes,
            ffi::PRTE_JOB_DO_NOT_LAUNCH as u16,
            std::ptr::null_mut(),
            ffi::PMIX_BOOL as ffi::pmix_data_type_t,
        )
    };
    // SAFETY: the daemon job's map is set by setup_virtual_machine.
    let map = unsafe { (*dvm.as_ptr()).map };
    if map.is_null() {
        return if do_not_launch {
            Ok(None)
        } else {
            Err(DaemonsError::NoMap)
        };
    }
    // SAFETY: the map exists (not NULL) and belongs to the live daemon job.
    if do_not_launch || unsafe { (*map).num_new_daemons } == 0 {
        return Ok(None);
    }
    // SAFETY: as above; main thread.
    Ok(Some(unsafe { map_nodes(map) }))
}

/// The nodes of `map` whose daemon is still to be launched.
///
/// # Safety
///
/// `map` is the live daemon job's map; main thread.
unsafe fn map_nodes(map: *mut ffi::prte_job_map_t) -> Vec<DaemonNode> {
    // SAFETY: map->nodes is a live pointer array of prte_node_t (our caller's promise).
    let nodes = unsafe { (*map).nodes };
    // SAFETY: as above.
    let size = unsafe { (*nodes).size };
    let mut out = Vec::new();
    for i in 0..size {
        // SAFETY: the map's node array holds prte_node_t, main thread.
        let node: *mut ffi::prte_node_t = unsafe { prrte::array_get(nodes, i) };
        if node.is_null() {
            continue;
        }
        // SAFETY: a live node of the map.
        let (flags, daemon, name, raw_name) = unsafe {
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
        out.push(DaemonNode {
            // SAFETY: a live daemon proc object.
            vpid: unsafe { (*daemon).name.rank },
            name: name.unwrap_or_default(),
            raw_name,
        });
    }
    out
}

/// prted's arguments (without the executable), from PRRTE's own helpers.
pub(crate) fn build_template() -> Result<PrtedTemplate, DaemonsError> {
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
                ess.as_ptr().cast_mut(),
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
        return Err(DaemonsError::PrtedCommand(rc));
    }
    shim::verbose(
        Framework::Plm,
        2,
        &format!("plm:k8s: prted command: {}", full.join(" ")),
    );
    let vpid_index = usize::try_from(vpid_index).map_err(|_| PrtedArgsError::NoVpidSlot)?;
    Ok(PrtedTemplate::from_prrte(&full, vpid_index)?)
}

/// The daemon job, on the main thread, once a round has recorded it.
pub(crate) fn daemon_job(recorded: Option<Carried<ffi::prte_job_t>>) -> Option<JobRef> {
    // SAFETY: the daemon job object a round recorded, which lives until prte exits; rounds'
    // outcomes are handled on the main thread (posted through the mailbox).
    recorded.map(|dvm| unsafe { JobRef::arrived(dvm) })
}

/// A daemon proc of the daemon job, if it exists.
fn daemon_proc(dvm: JobRef, vpid: u32) -> Option<*mut ffi::prte_proc_t> {
    // SAFETY: main thread, live daemon job (`JobRef`); its procs array holds prte_proc_t by vpid.
    let proc_: *mut ffi::prte_proc_t =
        unsafe { prrte::array_get((*dvm.as_ptr()).procs, vpid as c_int) };
    (!proc_.is_null()).then_some(proc_)
}

// The profile's process states are the headers' (a profile that disagrees fails the build).
const _: () = {
    let s = version_guard::BUILT.proc_states;
    assert!(s.running == ffi::PRTE_PROC_STATE_RUNNING);
    assert!(s.unterminated == ffi::PRTE_PROC_STATE_UNTERMINATED);
    assert!(s.failed_to_start == ffi::PRTE_PROC_STATE_FAILED_TO_START);
    assert!(s.comm_failed == ffi::PRTE_PROC_STATE_COMM_FAILED);
};

/// A PRRTE proc state as the rounds tell states apart, by the profile's numbering.
fn classify(states: &ProcStates, state: u32) -> DaemonState {
    if state < states.running {
        DaemonState::Starting
    } else if state == states.running {
        DaemonState::Running
    } else if state == states.failed_to_start {
        DaemonState::FailedToStart
    } else if state >= states.unterminated {
        DaemonState::Ended
    } else {
        DaemonState::Reported
    }
}

/// The daemons' states in PRRTE's daemon job.
pub(crate) struct Procs {
    dvm: JobRef,
    states: &'static ProcStates,
}

impl Procs {
    /// The daemon job's procs, read by the chosen profile's process states.
    pub(crate) fn new(dvm: JobRef) -> Procs {
        Procs {
            dvm,
            states: &version_guard::components().proc_states,
        }
    }

    /// The daemon job.
    pub(crate) fn dvm(&self) -> JobRef {
        self.dvm
    }
}

impl DaemonStates for Procs {
    fn state(&self, vpid: u32) -> Option<DaemonState> {
        // SAFETY: a live proc object of the daemon job, main thread.
        daemon_proc(self.dvm, vpid).map(|p| classify(self.states, unsafe { (*p).state }))
    }
}

/// Mark a daemon failed to start, the way PRRTE's launchers do; PRRTE then aborts the DVM.
pub(crate) fn fail_daemon(dvm: JobRef, vpid: u32) {
    let Some(proc_) = daemon_proc(dvm, vpid) else {
        return;
    };
    let failed = version_guard::components().proc_states.failed_to_start;
    // SAFETY: main thread, live daemon job and proc; updates of PRRTE's daemon bookkeeping as its
    // own launchers make them; the state machine copies the proc's name.
    unsafe {
        (*proc_).state = failed as ffi::prte_proc_state_t;
        (*dvm.as_ptr()).num_terminated += 1;
        ffi::prte_rml_route_lost(vpid);
        ffi::prrte_k8s_shim_activate_proc_state(
            std::ptr::addr_of_mut!((*proc_).name).cast(),
            failed as c_int,
        )
    };
}

/// A later round refused before anything was launched: its daemons leave the routing tree and
/// their nodes are marked down, so the running DVM neither routes messages to daemons that never
/// started nor maps processes onto their nodes.
pub(crate) fn drop_unlaunched(dvm: JobRef, vpids: &[u32]) {
    for &vpid in vpids {
        let Some(proc_) = daemon_proc(dvm, vpid) else {
            continue;
        };
        // SAFETY: main thread, live daemon job and proc; the same bookkeeping PRRTE's own
        // launchers do for a daemon that is gone (route lost), and the node's state field.
        unsafe {
            ffi::prte_rml_route_lost(vpid);
            let node = (*proc_).node;
            if !node.is_null() {
                (*node).state = ffi::PRTE_NODE_STATE_DOWN as ffi::prte_node_state_t;
            }
        }
    }
}

/// Tell PRRTE a running daemon is lost (`COMM_FAILED`), as its OOB does when a daemon's
/// connection breaks.
pub(crate) fn lost_daemon(dvm: JobRef, vpid: u32) {
    let Some(proc_) = daemon_proc(dvm, vpid) else {
        return;
    };
    let lost = version_guard::components().proc_states.comm_failed;
    // SAFETY: main thread, live daemon job and proc; the state machine copies the proc's name.
    unsafe {
        ffi::prrte_k8s_shim_activate_proc_state(
            std::ptr::addr_of_mut!((*proc_).name).cast(),
            lost as c_int,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_states_are_told_apart_as_the_rounds_need() {
        let s = &version_guard::BUILT.proc_states;
        assert_eq!(
            classify(s, ffi::PRTE_PROC_STATE_INIT),
            DaemonState::Starting
        );
        assert_eq!(
            classify(s, ffi::PRTE_PROC_STATE_RUNNING),
            DaemonState::Running
        );
        assert_eq!(
            classify(s, ffi::PRTE_PROC_STATE_REGISTERED),
            DaemonState::Reported
        );
        assert_eq!(
            classify(s, ffi::PRTE_PROC_STATE_UNTERMINATED),
            DaemonState::Ended
        );
        assert_eq!(
            classify(s, ffi::PRTE_PROC_STATE_TERMINATED),
            DaemonState::Ended
        );
        assert_eq!(
            classify(s, ffi::PRTE_PROC_STATE_COMM_FAILED),
            DaemonState::Ended
        );
        assert_eq!(
            classify(s, ffi::PRTE_PROC_STATE_FAILED_TO_START),
            DaemonState::FailedToStart
        );
    }
}
