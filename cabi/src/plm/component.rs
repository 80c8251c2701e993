//! The `plm k8s` component: its struct, parameter registration and selection query.
use crate::boundary::boundary;
use crate::component::{self, Offer};
use crate::shim::Framework;
use crate::{ffi, params, prrte, version_guard};
use std::os::raw::c_int;

/// The PLM component (`prte --prtemca plm k8s`). PLM framework version 2.0.0.
#[no_mangle]
#[used]
pub static mut prte_mca_plm_k8s_component: ffi::pmix_mca_base_component_t =
    component::component("plm", (2, 0, 0), Some(query), Some(register_params));

pub(crate) fn component_ptr() -> *const ffi::pmix_mca_base_component_t {
    std::ptr::addr_of!(prte_mca_plm_k8s_component)
}

/// PMIx's `register_component_params`: declines in a PRRTE or PMIx other than the one the library
/// was built for ([`version_guard`]), else registers the `plm_k8s_*` parameters.
///
/// # Safety
///
/// Called by PMIx on the main thread, like every MCA callback.
pub(crate) unsafe extern "C" fn register_params() -> c_int {
    if !version_guard::admits("plm k8s version guard") {
        return version_guard::DECLINE;
    }
    boundary("plm k8s register", prrte::ERROR, || {
        // SAFETY: our own component struct, on the main thread PMIx calls us on.
        unsafe { params::register_plm(component_ptr()) };
        prrte::SUCCESS
    })
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
    boundary("plm k8s query", prrte::ERROR, || {
        let p = params::plm();
        let offer = Offer {
            module: super::module::module_ptr().cast(),
            priority: p.priority,
        };
        let framework = std::ptr::addr_of!(ffi::prte_plm_base_framework);
        // SAFETY: out-pointers as PMIx passes them (our caller's promise); `framework` is PRRTE's
        // PLM framework struct, registered before its components are queried.
        unsafe {
            component::query(module, priority, Framework::Plm, framework, offer, || {
                let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
                    && p.secret_file
                        .as_deref()
                        .is_some_and(|f| std::path::Path::new(f).is_file());
                if in_cluster {
                    Ok(())
                } else {
                    Err("not in a Kubernetes pod with an agent secret mounted")
                }
            })
        }
    })
}
