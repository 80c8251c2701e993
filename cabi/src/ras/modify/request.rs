//! A request PRRTE handed `modify`: what it asks (read through the shim, on prte's loop) and its
//! one answer through `prte_ras_base_modify_complete`, which PRRTE makes safe to call from any
//! thread.
//!
//! `prte_ras_base_modify_complete` exists only in a PRRTE with patch 0003, so it is looked up in
//! the process (a PRRTE without it never calls `modify`: the module it gets has none, see
//! [`crate::ras::layout`]).
use crate::cstr::cstring;
use crate::ffi;
use crate::pointers::{self, Carried};
use prrte_k8s::elastic::allocreq::{self, info, Refusal, Requester, Status};
use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::OnceLock;

/// `prte_ras_base_modify_complete(req, status, info, ninfo)`.
type CompleteFn =
    unsafe extern "C" fn(req: *mut c_void, status: c_int, info: *mut c_void, n: usize);

/// `prte_ras_base_modify_complete`, if this PRRTE has it.
pub(crate) fn complete_fn() -> Option<CompleteFn> {
    static F: OnceLock<Option<CompleteFn>> = OnceLock::new();
    // SAFETY: the function patch 0003 exports with exactly this signature (its base.h).
    *F.get_or_init(|| unsafe { pointers::function(crate::ras::layout::MODIFY_SYMBOL) })
}

/// A request PRRTE handed `modify`, kept until it is answered (PRRTE keeps it alive until then).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Req(Carried<c_void>);

impl Req {
    /// The request PRRTE handed `modify`; `None` for NULL.
    pub(crate) fn new(p: *mut c_void) -> Option<Req> {
        NonNull::new(p).map(|p| Req(Carried::new(p)))
    }
}

/// PMIx's number for a status.
pub(crate) fn pmix_status(s: Status) -> c_int {
    (match s {
        Status::NotSupported => ffi::PMIX_ERR_NOT_SUPPORTED,
        Status::BadParam => ffi::PMIX_ERR_BAD_PARAM,
        Status::OutOfResource => ffi::PMIX_ERR_OUT_OF_RESOURCE,
        Status::ResourceBusy => ffi::PMIX_ERR_RESOURCE_BUSY,
        Status::NotFound => ffi::PMIX_ERR_NOT_FOUND,
        Status::Timeout => ffi::PMIX_ERR_TIMEOUT,
        Status::Canceled => ffi::PMIX_ERR_JOB_CANCELED,
        Status::NoPermissions => ffi::PMIX_ERR_NO_PERMISSIONS,
        Status::RateLimited => ffi::PMIX_ERR_WOULD_BLOCK,
        Status::Error => ffi::PMIX_ERROR,
    }) as c_int
}

/// Answers `req` with `status` and `items` (key, string value). Any thread.
pub(crate) fn answer(req: Req, status: c_int, items: &[(&str, String)]) {
    let Some(complete) = complete_fn() else {
        return;
    };
    let n = items.len();
    let array = if n == 0 {
        std::ptr::null_mut()
    } else {
        // SAFETY: PMIX_INFO_CREATE through the shim (n > 0 entries, or NULL).
        unsafe { ffi::prrte_k8s_shim_info_create(n) }
    };
    if !array.is_null() {
        for (i, (k, v)) in items.iter().enumerate() {
            let (k, v) = (cstring(k), cstring(v));
            // SAFETY: `array` has n entries, i < n; PMIx copies both strings.
            unsafe { ffi::prrte_k8s_shim_info_load_string(array, i, k.as_ptr(), v.as_ptr()) };
        }
    }
    let n = if array.is_null() { 0 } else { n };
    // SAFETY: `req` is the request PRRTE handed `modify`, not answered before (every answer
    // goes through `finish` or is given before the request is recorded); the request takes
    // ownership of `array`.
    unsafe { complete(req.0.get().as_ptr(), status, array, n) };
}

/// The items of an answer that refuses: the reason, as the message PMIx hands the requester.
pub(crate) fn refusal_items(r: &Refusal) -> Vec<(&'static str, String)> {
    vec![(info::TEXT_MESSAGE, r.reason.clone())]
}

/// The request's directive and attributes, and who asked (`req->tproc`).
pub(crate) fn read(req: Req) -> (allocreq::Request, Requester) {
    let p = req.0.get().as_ptr().cast_const();
    // SAFETY: `p` is the live request (`modify`'s contract); the shim reads its fields.
    let directive = unsafe { ffi::prrte_k8s_shim_req_directive(p) };
    let mut n = 0usize;
    // SAFETY: as above; the info array (n entries) lives as long as the request.
    let array = unsafe { ffi::prrte_k8s_shim_req_info(p, &mut n) };
    let mut attrs = Vec::new();
    for i in 0..if array.is_null() { 0 } else { n } {
        // SAFETY: i < n entries of the request's info array; the strings are PMIx's, copied.
        let key = unsafe { crate::cstr::string(ffi::prrte_k8s_shim_info_key(array, i)) };
        let mut number = 0u64;
        // SAFETY: as above.
        let value = unsafe {
            if let Some(s) = crate::cstr::string(ffi::prrte_k8s_shim_info_string(array, i)) {
                info::Value::Text(s)
            } else if ffi::prrte_k8s_shim_info_number(array, i, &mut number)
                == ffi::PMIX_SUCCESS as c_int
            {
                info::Value::Number(number)
            } else {
                info::Value::Other
            }
        };
        attrs.push((key.unwrap_or_default(), value));
    }
    let mut nspace = crate::prrte::nspace_buffer();
    let mut rank = 0u32;
    // SAFETY: `nspace` has PMIX_MAX_NSLEN + 1 bytes, as the shim requires.
    unsafe { ffi::prrte_k8s_shim_req_requester(p, nspace.as_mut_ptr(), &mut rank) };
    // SAFETY: the shim NUL-terminated it.
    let nspace = unsafe { crate::cstr::string(nspace.as_ptr()) }.unwrap_or_default();
    (
        info::request(directive as u8, attrs),
        Requester { nspace, rank },
    )
}
