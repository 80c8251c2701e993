//! Why `--mpi` cannot serve the image: each error names what was looked for and the remedy.

use crate::settings::agent;

/// Why the agent cannot serve the image's MPI (it exits at once with this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MpiError {
    #[error("--mpi {choice}: no MPI found in this image: looked for {looked_for} in PATH ({path}) and in {extra}; use an image with Open MPI, MPICH or Intel MPI installed (e.g. Debian's openmpi-bin or mpich), give --mpi the MPI the image has, or name the MPI's daemon with --prted PATH instead of --mpi")]
    NotFound {
        choice: String,
        looked_for: String,
        path: String,
        extra: String,
    },
    #[error("--mpi auto: this image has more than one MPI: {found}; choose one with --mpi openmpi|mpich|intel (or {})", agent::MPI.var())]
    Ambiguous { found: String },
    #[error("--mpi: {what} was found at {daemon} but cannot be used: {why}; fix the image's MPI installation, or name the daemon with --prted PATH instead of --mpi")]
    Unusable {
        what: String,
        daemon: String,
        why: String,
    },
    #[error("--mpi: the injected runtime in {dir} lacks {missing} ({why}); the pod's init container copies it there (prrte-k8s install-runtime --to {dir}), or point --runtime-dir ({}) at it", agent::RUNTIME_DIR.var())]
    Runtime {
        dir: String,
        missing: String,
        why: String,
    },
    #[error("--dvm-head: {0}")]
    Head(String),
    #[error("--mpi: {0}")]
    Setup(String),
}
