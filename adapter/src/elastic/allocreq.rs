//! PMIx allocation requests (`PMIx_Allocation_request`, PMIx's `palloc`) as `ras k8s` answers
//! them in a PRRTE with our patch 0003: what a request asks, checked against the DVM's nodes,
//! and each refusal with its PMIx status and its reason (docs/pmix-allocation-requests.md, "How
//! `ras k8s` serves the requests"). Decisions only, no I/O: `cabi` reads the request's
//! attributes into a [`Request`] on prte's event loop, asks [`ask`] and [`release_targets`],
//! and carries the work out; the workload's own limits (elastic, `--max-pods`) are
//! [`crate::elastic::grow::check`]'s, turned into a [`Refusal`] by [`from_grow`].

pub mod extend;
mod gate;
pub mod info;
pub mod release;
mod rules;

pub use gate::{Gate, RateLimit, Requester, TURN};
pub use rules::{
    ask, check_given_back, from_grow, next_hostnames, release_targets, uniform_slots, Ask,
    Directive, PoolNode, Refusal, Request, Status,
};

#[cfg(test)]
mod tests;
