//! Why a pod's containers cannot be prepared (yet).

/// Why a pod's containers cannot be prepared (yet).
pub(in crate::cluster::kubelet) enum PrepareError {
    /// Will not get better (bad spec): the pod fails.
    Fatal(String),
    /// Waits for something to appear (Secret, ConfigMap, ServiceAccount).
    Retry(String),
    /// The container cannot be created as specified (e.g. runAsNonRoot with a root image): the
    /// pod stays Pending with this waiting reason, as on a node.
    Config(&'static str, String),
}

/// A [`PrepareError::Fatal`].
pub(super) fn fatal(m: String) -> PrepareError {
    PrepareError::Fatal(m)
}
