//! Where a pod's files are in its directory on the node.

use std::path::{Path, PathBuf};

/// What another process needs to `exec` into the pod (see [`super::ExecInfo`]).
pub(super) const EXEC_INFO: &str = "exec.json";

/// The log of container `name` in the pod directory `dir` (its current run's output).
pub(super) fn container_log(dir: &Path, name: &str) -> PathBuf {
    dir.join("logs").join(format!("{name}.log"))
}
