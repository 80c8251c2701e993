//! When PRRTE's daemons have all reported, the `DaemonsUp` event on the MPIJob the job was made
//! for ([`prrte_k8s::launch::daemons_up`]): only when the controller named it in the launcher's
//! environment.
//!
//! At PLM init [`hook`] puts `on_daemons_reported` in place of the state machine's callback
//! for `DAEMONS_REPORTED` (PRRTE activates that state once every daemon of a launch reported);
//! it hands the event to a thread of its own and then calls PRRTE's callback, as before. Nothing
//! waits on the network here; a daemon count already recorded is not recorded again (later
//! jobs of the same DVM reach that state too). At PLM finalize, once PRRTE's event loop has
//! stopped, a post still under way gets a few seconds ([`finalize`]): a short job may end right
//! after its daemons.
use crate::boundary::boundary;
use crate::prrte::JobRef;
use crate::shim::{self, Framework};
use crate::{ffi, params, prrte};
use prrte_k8s::launch::daemons_up::{self, Posting, Target};
use std::os::raw::{c_int, c_short, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The callback PRRTE had for `DAEMONS_REPORTED`, which ours calls.
static PREVIOUS: OnceLock<ffi::prrte_k8s_fd_cb_t> = OnceLock::new();
/// The daemon count last recorded (0: none).
static RECORDED: AtomicU32 = AtomicU32::new(0);
/// The last post, until finalize.
static POSTING: Mutex<Option<Posting>> = Mutex::new(None);
/// How long finalize waits for a post under way.
const FINAL_POST_WAIT: Duration = Duration::from_secs(3);
/// When the first launch of daemons began.
static BEGAN: Mutex<Option<Instant>> = Mutex::new(None);

/// Puts our callback for `DAEMONS_REPORTED` in place (main thread, PLM init: PRRTE's state
/// module has registered its states). Without one, nothing is recorded and PRRTE's runs alone.
pub(crate) fn hook() {
    let mut previous: ffi::prrte_k8s_fd_cb_t = None;
    // SAFETY: main thread at PLM init, after the state module's init; the shim swaps the
    // callback of an entry of PRRTE's state list and stores the old one in `previous`.
    let rc = unsafe {
        ffi::prrte_k8s_shim_wrap_job_state(
            ffi::PRTE_JOB_STATE_DAEMONS_REPORTED as c_int,
            Some(on_daemons_reported),
            &mut previous,
        )
    };
    if rc == prrte::SUCCESS {
        let _ = PREVIOUS.set(previous);
    } else {
        shim::verbose(
            Framework::Plm,
            2,
            "plm:k8s: PRRTE's state machine has no DAEMONS_REPORTED state: no DaemonsUp event",
        );
    }
}

/// A launch of daemons begins (main thread): the first one starts the clock.
pub(crate) fn launch_began() {
    let mut began = BEGAN.lock().unwrap_or_else(|e| e.into_inner());
    began.get_or_insert_with(Instant::now);
}

/// Where the event goes, read once from the environment and the `ras_k8s_*` parameters.
fn target() -> Option<&'static Target> {
    static TARGET: OnceLock<Option<Target>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let ras = params::ras();
            Target::from_env(
                &|k| std::env::var(k).ok(),
                ras.kubeconfig.map(PathBuf::from),
                ras.namespace,
            )
        })
        .as_ref()
}

/// Records the event if the daemon job's reported count is new (main thread).
fn record_if_new(dvm: JobRef) {
    // SAFETY: the live daemon job (`JobRef`), read on the main thread.
    let reported = unsafe { (*dvm.as_ptr()).num_reported };
    if reported == 0 || RECORDED.fetch_max(reported, Ordering::Relaxed) >= reported {
        return;
    }
    let Some(target) = target() else {
        return;
    };
    let seconds = BEGAN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map_or(0.0, |t| t.elapsed().as_secs_f64());
    let text = daemons_up::message(reported, seconds);
    shim::verbose(
        Framework::Plm,
        2,
        &format!(
            "plm:k8s: {text}: recording {} on MPIJob {}",
            daemons_up::REASON,
            target.owner.name
        ),
    );
    let posting = daemons_up::post(target.clone(), text);
    *POSTING.lock().unwrap_or_else(|e| e.into_inner()) = Some(posting);
}

/// At PLM finalize (PRRTE's event loop stopped): a post still under way gets up to
/// `FINAL_POST_WAIT` before prte exits (a short job may end right after its daemons).
pub(crate) fn finalize() {
    let posting = POSTING.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(p) = posting {
        if !p.wait(FINAL_POST_WAIT) {
            shim::verbose(
                Framework::Plm,
                1,
                "plm:k8s: warning: the DaemonsUp event was not recorded before prte exited",
            );
        }
    }
}

/// Our `DAEMONS_REPORTED` callback: the event, then PRRTE's own callback with the same caddy.
///
/// # Safety
///
/// Called by PRRTE's state machine on its event thread with the state caddy of this
/// activation.
unsafe extern "C" fn on_daemons_reported(fd: c_int, args: c_short, cbdata: *mut c_void) {
    boundary("plm k8s daemons reported", (), || {
        if let Some(dvm) = prrte::daemons_job() {
            record_if_new(dvm);
        }
    });
    match PREVIOUS.get().copied().flatten() {
        // SAFETY: PRRTE's own callback for this state, called as PRRTE would have, with the
        // caddy it made for it (which that callback releases).
        Some(previous) => unsafe { previous(fd, args, cbdata) },
        // PRRTE had none (it would have made no caddy then): the caddy is ours to release.
        // SAFETY: the state caddy of this activation, a PMIx object nobody else releases.
        None => unsafe { ffi::prrte_k8s_shim_release(cbdata) },
    }
}
