//! The `ras k8s` component: its struct, parameter registration and selection query.
use crate::boundary::boundary;
use crate::component::{self, Offer};
use crate::shim::Framework;
use crate::{ffi, params, prrte, version_guard};
use std::os::raw::c_int;

/// The RAS component (`prte --prtemca ras k8s`). RAS framework version 2.0.0.
#[no_mangle]
#[used]
pub static mut prte_mca_ras_k8s_component: ffi::pmix_mca_base_component_t =
    component::component("ras", (2, 0, 0), Some(query), Some(register_params));

pub(crate) fn component_ptr() -> *const ffi::pmix_mca_base_component_t {
    std::ptr::addr_of!(prte_mca_ras_k8s_component)
}

/// PMIx's `register_component_params`: declines in a PRRTE or PMIx other than the one the library
/// was built for ([`version_guard`]), else registers the `ras_k8s_*` parameters.
///
/// # Safety
///
/// Called by PMIx on the main thread, like every MCA callback.
pub(crate) unsafe extern "C" fn register_params() -> c_int {
    if !version_guard::admits("ras k8s version guard") {
        return version_guard::DECLINE;
    }
    boundary("ras k8s register", prrte::ERROR, || {
        // SAFETY: our own component struct, on the main thread PMIx calls us on.
        unsafe { params::register_ras(component_ptr()) };
        prrte::SUCCESS
    })
}

/// Whether this process looks like it runs in (or is pointed at) a Kubernetes cluster.
fn kubernetes_environment(p: &params::RasParams) -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || p.kubeconfig.is_some()
        || p.selector.is_some()
}

/// PMIx's `query_component` (see [`component::query`]).
///
/// # Safety
///
/// `module` and `priority` are NULL or valid out-pointers, as PMIx passes them.
pub(crate) unsafe extern "C" fn query(
    module: *mut *mut ffi::pmix_mca_base_module_t,
    priority: *mut c_int,
) -> c_int {
    boundary("ras k8s query", prrte::ERROR, || {
        let p = params::ras();
        let offer = Offer {
            module: super::module::module_ptr().cast(),
            priority: p.priority,
        };
        let framework = std::ptr::addr_of!(ffi::prte_ras_base_framework);
        // SAFETY: out-pointers as PMIx passes them (our caller's promise); `framework` is PRRTE's
        // RAS framework struct, registered before its components are queried.
        unsafe {
            component::query(module, priority, Framework::Ras, framework, offer, || {
                if kubernetes_environment(&p) {
                    Ok(())
                } else {
                    Err("no Kubernetes environment (KUBERNETES_SERVICE_HOST unset, no ras_k8s_kubeconfig or ras_k8s_selector)")
                }
            })
        }
    })
}
