//! The panic boundary every function PRRTE or the shim calls goes through, and the top of every
//! worker thread of ours that runs async work ([`spawn_worker`]).
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tokio::runtime::Runtime;

/// The text of a panic payload.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
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
pub(crate) fn boundary<T>(what: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
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

/// Why a worker's work gave no result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    /// The worker's async runtime could not be built.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] io::Error),
    /// The work panicked (the panic's text).
    #[error("{0}")]
    Panicked(String),
}

/// Starts thread `name`, which runs `work` with an async runtime of its own and hands `deliver`
/// its result, or why there is none ([`run_worker`]).
pub(crate) fn spawn_worker<T: 'static>(
    name: &str,
    work: impl FnOnce(&Runtime) -> T + Send + 'static,
    deliver: impl FnOnce(Result<T, WorkerError>) + Send + 'static,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || run_worker(work, deliver))
        .map(drop)
}

/// A worker thread's body: `work` on an async runtime on the calling thread; its result, or why
/// there is none (the runtime could not be built, or `work` panicked: the panic stops here), goes
/// to `deliver`, exactly once, before the runtime is dropped.
pub(crate) fn run_worker<T>(
    work: impl FnOnce(&Runtime) -> T,
    deliver: impl FnOnce(Result<T, WorkerError>),
) {
    let (rt, outcome) = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => {
            let outcome = catch_unwind(AssertUnwindSafe(|| work(&rt)))
                .map_err(|p| WorkerError::Panicked(panic_text(&*p)));
            (Some(rt), outcome)
        }
        Err(e) => (None, Err(WorkerError::Runtime(e))),
    };
    deliver(outcome);
    drop(rt);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome<T>(work: impl FnOnce(&Runtime) -> T) -> Vec<Result<T, WorkerError>> {
        let mut got = Vec::new();
        run_worker(work, |o| got.push(o));
        got
    }

    #[test]
    fn a_worker_delivers_its_result_once_with_its_runtime_running() {
        let got = outcome(|rt| rt.block_on(async { 6 * 7 }));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap(), &42);
    }

    #[test]
    fn a_panic_in_a_worker_is_delivered_with_its_text() {
        let got = outcome(|_| -> u32 { panic!("index out of range in a test") });
        assert_eq!(got.len(), 1, "exactly one outcome is delivered");
        match &got[0] {
            Err(WorkerError::Panicked(text)) => {
                assert_eq!(text, "index out of range in a test")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_worker_is_started_on_a_thread_of_its_name() {
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_worker(
            "prrte-k8s-test-worker",
            |_| std::thread::current().name().map(str::to_owned),
            move |o| tx.send(o.unwrap()).unwrap(),
        )
        .unwrap();
        let name = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(name.as_deref(), Some("prrte-k8s-test-worker"));
    }
}
