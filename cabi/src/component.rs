//! The two MCA components PRRTE loads from this library: `ras k8s` and `plm k8s`.
//!
//! PRRTE finds a component by file name (`prte_mca_<framework>_<name>.so`) and the exported
//! symbol `prte_mca_<framework>_<name>_component`. The same library is installed under both
//! names (one file and a link to it), so both components share one copy of our state.
use crate::ffi;
use std::os::raw::{c_char, c_int};

/// A fixed-size, NUL-padded C char array from a string (compile time).
const fn name<const N: usize>(s: &str) -> [c_char; N] {
    let b = s.as_bytes();
    assert!(b.len() < N, "name too long");
    let mut out = [0 as c_char; N];
    let mut i = 0;
    while i < b.len() {
        out[i] = b[i] as c_char;
        i += 1;
    }
    out
}

/// Our component version (reported by prte_info).
pub const VERSION: (c_int, c_int, c_int) = (0, 1, 0);

const fn component(
    type_name: &str,
    type_version: (c_int, c_int, c_int),
    query: ffi::pmix_mca_base_query_component_2_0_0_fn_t,
    register: ffi::pmix_mca_base_register_component_params_2_0_0_fn_t,
) -> ffi::pmix_mca_base_component_t {
    ffi::pmix_mca_base_component_t {
        pmix_mca_major_version: ffi::PMIX_MCA_BASE_VERSION_MAJOR as c_int,
        pmix_mca_minor_version: ffi::PMIX_MCA_BASE_VERSION_MINOR as c_int,
        pmix_mca_release_version: ffi::PMIX_MCA_BASE_VERSION_RELEASE as c_int,
        pmix_mca_project_name: name("prte"),
        pmix_mca_project_major_version: ffi::PRTE_MAJOR_VERSION as c_int,
        pmix_mca_project_minor_version: ffi::PRTE_MINOR_VERSION as c_int,
        pmix_mca_project_release_version: ffi::PRTE_RELEASE_VERSION as c_int,
        pmix_mca_type_name: name(type_name),
        pmix_mca_type_major_version: type_version.0,
        pmix_mca_type_minor_version: type_version.1,
        pmix_mca_type_release_version: type_version.2,
        pmix_mca_component_name: name("k8s"),
        pmix_mca_component_major_version: VERSION.0,
        pmix_mca_component_minor_version: VERSION.1,
        pmix_mca_component_release_version: VERSION.2,
        pmix_mca_open_component: Some(crate::version_guard::open),
        pmix_mca_close_component: None,
        pmix_mca_query_component: query,
        pmix_mca_register_component_params: register,
        reserved: [0; 32],
    }
}

/// The RAS component (`prte --prtemca ras k8s`). RAS framework version 2.0.0.
#[no_mangle]
#[used]
pub static mut prte_mca_ras_k8s_component: ffi::pmix_mca_base_component_t =
    component("ras", (2, 0, 0), Some(crate::ras::query), Some(crate::version_guard::ras_register));

/// The PLM component (`prte --prtemca plm k8s`). PLM framework version 2.0.0.
#[no_mangle]
#[used]
pub static mut prte_mca_plm_k8s_component: ffi::pmix_mca_base_component_t =
    component("plm", (2, 0, 0), Some(crate::plm::query), Some(crate::version_guard::plm_register));

pub fn ras_component_ptr() -> *const ffi::pmix_mca_base_component_t {
    std::ptr::addr_of!(prte_mca_ras_k8s_component)
}

pub fn plm_component_ptr() -> *const ffi::pmix_mca_base_component_t {
    std::ptr::addr_of!(prte_mca_plm_k8s_component)
}
