//! Our own C ABI (`include/prrte_k8s.h`): result codes, the panic boundary, and the functions
//! exported to C.
use std::ffi::CString;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Version of the ABI between the shim and Rust (`PRRTE_K8S_ABI_VERSION`).
pub const ABI_VERSION: c_int = 1;

/// Result codes (`prrte_k8s_rc_t`). The numbers are stable.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rc {
    Ok = 0,
    InvalidArg = 1,
    Panic = 2,
    Config = 3,
    Discovery = 4,
    Launch = 5,
    Prrte = 6,
    NotAvailable = 7,
}

impl Rc {
    pub const ALL: [Rc; 8] =
        [Rc::Ok, Rc::InvalidArg, Rc::Panic, Rc::Config, Rc::Discovery, Rc::Launch, Rc::Prrte, Rc::NotAvailable];

    pub fn description(self) -> &'static std::ffi::CStr {
        match self {
            Rc::Ok => c"success",
            Rc::InvalidArg => c"invalid argument",
            Rc::Panic => c"internal error (contained panic)",
            Rc::Config => c"invalid MCA parameter value",
            Rc::Discovery => c"pod discovery failed",
            Rc::Launch => c"daemon launch failed",
            Rc::Prrte => c"a PRRTE call failed",
            Rc::NotAvailable => c"no Kubernetes environment",
        }
    }
}

/// A `CString` from text that may contain NUL bytes (they are replaced).
pub fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).expect("NUL bytes were replaced")
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// The panic boundary every function PRRTE or the shim calls goes through: a panic is reported on
/// PRRTE's error output and turned into `on_panic` instead of unwinding into C.
pub fn boundary<T>(what: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let msg = format!("prrte-k8s: internal error in {what}: {}", panic_text(&*p));
            // Reporting must not panic again; eprintln is the fallback if the shim is unusable.
            if catch_unwind(|| crate::shim::output(&msg)).is_err() {
                eprintln!("{msg}");
            }
            on_panic
        }
    }
}

#[no_mangle]
pub extern "C" fn prrte_k8s_abi_version() -> c_int {
    boundary("prrte_k8s_abi_version", -1, || ABI_VERSION)
}

#[no_mangle]
pub extern "C" fn prrte_k8s_strerror(rc: c_int) -> *const c_char {
    boundary("prrte_k8s_strerror", c"unknown result code".as_ptr(), || {
        Rc::ALL
            .iter()
            .find(|r| **r as c_int == rc)
            .map(|r| r.description().as_ptr())
            .unwrap_or(c"unknown result code".as_ptr())
    })
}

#[no_mangle]
pub extern "C" fn prrte_k8s_ras_module() -> *const std::ffi::c_void {
    boundary("prrte_k8s_ras_module", std::ptr::null(), || crate::ras::module_ptr() as *const _)
}

#[no_mangle]
pub extern "C" fn prrte_k8s_plm_module() -> *const std::ffi::c_void {
    boundary("prrte_k8s_plm_module", std::ptr::null(), || crate::plm::module_ptr() as *const _)
}
