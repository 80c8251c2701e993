//! Waking PRRTE's event loop from our own threads.
//!
//! PRRTE state may only be touched on its event thread, and that thread must never wait on the
//! network. Slow work (Kubernetes API calls, agent connections) runs on our threads, which post
//! closures here; a persistent read event on PRRTE's event base, fed by a socket pair, runs them
//! on the event thread.
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::raw::{c_int, c_short, c_void};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

struct Mailbox {
    queue: Mutex<VecDeque<Job>>,
    tx: UnixStream,
    rx: UnixStream,
}

static MAILBOX: OnceLock<Mailbox> = OnceLock::new();
/// The libevent event while registered; NULL when not.
static EVENT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Why the wake-up event cannot be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MainloopError {
    #[error("cannot create the wake-up socket pair: {0}")]
    SocketPair(#[source] std::io::Error),
    #[error("{0}")]
    Nonblocking(#[source] std::io::Error),
    #[error("cannot register an event on PRRTE's event base")]
    Event,
}

fn mailbox() -> Result<&'static Mailbox, MainloopError> {
    if let Some(m) = MAILBOX.get() {
        return Ok(m);
    }
    let (tx, rx) = UnixStream::pair().map_err(MainloopError::SocketPair)?;
    tx.set_nonblocking(true)
        .map_err(MainloopError::Nonblocking)?;
    rx.set_nonblocking(true)
        .map_err(MainloopError::Nonblocking)?;
    let _ = MAILBOX.set(Mailbox {
        queue: Mutex::new(VecDeque::new()),
        tx,
        rx,
    });
    Ok(MAILBOX.get().expect("just set"))
}

/// Register the wake-up event on PRRTE's event base. Main thread only; idempotent.
pub(crate) fn ensure() -> Result<(), MainloopError> {
    let m = mailbox()?;
    if !EVENT.load(Ordering::Acquire).is_null() {
        return Ok(());
    }
    // SAFETY: called on PRRTE's event thread after the event base exists (our components run
    // only after PRRTE initialised it); the fd stays open for the life of the process (static).
    let ev = unsafe {
        crate::ffi::prrte_k8s_shim_fd_event_new(
            m.rx.as_raw_fd(),
            Some(on_wake),
            std::ptr::null_mut(),
        )
    };
    if ev.is_null() {
        return Err(MainloopError::Event);
    }
    EVENT.store(ev, Ordering::Release);
    Ok(())
}

/// Remove the wake-up event (main thread, at finalize). Later posts are kept but never run.
pub(crate) fn shutdown() {
    let ev = EVENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !ev.is_null() {
        // SAFETY: `ev` came from prrte_k8s_shim_fd_event_new and is freed exactly once (swap).
        unsafe { crate::ffi::prrte_k8s_shim_event_free(ev) };
    }
}

/// Run `f` on PRRTE's event thread. Callable from any thread; never blocks on the network.
pub(crate) fn post(f: impl FnOnce() + Send + 'static) {
    let Ok(m) = mailbox() else { return };
    m.queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back(Box::new(f));
    // One byte per post; if the socket buffer is full the loop is already due to wake.
    let _ = (&m.tx).write(&[1u8]);
}

/// Run what has been posted but not yet run (main thread; used at finalize, when PRRTE's event
/// loop no longer runs, so that outcomes that arrived during shutdown are still reported).
pub(crate) fn run_pending() {
    drain();
}

/// The wake-up event's callback (PRRTE's event thread).
///
/// # Safety
///
/// Called by libevent with the arguments given at registration; none is dereferenced.
unsafe extern "C" fn on_wake(_fd: c_int, _flags: c_short, _arg: *mut c_void) {
    crate::boundary::boundary("the event-loop wake-up", (), drain)
}

fn drain() {
    {
        let Some(m) = MAILBOX.get() else { return };
        let mut buf = [0u8; 256];
        loop {
            match (&m.rx).read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        loop {
            let job = m
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            match job {
                Some(job) => crate::boundary::boundary("an event-loop task", (), job),
                None => break,
            }
        }
    }
}
