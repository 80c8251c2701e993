//! Where a pod's files are in its directory on the node.

use std::path::{Path, PathBuf};

/// What another process needs to `exec` into the pod (see [`super::ExecInfo`]).
pub(super) const EXEC_INFO: &str = "exec.json";

/// The file container `name` of an image writes its termination message to (bound at its
/// `terminationMessagePath`).
pub(super) fn termination_log(dir: &Path, name: &str) -> PathBuf {
    dir.join("termination").join(name)
}

/// At most this much of a termination message is kept, as the kubelet keeps it.
pub(super) const TERMINATION_MESSAGE_MAX: u64 = 4096;

/// The log of container `name` in the pod directory `dir` (its current run's output).
pub(super) fn container_log(dir: &Path, name: &str) -> PathBuf {
    dir.join("logs").join(format!("{name}.log"))
}
