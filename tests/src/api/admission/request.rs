//! The request an HTTP handler is serving on this thread, for the store writes it makes: who
//! asks, on which subresource, whether a dry run, and the warnings admission adds.

use std::cell::RefCell;

/// Who makes a request, as admission sees it (`request.userInfo`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// The request an HTTP handler is serving, for the store's writes it makes.
#[derive(Debug)]
struct Current {
    user: UserInfo,
    subresource: String,
    dry_run: bool,
    warnings: Vec<String>,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Runs `f` (one synchronous store write of a request) as `user`'s request on `subresource`
/// ("" or "status"): the store admits the object it writes. Returns what `f` returns and the
/// warnings the admission added.
pub fn during<T>(
    user: UserInfo,
    subresource: &str,
    dry_run: bool,
    f: impl FnOnce() -> T,
) -> (T, Vec<String>) {
    let previous = CURRENT.with(|c| {
        c.replace(Some(Current {
            user,
            subresource: subresource.to_string(),
            dry_run,
            warnings: Vec::new(),
        }))
    });
    let out = f();
    let current = CURRENT.with(|c| c.replace(previous));
    (out, current.map(|c| c.warnings).unwrap_or_default())
}

/// The request being served on this thread, if a handler set one with [`during`]: its user,
/// subresource and dry run.
pub fn current() -> Option<(UserInfo, String, bool)> {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map(|c| (c.user.clone(), c.subresource.clone(), c.dry_run))
    })
}

/// Adds warnings to the request being served (nothing without one).
pub fn warn(warnings: Vec<String>) {
    CURRENT.with(|c| {
        if let Some(c) = c.borrow_mut().as_mut() {
            c.warnings.extend(warnings);
        }
    });
}

/// Runs `f` as the API server itself (a write it makes on its own behalf, as the
/// ServiceAccount of a new namespace): not admitted.
pub fn as_server<T>(f: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.replace(None));
    let out = f();
    CURRENT.with(|c| c.replace(previous));
    out
}
