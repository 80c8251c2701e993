//! What a discovery reports while it runs.

/// Milestones of a discovery, for progress display and for tests that need to know when the
/// watch is in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Namespace, selector and expected count are settled and the first list is done.
    Resolved {
        namespace: String,
        selector: String,
        selector_source: String,
        expected: u32,
        expected_source: String,
    },
    /// The number of ready pods changed (also sent once after the first list).
    Ready {
        ready: u32,
        expected: u32,
        /// How many selected pods exist but are not ready yet.
        not_ready: u32,
        /// The first of them in natural name order (at most [`WAITING_FOR_SHOWN`](super::wait::WAITING_FOR_SHOWN)).
        waiting_for: Vec<String>,
    },
    /// The pod watcher listed the selected pods (`listed` of them) and watches from there; sent
    /// again whenever it has to list anew (its resource version expired).
    Watching { listed: u32 },
}
