//! The one request being served, from its admission by the gate to its answer, and the lines
//! its worker prints on the way (from any thread, printed on prte's loop).
use super::request::{self, Req};
use crate::boundary::WorkerError;
use crate::shim::{self, Framework};
use crate::{ffi, mainloop};
use prrte_k8s::elastic::allocreq::{extend, Gate, Refusal, Status};
use std::os::raw::c_int;
use std::sync::Mutex;

/// The request being served.
pub(crate) struct Inflight {
    pub(crate) seq: u64,
    pub(crate) req: Req,
    /// Fires the cancellation of an `EXTEND` while its pods are awaited; taken (None) once the
    /// request is past that point.
    pub(crate) cancel: Option<extend::Canceller>,
}

/// The gate that admits one request at a time, and the request it admitted.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) gate: Gate,
    pub(crate) inflight: Option<Inflight>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Runs `f` with the state (any thread; never while waiting on anything).
pub(crate) fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(State::default))
}

/// Answers the request in flight `seq` (if it still is: finalize may have answered it) and
/// admits the next one.
pub(crate) fn finish(seq: u64, status: c_int, items: &[(&str, String)]) {
    let req = with_state(|s| {
        s.gate.finish(seq);
        match s.inflight.take() {
            Some(i) if i.seq == seq => Some(i.req),
            other => {
                s.inflight = other;
                None
            }
        }
    });
    if let Some(req) = req {
        request::answer(req, status, items);
    }
}

/// The request in flight `seq` failed doing `what`: a line on prte's output, and the refusal as
/// its answer.
fn fail(seq: u64, what: &str, r: Refusal) {
    say(format!("ras:k8s: {what} failed: {}", r.reason));
    finish(
        seq,
        request::pmix_status(r.status),
        &request::refusal_items(&r),
    );
}

/// The items of a successful answer (key, string value).
pub(crate) type Items = Vec<(&'static str, String)>;

/// The end of a request's worker doing `what`: its answer, its refusal (with a line on prte's
/// output), or, when the worker gave neither (it panicked), `PMIX_ERROR`.
pub(crate) fn conclude(seq: u64, what: &str, outcome: Result<Result<Items, Refusal>, WorkerError>) {
    match outcome {
        Ok(Ok(items)) => finish(seq, ffi::PMIX_SUCCESS as c_int, &items),
        Ok(Err(r)) => fail(seq, what, r),
        Err(WorkerError::Panicked(_)) => finish(seq, ffi::PMIX_ERROR as c_int, &[]),
        Err(e) => fail(
            seq,
            what,
            Refusal {
                status: Status::Error,
                reason: e.to_string(),
            },
        ),
    }
}

/// The allocation id an answer names: the workload and the request's number.
pub(crate) fn alloc_id(name: &str, seq: u64) -> String {
    format!("{name}#{seq}")
}

/// A line on prte's error output, from any thread (printed on prte's loop).
pub(crate) fn say(msg: String) {
    mainloop::post(move || shim::output(&msg));
}

/// A line on the ras framework's verbose stream (level 1), from any thread.
pub(crate) fn verbose(msg: String) {
    mainloop::post(move || shim::verbose(Framework::Ras, 1, &msg));
}
