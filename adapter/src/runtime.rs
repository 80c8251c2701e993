//! The Tokio runtimes the crate's blocking entry points run their async work on, built in one
//! place: I/O and timers always enabled.

use std::io;

use tokio::runtime::{Builder, Runtime};

/// A runtime on the calling thread, for a caller that blocks on one future (the binaries, the
/// RAS component's discovery).
pub fn current_thread() -> io::Result<Runtime> {
    Builder::new_current_thread().enable_all().build()
}

/// A runtime of `workers` threads of its own, named `name`, for work that runs in the background
/// of a caller that does not block on it (the launcher under the PLM component).
pub fn worker_threads(workers: usize, name: &str) -> io::Result<Runtime> {
    Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()
}
