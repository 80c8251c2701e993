//! Elasticity: a running job grows and shrinks, in one place.
//!
//! - [`grow`]: `prrte-k8s grow N` and the growth a PMIx allocation request asks for: the
//!   workload raised through its kind's scale patch, the new pods awaited, the limits of an
//!   elastic job checked ([`grow::check`]).
//! - [`allocreq`]: PMIx allocation requests (`PMIx_Allocation_request`, `palloc`) as `ras k8s`
//!   answers them: what one asks, the nodes a release may take, each refusal's status and
//!   reason; extending and releasing through [`grow`].
//! - [`shrink`]: `prrte-k8s shrink N`, which sends a release request through `palloc`: what
//!   its answer means.
//!
//! Whether a PRRTE installation serves allocation requests at all (our patch 0003) is a fact
//! of the build: [`crate::profile::allocation_requests`].

pub mod allocreq;
pub mod grow;
pub mod shrink;
