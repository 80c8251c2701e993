//! What the two MCA components PRRTE loads from this library (`ras k8s` in [`crate::ras`],
//! `plm k8s` in [`crate::plm`]) have in common: the component struct PMIx reads, and the answer to
//! PRRTE's selection query.
//!
//! PRRTE finds a component by file name (`prte_mca_<framework>_<name>.so`) and the exported
//! symbol `prte_mca_<framework>_<name>_component`. The same library is installed under both
//! names (one file and a link to it), so both components share one copy of our state.
use crate::shim::{self, Framework};
use crate::{ffi, prrte};
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
pub(crate) const VERSION: (c_int, c_int, c_int) = (0, 1, 0);

/// The component struct of framework `type_name` (framework API `type_version`), named `k8s`.
pub(crate) const fn component(
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

/// A component's answer to the selection query.
pub(crate) struct Offer {
    /// The module PRRTE gets if the component is selected.
    pub(crate) module: *const ffi::pmix_mca_base_module_t,
    /// The component's `<framework>_k8s_priority`.
    pub(crate) priority: c_int,
}

/// Answers PMIx's `query_component` the way both components do: only in prte (the DVM master),
/// and only when the framework's selection names `k8s` explicitly or `available` (called with
/// `explicit` false) finds a Kubernetes environment. `available` returns why not when it
/// declines (a verbose message on the framework's stream says so).
///
/// # Safety
///
/// `module` and `priority` are NULL or valid out-pointers (PMIx passes valid ones), and
/// `framework` points to PRRTE's registered framework struct of `fw`.
pub(crate) unsafe fn query(
    module: *mut *mut ffi::pmix_mca_base_module_t,
    priority: *mut c_int,
    fw: Framework,
    framework: *const ffi::pmix_mca_base_framework_t,
    offer: Offer,
    available: impl FnOnce() -> Result<(), &'static str>,
) -> c_int {
    if module.is_null() || priority.is_null() {
        return prrte::ERROR;
    }
    // SAFETY: both out-pointers are valid (caller's promise) and not NULL.
    unsafe {
        *module = std::ptr::null_mut();
        *priority = 0;
    }
    if !prrte::is_master() {
        return prrte::ERROR;
    }
    // SAFETY: `framework` is PRRTE's registered framework struct (caller's promise).
    let selection = unsafe { prrte::framework_selection(framework) };
    let explicit = prrte::selection_names(selection.as_deref(), "k8s");
    if !explicit {
        if let Err(why) = available() {
            shim::verbose(fw, 2, &format!("{}:k8s: {why}: declining", fw.name()));
            return prrte::ERROR;
        }
    }
    shim::verbose(
        fw,
        2,
        &format!(
            "{}:k8s: available (explicit={explicit}, priority {})",
            fw.name(),
            offer.priority
        ),
    );
    // SAFETY: as above; the module is a static that lives for the process (PRRTE copies it).
    unsafe {
        *module = offer.module.cast_mut();
        *priority = offer.priority;
    }
    prrte::SUCCESS
}
