//! `pmix_info_t` arrays built from Rust values, and values read back out of PMIx's.
//!
//! An [`InfoList`] owns everything its entries point at (strings), so the array stays
//! valid for as long as the list lives; PMIx copies what it keeps.

use std::ffi::{c_char, CStr, CString};

use crate::ffi;

/// A process name: job namespace and rank.
pub(crate) fn proc_name(nspace: &str, rank: u32) -> ffi::pmix_proc_t {
    let mut p = ffi::pmix_proc_t {
        nspace: [0; 256],
        rank,
    };
    copy_str(&mut p.nspace, nspace);
    p
}

/// Copies `s` into a fixed C buffer, truncated to leave its terminating NUL.
fn copy_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// The key of a constant from the bindings (`b"pmix.key\0"`) as text.
pub(crate) fn key_str(key: &[u8]) -> &str {
    let k = key.strip_suffix(&[0]).unwrap_or(key);
    std::str::from_utf8(k).unwrap_or("")
}

/// The text of a fixed C buffer up to its first NUL.
pub(crate) fn buf_str(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether an info entry carries `key`.
pub(crate) fn has_key(info: &ffi::pmix_info_t, key: &[u8]) -> bool {
    buf_str(&info.key) == key_str(key)
}

/// A string PMIx owns, copied; `None` for NULL.
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// What an owned info entry's value is.
pub(crate) enum Value {
    Bool(bool),
    Str(String),
}

/// An array of `pmix_info_t` with the storage its pointers refer to.
#[derive(Default)]
pub(crate) struct InfoList {
    infos: Vec<ffi::pmix_info_t>,
    strings: Vec<CString>,
}

// SAFETY: the raw pointers inside `infos` point only at heap storage owned by the same list
// (`strings`), which moves with it; nothing is shared with another thread.
unsafe impl Send for InfoList {}

impl InfoList {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends `key` = `value`. Strings with an interior NUL are cut there.
    pub(crate) fn push(&mut self, key: &[u8], value: Value) -> &mut Self {
        let mut info = ffi::pmix_info_t::default();
        copy_str(&mut info.key, key_str(key));
        match value {
            Value::Bool(b) => {
                info.value.type_ = ffi::PMIX_BOOL as u16;
                info.value.data.flag = b;
            }
            Value::Str(s) => {
                let c = cstring_lossy(&s);
                info.value.type_ = ffi::PMIX_STRING as u16;
                // The CString's heap buffer does not move when the CString is moved into `strings`.
                info.value.data.string = c.as_ptr().cast_mut();
                self.strings.push(c);
            }
        }
        self.infos.push(info);
        self
    }

    pub(crate) fn len(&self) -> usize {
        self.infos.len()
    }

    /// The array for PMIx (NULL when empty).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut ffi::pmix_info_t {
        if self.infos.is_empty() {
            std::ptr::null_mut()
        } else {
            self.infos.as_mut_ptr()
        }
    }
}

/// A C string of `s`, cut at an interior NUL.
pub(crate) fn cstring_lossy(s: &str) -> CString {
    let cut = s.split('\0').next().unwrap_or("");
    CString::new(cut).unwrap_or_default()
}

/// A NULL-terminated `char **` over owned C strings.
pub(crate) struct Argv {
    _strings: Vec<CString>,
    ptrs: Vec<*mut c_char>,
}

// SAFETY: `ptrs` point only into `_strings`, owned by the same value and moved with it.
unsafe impl Send for Argv {}

impl Argv {
    pub(crate) fn new<S: AsRef<str>>(items: &[S]) -> Self {
        let strings: Vec<CString> = items.iter().map(|s| cstring_lossy(s.as_ref())).collect();
        let mut ptrs: Vec<*mut c_char> = strings.iter().map(|c| c.as_ptr().cast_mut()).collect();
        ptrs.push(std::ptr::null_mut());
        Self {
            _strings: strings,
            ptrs,
        }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut *mut c_char {
        self.ptrs.as_mut_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_strings_round_trip() {
        let mut l = InfoList::new();
        l.push(
            ffi::PMIX_SERVER_URI,
            Value::Str("ns.0;tcp4://10.0.0.1:7120".into()),
        )
        .push(ffi::PMIX_NOTIFY_COMPLETION, Value::Bool(true))
        .push(ffi::PMIX_HOST, Value::Str("a\0b".into()));
        assert_eq!(l.len(), 3);
        let infos = &l.infos;
        assert!(has_key(&infos[0], ffi::PMIX_SERVER_URI));
        assert!(!has_key(&infos[0], ffi::PMIX_HOST));
        // SAFETY: entries 0 and 2 were loaded as strings, 1 as a bool above.
        unsafe {
            assert_eq!(
                c_string(infos[0].value.data.string).as_deref(),
                Some("ns.0;tcp4://10.0.0.1:7120")
            );
            assert!(infos[1].value.data.flag);
            assert_eq!(c_string(infos[2].value.data.string).as_deref(), Some("a"));
        }
    }

    #[test]
    fn long_names_are_cut_and_terminated() {
        let p = proc_name(&"n".repeat(400), 0);
        assert_eq!(buf_str(&p.nspace).len(), 255);
        assert_eq!(key_str(b"pmix.x\0"), "pmix.x");
    }
}
