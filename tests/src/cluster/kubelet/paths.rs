//! Where a pod's files are in its directory on the node.

/// The container's log, in the pod's directory.
pub(super) const CONTAINER_LOG: &str = "container.log";
