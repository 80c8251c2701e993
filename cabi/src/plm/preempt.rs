//! The preemption notice to every rank of the DVM's jobs (main thread): the PMIx event
//! `PMIX_JCTRL_PREEMPT_ALERT` from prte, range session (PMIx hands an event prte is the source
//! of to prte's host upcall, which relays it to every daemon, and each daemon's PMIx server to
//! its clients registered for the code), and the site's signal through PRRTE's own
//! signal-the-local-procs command to every daemon. The keys are in `include/prrte_k8s_preempt.h`.
use crate::shim::{self, Framework};
use crate::{ffi, prrte};
use std::ffi::CString;
use std::os::raw::c_void;

/// The infos of the event: not-default, seconds, pod, text.
const NINFO: usize = 4;

/// Tells the ranks that `pod` is told to end, `seconds` left.
pub(crate) fn tell_ranks(pod: &str, seconds: u64, signal: Option<i32>) {
    match notify_event(pod, seconds) {
        Ok(()) => shim::verbose(
            Framework::Plm,
            2,
            &format!("plm:k8s: PMIX_JCTRL_PREEMPT_ALERT sent to every daemon's clients ({seconds} s left)"),
        ),
        Err(e) => prrte::error_box(
            "The k8s PLM component could not send the preemption event.",
            &e.to_string(),
        ),
    }
    if let Some(sig) = signal {
        // SAFETY: main thread; prte_process_info.myproc.nspace is set at init. PRRTE's daemons
        // signal every live local child whatever the nspace (the DVM's is given).
        let rc = unsafe {
            let info = std::ptr::addr_of_mut!(ffi::prte_process_info);
            ffi::prte_plm_base_prted_signal_local_procs((*info).myproc.nspace.as_mut_ptr(), sig)
        };
        if rc != prrte::SUCCESS {
            prrte::error_box(
                "The k8s PLM component could not signal the ranks of the preemption.",
                &format!("PRRTE's signal command failed ({rc}) for signal {sig}"),
            );
        } else {
            shim::verbose(
                Framework::Plm,
                2,
                &format!("plm:k8s: signal {sig} sent to every rank (plm_k8s_preempt_signal)"),
            );
        }
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NULs removed")
}

/// Loads info `i` of `info` with `key` and the value at `data` of PMIx type `ty`.
///
/// # Safety
///
/// `info` holds at least `i + 1` infos from `PMIx_Info_create`; `data` points to a value of `ty`
/// (PMIx copies it).
unsafe fn load(info: *mut ffi::pmix_info_t, i: usize, key: &[u8], data: *const c_void, ty: u32) {
    let key = CString::from_vec_with_nul(key.to_vec()).expect("a C string constant");
    // SAFETY: as the caller promises; PMIx copies key and value.
    unsafe {
        ffi::PMIx_Info_load(info.add(i), key.as_ptr(), data, ty as ffi::pmix_data_type_t);
    }
}

/// Why the preemption event was not raised.
#[derive(Debug, thiserror::Error)]
enum NotifyError {
    #[error("PMIx could not allocate the event's infos")]
    NoInfos,
    #[error("PMIx_Notify_event failed with status {0}")]
    Status(ffi::pmix_status_t),
}

fn notify_event(pod: &str, seconds: u64) -> Result<(), NotifyError> {
    let secs = u32::try_from(seconds).unwrap_or(u32::MAX);
    let pod_c = cstring(pod);
    let text = cstring(&format!(
        "prrte-k8s: pod {pod} is told to end; the job's processes are stopped in {seconds} s"
    ));
    let yes = true;
    // SAFETY: PMIx_Info_create returns NINFO initialised infos (or NULL); each load copies its
    // key and value; the array is freed once, by `release` or below when PMIx did not take it;
    // prte_process_info is set at init and read on the main thread.
    unsafe {
        let info = ffi::PMIx_Info_create(NINFO);
        if info.is_null() {
            return Err(NotifyError::NoInfos);
        }
        let nondefault = std::ptr::from_ref(&yes).cast();
        load(
            info,
            0,
            ffi::PMIX_EVENT_NON_DEFAULT,
            nondefault,
            ffi::PMIX_BOOL,
        );
        let secs_p = std::ptr::from_ref(&secs).cast();
        load(
            info,
            1,
            ffi::PRRTE_K8S_PREEMPT_SECONDS,
            secs_p,
            ffi::PMIX_UINT32,
        );
        // A string is given as the C string itself (PMIx copies it).
        let pod_p = pod_c.as_ptr().cast();
        load(info, 2, ffi::PRRTE_K8S_PREEMPT_POD, pod_p, ffi::PMIX_STRING);
        let text_p = text.as_ptr().cast();
        load(
            info,
            3,
            ffi::PMIX_EVENT_TEXT_MESSAGE,
            text_p,
            ffi::PMIX_STRING,
        );
        // prte itself is the source: PMIx then hands the event to prte's host upcall, which
        // relays it to every daemon (a NULL source would reach only prte's own clients).
        let me = std::ptr::addr_of!(ffi::prte_process_info.myproc);
        let rc = ffi::PMIx_Notify_event(
            ffi::PMIX_JCTRL_PREEMPT_ALERT,
            me,
            ffi::PMIX_RANGE_SESSION as ffi::pmix_data_range_t,
            info,
            NINFO,
            Some(release),
            info.cast(),
        );
        if rc == ffi::PMIX_SUCCESS as ffi::pmix_status_t {
            return Ok(());
        }
        ffi::PMIx_Info_free(info, NINFO);
        if rc == ffi::PMIX_OPERATION_SUCCEEDED {
            return Ok(());
        }
        Err(NotifyError::Status(rc))
    }
}

/// PMIx is done with the event's infos.
///
/// # Safety
///
/// `cbdata` is the info array given to `PMIx_Notify_event` (NINFO infos).
unsafe extern "C" fn release(_status: ffi::pmix_status_t, cbdata: *mut c_void) {
    crate::boundary::boundary("the preemption event's release", (), || {
        // SAFETY: the array given to PMIx_Notify_event, released once, here.
        unsafe { ffi::PMIx_Info_free(cbdata.cast(), NINFO) }
    })
}
