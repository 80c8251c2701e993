//! Why a reconcile failed ([`ReconcileError`]) and what that becomes. A refusal that no retry changes is the MPIJob's to fix: the
//! API server's 422 (Invalid: a `nodeSelector` key that is no label key, a count past its
//! limit) or 400 (Bad Request) on what the controller applies, the conversion's refusal, an
//! object of the job's name that is another's. Those make the condition `Failed` (the API
//! server's: [`refused_by_server`]). Anything else (the API server unreachable, a conflict, a 5xx) is retried
//! after a backoff that doubles with each failure of the same MPIJob, from [`FIRST`] to
//! [`CAP`] ([`Failures`], [`backoff`]); a reconcile that succeeds starts it again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The reason of a refused MPIJob's `Failed` condition (mpi-operator's event reason for the
/// same).
pub(crate) const INVALID: &str = "ValidationError";

/// The first retry's delay.
pub(crate) const FIRST: Duration = Duration::from_secs(5);
/// The longest delay between retries.
pub(crate) const CAP: Duration = Duration::from_secs(300);

/// The delay before the retry after the `failures`-th failure in a row (1 or more).
pub(crate) fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << doublings).min(CAP)
}

/// The failures in a row of each MPIJob (`namespace/name`).
#[derive(Debug, Default)]
pub(crate) struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// One more failure of `key`: how many in a row now.
    pub(crate) fn failed(&self, key: &str) -> u32 {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(key.to_string()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// `key` reconciled (or is gone): its count starts again.
    pub(crate) fn succeeded(&self, key: &str) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(key);
    }
}

/// Why a reconcile failed: retried, unless it is a refusal ([`ReconcileError::refusal`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the pod cache has not listed the pods yet (the controller's pod watch is failing: see its log)")]
    PodCache,
    #[error("the MPIJob {0} has no namespace")]
    NoNamespace(String),
    #[error("the {kind} {key} exists and is not this MPIJob's (it is being deleted, or is an earlier MPIJob's of the same name, still being deleted): nothing is made; retrying")]
    NotOurs { kind: String, key: String },
    /// What no retry changes: the MPIJob fails with `reason` and `why`.
    #[error("{why}")]
    Refused { reason: &'static str, why: String },
}

impl ReconcileError {
    /// The reason and the message of the condition `Failed` this error makes, when no retry
    /// changes it (None: retried).
    pub(crate) fn refusal(&self) -> Option<(&'static str, String)> {
        match self {
            Self::Refused { reason, why } => Some((reason, why.clone())),
            Self::Api { what, source } => refused_by_server(what, source).map(|m| (INVALID, m)),
            _ => None,
        }
    }
}

pub(crate) fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
    let what = what.into();
    move |source| ReconcileError::Api { what, source }
}

/// The message of the condition `Failed` the error `e` of the request `what` makes, when it is
/// the API server's refusal of the request itself (422 Invalid, 400 Bad Request), which no
/// retry changes (None: retried).
pub(crate) fn refused_by_server(what: &str, e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => Some(format!(
            "{what}: the API server refused it ({} {}): {}",
            s.code, s.reason, s.message
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_five_seconds_to_five_minutes() {
        let secs: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff(u32::MAX), CAP);
        let f = Failures::default();
        assert_eq!(
            (f.failed("a/b"), f.failed("a/b"), f.failed("a/c")),
            (1, 2, 1)
        );
        f.succeeded("a/b");
        assert_eq!(f.failed("a/b"), 1);
    }

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(
                "Job.batch \"pi\" is invalid: spec.template.spec.nodeSelector: Invalid value",
                reason,
            )
            .with_code(code)
            .boxed(),
        )
    }

    #[test]
    fn a_422_or_a_400_is_refused_with_the_servers_message_anything_else_retried() {
        let what = "making the Job team/pi";
        for code in [422, 400] {
            let why = refused_by_server(what, &api(code, "Invalid")).expect("refused");
            assert!(
                why.starts_with(&format!(
                    "making the Job team/pi: the API server refused it ({code} Invalid)"
                )),
                "{why}"
            );
            assert!(why.contains("spec.template.spec.nodeSelector"), "{why}");
        }
        for code in [409, 429, 500, 503, 404, 403] {
            assert_eq!(refused_by_server(what, &api(code, "Other")), None, "{code}");
        }
    }
}
