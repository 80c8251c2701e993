//! The functions of our C ABI (`include/prrte_k8s.h`) that Rust exports besides the component
//! structs: the modules, for inspection.
use crate::boundary::boundary;
use std::ffi::c_void;

#[no_mangle]
pub extern "C" fn prrte_k8s_ras_module() -> *const c_void {
    boundary("prrte_k8s_ras_module", std::ptr::null(), || {
        crate::ras::module::module_ptr().cast()
    })
}

#[no_mangle]
pub extern "C" fn prrte_k8s_plm_module() -> *const c_void {
    boundary("prrte_k8s_plm_module", std::ptr::null(), || {
        crate::plm::module::module_ptr().cast()
    })
}
