//! Locking the kubelet's shared state.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, also when a thread panicked holding it (the state stays usable for cleanup).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
