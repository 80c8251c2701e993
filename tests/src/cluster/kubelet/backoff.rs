//! How long the kubelet waits between attempts (image pulls, container restarts).

use std::time::Duration;

/// Longest wait between restarts of a failing container.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(10);
