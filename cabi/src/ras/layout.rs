//! The RAS module's two layouts, and which one the running PRRTE has.
//!
//! PRRTE 3.0.8's module has four entries (`init`, `allocate`, `deallocate`, `finalize`). Our
//! patch 0003 (patch level `k8s2`; PRRTE 4.1 upstream) inserts `modify` before `finalize`, so a
//! module of the wrong layout would have its `finalize` called as `modify` or the reverse. The
//! components are loaded into PRRTEs of both kinds (our own build, Debian's stock 3.0.8 in an
//! injected job), whatever headers they were compiled against, so the layout is chosen when
//! prte asks for the module: the five-entry one only where the process exports
//! `prte_ras_base_modify_complete`, the completion function patch 0003 adds and no other 3.0.8
//! has (docs/pmix-allocation-requests.md, "ABI").
use crate::ffi;
use std::os::raw::c_int;
use std::sync::OnceLock;

/// `modify(prte_pmix_server_req_t *req)` as patch 0003 declares it: the request is opaque here.
pub(crate) type ModifyFn = Option<unsafe extern "C" fn(req: *mut std::os::raw::c_void) -> c_int>;

/// PRRTE 3.0.8's `prte_ras_base_module_t`.
#[repr(C)]
pub(crate) struct Module4 {
    pub(crate) init: ffi::prte_ras_base_module_init_fn_t,
    pub(crate) allocate: ffi::prte_ras_base_module_allocate_fn_t,
    pub(crate) deallocate: ffi::prte_ras_base_module_dealloc_fn_t,
    pub(crate) finalize: ffi::prte_ras_base_module_finalize_fn_t,
}

/// The module with patch 0003 (and PRRTE 4.1's): `modify` before `finalize`.
#[repr(C)]
pub(crate) struct Module5 {
    pub(crate) init: ffi::prte_ras_base_module_init_fn_t,
    pub(crate) allocate: ffi::prte_ras_base_module_allocate_fn_t,
    pub(crate) deallocate: ffi::prte_ras_base_module_dealloc_fn_t,
    pub(crate) modify: ModifyFn,
    pub(crate) finalize: ffi::prte_ras_base_module_finalize_fn_t,
}

/// The symbol that tells a PRRTE with patch 0003 apart.
pub(crate) const MODIFY_SYMBOL: &std::ffi::CStr = c"prte_ras_base_modify_complete";

/// Whether the PRRTE this process runs has patch 0003 (the RAS module's `modify`).
pub(crate) fn prrte_has_modify() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| !crate::pointers::symbol(MODIFY_SYMBOL).is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Whether the headers this library was compiled against have patch 0003 (build.rs found
    /// `modify` in the configured tree's `ras.h`).
    const BUILT_WITH_MODIFY: bool = cfg!(prrte_ras_modify);

    /// The layout bindgen read from the build's headers is the one of ours that matches them,
    /// entry by entry; the other differs in size and in `finalize`'s place.
    #[test]
    fn the_build_headers_have_one_of_the_two_layouts() {
        let bindgen = size_of::<ffi::prte_ras_base_module_t>();
        let fin = offset_of!(ffi::prte_ras_base_module_t, finalize);
        let p = size_of::<usize>();
        assert_eq!(size_of::<Module4>(), 4 * p);
        assert_eq!(size_of::<Module5>(), 5 * p);
        assert_eq!(offset_of!(Module4, finalize), 3 * p);
        assert_eq!(offset_of!(Module5, modify), 3 * p);
        assert_eq!(offset_of!(Module5, finalize), 4 * p);
        if BUILT_WITH_MODIFY {
            assert_eq!(bindgen, size_of::<Module5>());
            assert_eq!(fin, offset_of!(Module5, finalize));
        } else {
            assert_eq!(bindgen, size_of::<Module4>());
            assert_eq!(fin, offset_of!(Module4, finalize));
        }
    }

    /// The test binary links the build prefix's libprrte: the running PRRTE is the one the
    /// headers describe, so the symbol is there exactly when the headers have `modify`.
    #[test]
    fn the_symbol_and_the_headers_agree_in_the_build_prefix() {
        assert_eq!(prrte_has_modify(), BUILT_WITH_MODIFY);
    }
}
