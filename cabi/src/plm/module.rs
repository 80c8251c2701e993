//! The `plm k8s` module functions.
//!
//! At `init` we register our own state callback for `LAUNCH_DAEMONS`; PRRTE activates it on its
//! event thread, and [`rounds::launch_round`] takes it from there. `DAEMONS_REPORTED` passes
//! through [`daemons_up`] on its way to PRRTE's own callback. Everything else (naming the
//! DVM master, terminating jobs, signalling procs) is PRRTE's own base code.
use super::{daemons_up, rounds};
use crate::boundary::boundary;
use crate::prrte::JobRef;
use crate::{ffi, mainloop, pointers, prrte};
use std::os::raw::{c_int, c_short, c_void};

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

/// The module PRRTE gets from `query`.
pub(crate) fn module_ptr() -> *const ffi::prte_plm_base_module_t {
    std::ptr::addr_of!(MODULE)
}

unsafe extern "C" fn init() -> c_int {
    boundary("plm k8s init", prrte::ERROR, || {
        if let Err(e) = mainloop::ensure() {
            prrte::error_box(
                "The k8s PLM component could not set up its event.",
                &e.to_string(),
            );
            return prrte::ERROR;
        }
        crate::logging::route(crate::shim::Framework::Plm);
        // SAFETY: main thread during PLM init; these are PRRTE's documented hooks for a launcher.
        unsafe {
            let rc = ffi::prte_plm_base_comm_start();
            if rc != prrte::SUCCESS {
                return rc;
            }
            ffi::prte_plm_globals.daemon_nodes_assigned_at_launch = true;
            let add = ffi::prte_state
                .add_job_state
                .expect("PRRTE's state module has add_job_state");
            let rc = add(
                ffi::PRTE_JOB_STATE_LAUNCH_DAEMONS as ffi::prte_job_state_t,
                Some(launch_daemons),
            );
            if rc != prrte::SUCCESS {
                return rc;
            }
        }
        daemons_up::hook();
        prrte::SUCCESS
    })
}

/// The module's `spawn`: starts the job's state machine.
///
/// # Safety
///
/// `jdata` is the live job object PRRTE spawns; main thread.
unsafe extern "C" fn spawn(jdata: *mut ffi::prte_job_t) -> c_int {
    boundary("plm k8s spawn", prrte::ERROR, || {
        // SAFETY: `jdata` is live (our caller's promise); main thread.
        match unsafe { JobRef::new(jdata) } {
            Some(job) => {
                job.activate(ffi::PRTE_JOB_STATE_INIT);
                prrte::SUCCESS
            }
            None => prrte::ERROR,
        }
    })
}

unsafe extern "C" fn remote_spawn() -> c_int {
    boundary("plm k8s remote_spawn", prrte::ERROR, || {
        ffi::PRTE_ERR_NOT_SUPPORTED
    })
}

unsafe extern "C" fn terminate_orteds() -> c_int {
    boundary("plm k8s terminate_orteds", prrte::ERROR, || {
        rounds::shutting_down();
        // SAFETY: main thread; PRRTE's own way to order every daemon to exit.
        unsafe { ffi::prrte_k8s_shim_prted_exit() }
    })
}

unsafe extern "C" fn finalize() -> c_int {
    boundary("plm k8s finalize", prrte::ERROR, || {
        rounds::finalize();
        mainloop::shutdown();
        // SAFETY: main thread at PLM finalize, as PRRTE's own launchers do.
        unsafe { ffi::prte_plm_base_comm_stop() }
    })
}

/// Our `LAUNCH_DAEMONS` state callback.
///
/// # Safety
///
/// `cbdata` is the state caddy of this activation, as PRRTE's state machine passes it; main
/// thread.
unsafe extern "C" fn launch_daemons(_fd: c_int, _args: c_short, cbdata: *mut c_void) {
    boundary("plm k8s launch_daemons", (), || {
        let caddy = pointers::state_caddy(cbdata);
        // SAFETY: PRRTE passes the state caddy of this activation (our caller's promise).
        let jdata = unsafe { (*caddy).jdata };
        // SAFETY: the caddy holds the job object, which PRRTE keeps alive while the job runs;
        // main thread.
        if let Some(job) = unsafe { JobRef::new(jdata) } {
            rounds::launch_round(job);
        }
        // SAFETY: the caddy is ours to release (PMIX_RELEASE), as every state callback does.
        unsafe { ffi::prrte_k8s_shim_release(caddy.cast()) };
    })
}
