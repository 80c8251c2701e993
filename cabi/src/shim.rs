//! Declarations of the C shim (`include/prrte_k8s.h`): PRRTE's macros and inline functions as
//! plain functions. PRRTE objects cross as opaque pointers.
use std::os::raw::{c_char, c_int, c_short, c_void};

pub const FRAMEWORK_RAS: c_int = 0;
pub const FRAMEWORK_PLM: c_int = 1;

pub type FdCallback = unsafe extern "C" fn(fd: c_int, flags: c_short, arg: *mut c_void);

/// Ids for `prrte_k8s_shim_sizeof` (`prrte_k8s_type_id_t`).
pub mod type_id {
    pub const COMPONENT: i32 = 0;
    pub const NODE: i32 = 1;
    pub const JOB: i32 = 2;
    pub const PROC: i32 = 3;
    pub const JOB_MAP: i32 = 4;
    pub const RAS_MODULE: i32 = 5;
    pub const PLM_MODULE: i32 = 6;
    pub const STATE_MODULE: i32 = 7;
    pub const LIST: i32 = 8;
    pub const COUNT: i32 = 9;
}

extern "C" {
    pub fn prrte_k8s_shim_abi_version() -> c_int;
    pub fn prrte_k8s_shim_sizeof(type_id: c_int) -> usize;
    pub fn prrte_k8s_shim_list_new() -> *mut c_void;
    pub fn prrte_k8s_shim_list_release(list: *mut c_void);
    pub fn prrte_k8s_shim_list_append(list: *mut c_void, item: *mut c_void);
    pub fn prrte_k8s_shim_list_size(list: *mut c_void) -> usize;
    pub fn prrte_k8s_shim_pointer_array_get(array: *mut c_void, index: c_int) -> *mut c_void;
    pub fn prrte_k8s_shim_node_new(name: *const c_char, rawname: *const c_char) -> *mut c_void;
    pub fn prrte_k8s_shim_retain(obj: *mut c_void);
    pub fn prrte_k8s_shim_release(obj: *mut c_void);
    pub fn prrte_k8s_shim_activate_job_state(jdata: *mut c_void, state: c_int);
    pub fn prrte_k8s_shim_activate_proc_state(proc_name: *mut c_void, state: c_int);
    pub fn prrte_k8s_shim_update_exit_status(status: c_int);
    pub fn prrte_k8s_shim_fd_event_new(fd: c_int, cb: FdCallback, arg: *mut c_void) -> *mut c_void;
    pub fn prrte_k8s_shim_event_free(ev: *mut c_void);
    pub fn prrte_k8s_shim_prted_exit() -> c_int;
    pub fn prrte_k8s_shim_server_uri() -> *mut c_char;
    pub fn prrte_k8s_shim_default_binding_is_set() -> c_int;
    pub fn prrte_k8s_shim_set_default_binding_none();
    pub fn prrte_k8s_shim_output(msg: *const c_char);
    pub fn prrte_k8s_shim_verbose(framework: c_int, level: c_int, msg: *const c_char);
}

/// PRRTE's error output (stderr of prte), one message.
pub fn output(msg: &str) {
    let c = crate::abi::cstring(msg);
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; the shim only reads it.
    unsafe { prrte_k8s_shim_output(c.as_ptr()) }
}

/// Verbose output on the ras or plm framework's stream (shown with `--prtemca <fw>_base_verbose N`).
pub fn verbose(framework: c_int, level: c_int, msg: &str) {
    let c = crate::abi::cstring(msg);
    // SAFETY: as in `output`; the framework stream exists once the framework is open, which it is
    // whenever our component code runs.
    unsafe { prrte_k8s_shim_verbose(framework, level, c.as_ptr()) }
}

/// The URI of prte's PMIx listener (what `--report-uri` writes), if PMIx knows it.
pub fn server_uri() -> Option<String> {
    // SAFETY: the shim returns a malloc'ed NUL-terminated string or NULL; we copy and free it.
    unsafe {
        let p = prrte_k8s_shim_server_uri();
        if p.is_null() {
            return None;
        }
        let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        libc::free(p as *mut std::ffi::c_void);
        Some(s)
    }
}
