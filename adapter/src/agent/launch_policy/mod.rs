//! What a request may ask of the daemon it starts.
//!
//! The agent starts only its configured prted (launch requests) and the programs of its exec
//! allowlist (exec requests), but a daemon can itself be told to run or load other code: an MCA
//! parameter naming a program or a directory of components or parameter files, an option of
//! its own, an installation prefix, or the address of a "head" that then tells it what to
//! start. So a daemon's command line is checked against an **allowlist** of exactly what its
//! launchers send (`daemons`: PRRTE's k8s PLM and ssh launcher, Open MPI 4.x's rsh launcher,
//! MPICH's and Intel MPI's Hydra), each option spelled out exactly and each value of its
//! shape (`protocol::params`); the address a daemon reports to is pinned to the
//! launcher's own (the authenticated connection's peer, `uri`), and the program a daemon
//! starts others with must be the installed `prrte-k8s-rsh`. Everything else is refused with
//! the reason (`error`). A launch request's environment may carry only the MCA parameters
//! the list admits there (`launch`).
//!
//! Site settings of other kinds belong in the pod spec (the agent's own environment, which the
//! daemon inherits) or in the image's parameter files, which a launcher cannot change.

pub(crate) mod daemons;
pub(crate) mod error;
pub(crate) mod grammar;
pub(crate) mod launch;
pub(crate) mod path;
pub(crate) mod uri;

pub(crate) use launch::check_launch_request;
pub use launch::{check_dvm_uri_host, check_launch};

#[cfg(test)]
mod tests;
