//! C strings in both directions.
use std::ffi::{CStr, CString};
use std::os::raw::c_char;

/// A `CString` from text that may contain NUL bytes (they are replaced).
pub(crate) fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).expect("NUL bytes were replaced")
}

/// Copies a C string (or NULL) to a Rust string.
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: not NULL, and NUL-terminated and valid by the caller's promise.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_bytes_are_escaped_and_strings_round_trip() {
        let c = cstring("a\0b");
        assert_eq!(c.to_str().unwrap(), "a\\0b");
        // SAFETY: `c` is a live NUL-terminated string.
        assert_eq!(unsafe { string(c.as_ptr()) }.as_deref(), Some("a\\0b"));
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { string(std::ptr::null()) }, None);
    }
}
