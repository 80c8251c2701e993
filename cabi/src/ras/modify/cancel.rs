//! `REQ_CANCEL`: the `EXTEND` named stops while its pods are awaited (its own answer is
//! `PMIX_ERR_JOB_CANCELED`, once the workload is lowered back); the cancel itself is answered
//! at once, on prte's loop. Only the process that made the request may cancel it
//! ([`prrte_k8s::elastic::allocreq::Gate::find`]): another is answered `PMIX_ERR_NO_PERMISSIONS`.
use super::inflight::{verbose, with_state};
use super::request::{self, Req};
use crate::ffi;
use crate::shim;
use prrte_k8s::elastic::allocreq::{Refusal, Requester, Status};
use std::os::raw::c_int;

/// Cancels the `EXTEND` whose request id is `id`, if `who` made it, and answers `req`.
pub(crate) fn cancel(req: Req, id: &str, who: &Requester) {
    let outcome = with_state(|s| {
        let seq = s.gate.find(id, who)?;
        match s.inflight.as_mut().filter(|i| i.seq == seq).and_then(|i| i.cancel.take()) {
            Some(tx) => {
                tx.cancel();
                Ok(())
            }
            None => Err(Refusal {
                status: Status::NotFound,
                reason: format!(
                    "allocation request {id:?} can no longer be cancelled: its pods are being added to the DVM, or it is a release"
                ),
            }),
        }
    });
    match outcome {
        Ok(()) => {
            verbose(format!(
                "ras:k8s: {who} cancelled allocation request {id:?}"
            ));
            request::answer(req, ffi::PMIX_SUCCESS as c_int, &[]);
        }
        Err(r) => {
            shim::output(&format!("ras:k8s: cancel from {who} refused: {}", r.reason));
            request::answer(
                req,
                request::pmix_status(r.status),
                &request::refusal_items(&r),
            );
        }
    }
}
