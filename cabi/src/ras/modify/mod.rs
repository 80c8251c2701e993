//! The RAS module's `modify` (patch 0003): PMIx allocation requests (`PMIx_Allocation_request`
//! from a rank through its prted, or PMIx's `palloc`) answered by the job's workload.
//!
//! On prte's event loop: the request is read, checked against the DVM's nodes and decided by
//! [`prrte_k8s::elastic::allocreq`] (a refusal is answered at once, with its reason); the slow
//! part runs on a thread of its own: an `EXTEND` raises the workload, awaits the new pods and
//! hands them to the DVM through PRRTE's add-host path; a `RELEASE` sends the daemons of the
//! highest pods the exit command (`prte_ras_base_release_node`, on the loop), waits for them to
//! be gone, then lowers the workload. Every request is answered exactly once through
//! `prte_ras_base_modify_complete`, which PRRTE makes safe to call from any thread. One request
//! at a time, within each requester's budget per minute, the one served last waiting for another
//! that asked meanwhile; a `REQ_CANCEL` from the process that made an `EXTEND` stops it while
//! its pods are awaited ([`prrte_k8s::elastic::allocreq::Gate`]).
//!
//! As PRRTE's own `ras/slurm` splits its dynamic allocation by verb, each verb has its file:
//! [`extend`], [`release`] and [`cancel`]; around them [`request`] (a request read, and its one
//! answer), [`inflight`] (the request being served, from the gate to its answer) and [`pool`]
//! (prte's node pool as the requests see it).
mod cancel;
mod extend;
mod inflight;
mod pool;
mod release;
mod request;

use crate::boundary::boundary;
use crate::{ffi, params, shim};
use inflight::{finish, verbose, with_state, Inflight};
use prrte_k8s::discovery::DiscoveryConfig;
use prrte_k8s::elastic::allocreq::{self, info, Ask, RateLimit, Refusal, Status};
use request::{answer, pmix_status, refusal_items, Req};
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

/// The module's `modify` (patch 0003's contract: return `PMIX_SUCCESS` and answer through
/// `prte_ras_base_modify_complete`, exactly once).
///
/// # Safety
///
/// `req` is the request PRRTE hands over (a `pmix_server_req_t`), live until answered; called on
/// prte's event loop.
pub(crate) unsafe extern "C" fn modify(req: *mut c_void) -> c_int {
    boundary(
        "ras k8s modify",
        ffi::PMIX_ERROR as c_int,
        || match Req::new(req) {
            Some(req) if request::complete_fn().is_some() => {
                serve(req);
                ffi::PMIX_SUCCESS as c_int
            }
            _ => ffi::PMIX_ERR_NOT_SUPPORTED as c_int,
        },
    )
}

/// Serves one request, on prte's loop.
fn serve(req: Req) {
    let (request, who) = request::read(req);
    let (pool, slots) = pool::pool();
    verbose(format!(
        "ras:k8s: allocation request from {who}: {request:?} (the DVM has {} nodes up)",
        pool.len()
    ));
    let refuse = |r: Refusal| {
        shim::output(&format!(
            "ras:k8s: allocation request from {who} refused: {}",
            r.reason
        ));
        answer(req, pmix_status(r.status), &refusal_items(&r));
    };
    let ask = match allocreq::ask(&request, slots) {
        Ok(a) => a,
        Err(r) => return refuse(r),
    };
    if let Ask::Cancel(id) = &ask {
        return cancel::cancel(req, id, &who);
    }
    let p = params::ras();
    let checked = DiscoveryConfig::from_params(&p)
        .map_err(|e| e.to_string())
        .and_then(|cfg| {
            RateLimit::from_params(&p)
                .map(|limit| (cfg, limit))
                .map_err(|e| e.to_string())
        });
    let (cfg, limit) = match checked {
        Ok(c) => c,
        Err(reason) => {
            return refuse(Refusal {
                status: Status::BadParam,
                reason,
            })
        }
    };
    let mut given_back = Vec::new();
    if matches!(ask, Ask::Extend(_)) {
        pool::restore_slots_of_down_nodes();
        if let Err(r) = allocreq::uniform_slots(&pool::all_slots()) {
            return refuse(r);
        }
        given_back = pool::given_back();
    }
    let targets = match allocreq::release_targets(&ask, &pool) {
        Ok(t) => t,
        Err(r) => return refuse(r),
    };
    let (tx, rx) = allocreq::extend::cancellation();
    let seq = match with_state(|s| {
        let seq = s
            .gate
            .begin(&who, request.req_id.as_deref(), limit, Instant::now())?;
        s.inflight = Some(Inflight {
            seq,
            req,
            cancel: matches!(ask, Ask::Extend(_)).then_some(tx),
        });
        Ok(seq)
    }) {
        Ok(seq) => seq,
        Err(r) => return refuse(r),
    };
    let timeout = request.timeout_s.map(Duration::from_secs);
    let spawned = match ask {
        Ask::Extend(n) => extend::start(seq, cfg, n, timeout, given_back, rx),
        _ => release::start(seq, cfg, targets),
    };
    if let Err(e) = spawned {
        let r = Refusal {
            status: Status::Error,
            reason: format!("cannot start a thread: {e}"),
        };
        finish(seq, pmix_status(r.status), &refusal_items(&r));
    }
}

/// At finalize: a request still in flight is answered `PMIX_ERR_JOB_CANCELED` now (its thread's
/// later answer is dropped) and an awaited extension is cancelled.
pub(crate) fn finalize() {
    let left = with_state(|s| s.inflight.take());
    if let Some(mut i) = left {
        if let Some(tx) = i.cancel.take() {
            tx.cancel();
        }
        with_state(|s| s.gate.finish(i.seq));
        answer(
            i.req,
            ffi::PMIX_ERR_JOB_CANCELED as c_int,
            &[(info::TEXT_MESSAGE, "the DVM is shutting down".to_string())],
        );
    }
}
