//! Small typed helpers over PRRTE globals and objects. Main thread only.
use crate::ffi;
use crate::pointers::Carried;
use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;

pub(crate) const SUCCESS: c_int = ffi::PRTE_SUCCESS as c_int;
pub(crate) const ERROR: c_int = ffi::PRTE_ERROR as c_int;

/// Whether this process is the DVM master (prte), not a prted or tool.
pub(crate) fn is_master() -> bool {
    // SAFETY: prte_process_info is initialised before any component is opened; read-only here.
    unsafe {
        (ffi::prte_process_info.proc_type & ffi::PRTE_PROC_MASTER as ffi::prte_proc_type_t) != 0
    }
}

/// The selection string of a framework (the value of `--prtemca ras ...`), if any.
///
/// # Safety
///
/// `fw` points to one of PRRTE's framework structs, registered (its selection is set during
/// registration, before components are queried).
pub(crate) unsafe fn framework_selection(
    fw: *const ffi::pmix_mca_base_framework_t,
) -> Option<String> {
    // SAFETY: `fw` is valid by the caller's promise; framework_selection is a C string or NULL
    // owned by PRRTE for the life of the framework.
    unsafe { crate::cstr::string((*fw).framework_selection) }
}

/// Whether a selection string asks for `name` explicitly (`k8s`, `k8s,ssh`; not `^k8s`).
pub(crate) fn selection_names(selection: Option<&str>, name: &str) -> bool {
    match selection {
        None => false,
        Some(s) if s.trim_start().starts_with('^') => false,
        Some(s) => s.split(',').any(|c| c.trim() == name),
    }
}

/// A zeroed buffer the shim writes an nspace into: PMIx's longest and its NUL.
pub(crate) fn nspace_buffer() -> [c_char; ffi::PMIX_MAX_NSLEN as usize + 1] {
    [0; ffi::PMIX_MAX_NSLEN as usize + 1]
}

/// The daemons' job object (the DVM job), which lives until prte exits.
pub(crate) fn daemons_job() -> Option<JobRef> {
    // SAFETY: prte_process_info.myproc.nspace is a NUL-terminated nspace set at init.
    let p = unsafe {
        let info = std::ptr::addr_of!(ffi::prte_process_info);
        ffi::prte_get_job_data_object((*info).myproc.nspace.as_ptr())
    };
    // SAFETY: the daemon job object is never freed while prte runs; like everything here, used
    // on the main thread.
    unsafe { JobRef::new(p) }
}

/// Item `i` of a PMIx pointer array (NULL for a NULL array).
///
/// # Safety
///
/// `array` is NULL or a live PMIx pointer array whose items are `T`; main thread.
pub(crate) unsafe fn array_get<T>(array: *mut ffi::pmix_pointer_array_t, i: c_int) -> *mut T {
    if array.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `array` is a live PMIx pointer array (caller's promise); the shim bounds-checks
    // the index.
    unsafe { ffi::prrte_k8s_shim_pointer_array_get(array.cast(), i).cast() }
}

/// A PRRTE job object known to be live, used on the main thread. Built once where a callback
/// receives the raw pointer ([`JobRef::new`]); the functions taking it are safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobRef(NonNull<ffi::prte_job_t>);

impl JobRef {
    /// `None` for NULL.
    ///
    /// # Safety
    ///
    /// `p` is NULL or a live job object that stays alive for as long as the `JobRef` (or a copy)
    /// is used, and the `JobRef` is used only on PRRTE's main thread.
    pub(crate) unsafe fn new(p: *mut ffi::prte_job_t) -> Option<JobRef> {
        NonNull::new(p).map(JobRef)
    }

    pub(crate) fn as_ptr(self) -> *mut ffi::prte_job_t {
        self.0.as_ptr()
    }

    /// The job's address, to carry through our threads back to the main thread
    /// ([`JobRef::arrived`]).
    pub(crate) fn carry(self) -> Carried<ffi::prte_job_t> {
        Carried::new(self.0)
    }

    /// A job carried back to the main thread.
    ///
    /// # Safety
    ///
    /// As for [`JobRef::new`] of the carried pointer: a live job object, used on the main thread.
    pub(crate) unsafe fn arrived(job: Carried<ffi::prte_job_t>) -> JobRef {
        JobRef(job.get())
    }

    /// Takes a reference to the job object (`PMIX_RETAIN`): it stays alive, whatever PRRTE does
    /// with the job meanwhile, until [`JobRef::release`].
    pub(crate) fn retain(self) {
        // SAFETY: the job is live and we are on the main thread (`JobRef::new`'s contract).
        unsafe { ffi::prrte_k8s_shim_retain(self.as_ptr().cast()) }
    }

    /// Drops a reference to the job object (`PMIX_RELEASE`).
    ///
    /// # Safety
    ///
    /// The reference was taken by [`JobRef::retain`] and is dropped once; the `JobRef` (and its
    /// copies) is not used after unless other references keep the job alive.
    pub(crate) unsafe fn release(self) {
        // SAFETY: as promised by our caller; main thread.
        unsafe { ffi::prrte_k8s_shim_release(self.as_ptr().cast()) }
    }

    /// Activates `state` of the job in PRRTE's state machine.
    pub(crate) fn activate(self, state: u32) {
        // SAFETY: the job is live and we are on the main thread (`JobRef::new`'s contract); the
        // state machine copies what it needs.
        unsafe { ffi::prrte_k8s_shim_activate_job_state(self.as_ptr().cast(), state as c_int) }
    }

    /// Sets the job's state field without activating anything (as PRRTE's launchers do).
    pub(crate) fn set_state(self, state: u32) {
        // SAFETY: as in `activate`; a plain field of the live job object.
        unsafe { (*self.as_ptr()).state = state as ffi::prte_job_state_t };
    }
}

/// A boxed error message in PRRTE's style, on PRRTE's error output.
pub(crate) fn error_box(title: &str, body: &str) {
    let rule = "-".repeat(74);
    crate::shim::output(&format!("{rule}\n{title}\n\n{body}\n{rule}"));
}
