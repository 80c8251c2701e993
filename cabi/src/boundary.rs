//! The panic boundary every function PRRTE or the shim calls goes through.
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The text of a panic payload.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `f`; a panic is reported on PRRTE's error output and turned into `on_panic` instead of
/// unwinding into C.
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
