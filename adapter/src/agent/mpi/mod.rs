//! `--mpi`: the agent serves the MPI the user's image has, with the runtime injected into the
//! pod (`/opt/prrte-k8s`: the static agent, `prrte-k8s-rsh`, the k8s components, the site
//! parameter file) and nothing written into the image.
//!
//! At start the agent finds the image's MPI (`detect`: its daemon on `PATH` or in the
//! directories distributions use, what its programs say about it), decides how its launcher
//! starts daemons on the job's pods (`plan`), and prepares what that launcher needs
//! (`prepare`): for an Open MPI 5 on the PRRTE the components are built for, the k8s components in a component
//! directory of the agent's, so the image's own `prte`/`mpirun` allocates through `ras k8s`
//! and starts the image's `prted` through the pods' agents (`plm k8s`); for any other MPI
//! (Open MPI 5 on another PRRTE, Open MPI 4, MPICH, Intel MPI) `prrte-k8s-rsh` as its ssh and
//! a hostfile of the job's pods written from discovery (numeric order, slots and IPs as `ras
//! k8s` finds them). The batch command and the DVM head get it as environment variables, so
//! the user's command needs no flags. An MPI that cannot be served, or none, makes the agent
//! exit at once naming what it looked for and the remedy (`error`).
//!
//! `prrte-k8s-agent --mpi auto --detect-only` prints what was found and what would be set.

pub(crate) mod detect;
pub(crate) mod error;
pub(crate) mod hydra;
pub(crate) mod kind;
pub mod openmpi;
pub(crate) mod plan;
pub(crate) mod prepare;
pub(crate) mod probe;
pub mod select;

pub use detect::DetectEnv;
pub use plan::{Launch, Plan};
pub use prepare::Prepared;
pub use select::{resolve, wants_detection};

#[cfg(test)]
mod tests;
