//! Small typed helpers over PRRTE globals and objects. Main thread only.
use crate::ffi;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

pub const SUCCESS: c_int = ffi::PRTE_SUCCESS as c_int;
pub const ERROR: c_int = ffi::PRTE_ERROR as c_int;

/// Whether this process is the DVM master (prte), not a prted or tool.
pub fn is_master() -> bool {
    // SAFETY: prte_process_info is initialised before any component is opened; read-only here.
    unsafe { (ffi::prte_process_info.proc_type & ffi::PRTE_PROC_MASTER as ffi::prte_proc_type_t) != 0 }
}

/// The selection string of a framework (the value of `--prtemca ras ...`), if any.
pub fn framework_selection(fw: *const ffi::pmix_mca_base_framework_t) -> Option<String> {
    // SAFETY: `fw` is one of PRRTE's static framework structs; framework_selection is a C string
    // or NULL, set during framework registration before components are queried.
    unsafe {
        let p = (*fw).framework_selection;
        if p.is_null() {
            None
        } else {
            Some(CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    }
}

/// Whether a selection string asks for `name` explicitly (`k8s`, `k8s,ssh`; not `^k8s`).
pub fn selection_names(selection: Option<&str>, name: &str) -> bool {
    match selection {
        None => false,
        Some(s) if s.trim_start().starts_with('^') => false,
        Some(s) => s.split(',').any(|c| c.trim() == name),
    }
}

/// The daemons' job object (the DVM job).
pub fn daemons_job() -> *mut ffi::prte_job_t {
    // SAFETY: prte_process_info.myproc.nspace is a NUL-terminated nspace set at init.
    unsafe {
        let info = std::ptr::addr_of!(ffi::prte_process_info);
        ffi::prte_get_job_data_object((*info).myproc.nspace.as_ptr())
    }
}

/// Copy a C string (or NULL) to a Rust string.
pub fn string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: callers pass NUL-terminated strings owned by PRRTE that outlive this call.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Item `i` of a PMIx pointer array.
pub fn array_get<T>(array: *mut ffi::pmix_pointer_array_t, i: c_int) -> *mut T {
    if array.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `array` is a live PMIx pointer array; the shim bounds-checks the index.
    unsafe { crate::shim::prrte_k8s_shim_pointer_array_get(array as *mut c_void, i) as *mut T }
}

pub fn activate_job_state(jdata: *mut ffi::prte_job_t, state: u32) {
    // SAFETY: `jdata` is a live job object; the state machine copies what it needs.
    unsafe { crate::shim::prrte_k8s_shim_activate_job_state(jdata as *mut c_void, state as c_int) }
}

/// A boxed error message in PRRTE's style, on PRRTE's error output.
pub fn error_box(title: &str, body: &str) {
    let rule = "-".repeat(74);
    crate::shim::output(&format!("{rule}\n{title}\n\n{body}\n{rule}"));
}
