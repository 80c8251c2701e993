//! The crate's pointer conversions, named: a PRRTE object's address carried through our threads
//! and back ([`Carried`]), a state callback's `void *` argument back to its type
//! ([`state_caddy`]), and a function of the process looked up by name ([`function`]). Everywhere
//! else a pointer only changes type by `cast` (to and from the `void *` of a PMIx object the
//! shim takes or returns).
use crate::ffi;
use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

/// The address of a PRRTE or PMIx object, carried through our threads (in a closure posted back
/// to PRRTE's event loop, in a request's state) and used again only on PRRTE's event thread.
/// Only the address travels: nothing reads the object on the way.
pub(crate) struct Carried<T>(NonNull<T>);

impl<T> Clone for Carried<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Carried<T> {}

impl<T> std::fmt::Debug for Carried<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Carried").field(&self.0).finish()
    }
}

// SAFETY: only the address crosses threads; the object behind it is used only on PRRTE's event
// thread, through the raw pointer `get` gives back, under the contract of that use.
unsafe impl<T> Send for Carried<T> {}

impl<T> Carried<T> {
    /// The address of the object `p` points to.
    pub(crate) fn new(p: NonNull<T>) -> Carried<T> {
        Carried(p)
    }

    /// The pointer again, to be used on PRRTE's event thread.
    pub(crate) fn get(self) -> NonNull<T> {
        self.0
    }
}

/// The state caddy PRRTE's state machine hands a state callback as its `void *` argument.
pub(crate) fn state_caddy(cbdata: *mut c_void) -> *mut ffi::prte_state_caddy_t {
    cbdata.cast()
}

/// The address of `name` among the objects loaded into the process; NULL if none exports it.
pub(crate) fn symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with the pseudo-handle RTLD_DEFAULT and a NUL-terminated name only looks the
    // name up among the objects already loaded.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// The function `name` of the process as the function pointer type `F`; `None` if no loaded
/// object exports it.
///
/// # Safety
///
/// `F` is an `extern "C" fn` pointer type that matches the C declaration of `name`.
pub(crate) unsafe fn function<F: Copy>(name: &CStr) -> Option<F> {
    const {
        assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>());
    }
    let p = symbol(name);
    // SAFETY: `p` is the address of the function `name` (not NULL) and `F` its pointer type (our
    // caller's promise), of the same size (checked above).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}
