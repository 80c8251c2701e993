//! Why a connection to the DVM could not be made, or a task has no result.

use super::find::DvmUriError;
use crate::protocol::InvalidDvmUri;

/// Why a connection could not be made, or a task has no result.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    DvmUri(#[from] DvmUriError),
    #[error(transparent)]
    InvalidUri(#[from] InvalidDvmUri),
    #[error(transparent)]
    Pmix(#[from] prrte_k8s_pmix_tool::Error),
    #[error("cannot start the workflow thread: {0}")]
    Thread(std::io::Error),
    /// The task (its index) was never spawned: the connection to the DVM was lost first (run
    /// it again).
    #[error("task {0} not started: the connection to the DVM was lost")]
    NotStarted(usize),
    /// The connection was closed before the task's end was known.
    #[error("the connection to the DVM was closed")]
    Stopped,
}
