//! How long the kubelet waits between attempts (image pulls, container restarts).

use std::time::Duration;

/// Longest wait between attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// A wait that doubles at each attempt, up to [`MAX_BACKOFF`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    /// First waits `first`.
    pub(super) fn new(first: Duration) -> Backoff {
        Backoff { next: first }
    }

    /// The wait before this attempt (the next one waits twice as long).
    pub(super) fn next(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        wait
    }
}
