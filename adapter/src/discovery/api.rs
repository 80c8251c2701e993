//! Bounded API calls and the mapping of client errors to [`DiscoveryError`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::client::{error_chain, ApiClient};
use super::error::DiscoveryError;
use super::selector::SelectorError;
use crate::settings::mca;

/// What discovery is doing when a call fails, for messages and RBAC rules.
#[derive(Debug, Clone)]
pub struct Operation {
    pub verb: &'static str,
    pub resource: &'static str,
    pub group: &'static str,
    pub namespace: String,
    pub name: Option<String>,
    pub selector: Option<String>,
}

impl Operation {
    pub fn pods(verb: &'static str, namespace: &str) -> Operation {
        Operation {
            verb,
            resource: "pods",
            group: "",
            namespace: namespace.to_string(),
            name: None,
            selector: None,
        }
    }

    /// `get` of one named object of a namespaced resource.
    pub(crate) fn get_named(
        resource: &'static str,
        group: &'static str,
        namespace: &str,
        name: &str,
    ) -> Operation {
        Operation {
            verb: "get",
            resource,
            group,
            namespace: namespace.to_string(),
            name: Some(name.to_string()),
            selector: None,
        }
    }

    pub fn named(mut self, name: &str) -> Operation {
        self.name = Some(name.to_string());
        self
    }

    pub fn selecting(mut self, selector: &str) -> Operation {
        self.selector = Some(selector.to_string());
        self
    }

    pub fn describe(&self) -> String {
        let mut s = format!("{} {}", self.verb, self.resource);
        if !self.group.is_empty() {
            s.push_str(&format!(".{}", self.group));
        }
        if let Some(n) = &self.name {
            s.push_str(&format!(" {n:?}"));
        }
        s.push_str(&format!(" in namespace {:?}", self.namespace));
        if let Some(sel) = &self.selector {
            s.push_str(&format!(" with label selector {sel:?}"));
        }
        s
    }
}

/// The client plus the overall deadline every call is bounded by.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub api: ApiClient,
    pub deadline: Instant,
    pub timeout: Duration,
}

impl Ctx {
    /// Maps a client error for `op` to a discovery error.
    pub(crate) fn map_error(&self, op: &Operation, err: kube::Error) -> DiscoveryError {
        let url = self.api.url.clone();
        let source_desc = self.api.source.to_string();
        match err {
            kube::Error::Api(status) => {
                let message = if status.message.is_empty() {
                    status.reason.clone()
                } else {
                    status.message.clone()
                };
                match status.code {
                    401 => DiscoveryError::Unauthorized {
                        url,
                        source_desc,
                        operation: op.describe(),
                        message,
                    },
                    403 => DiscoveryError::Forbidden {
                        source_desc: source_desc.into(),
                        verb: op.verb,
                        resource: op.resource,
                        group: op.group,
                        namespace: op.namespace.as_str().into(),
                        name: op.name.as_deref().map(Into::into),
                        message: message.into(),
                    },
                    400 if op.selector.is_some() => DiscoveryError::InvalidSelector {
                        selector: op.selector.clone().unwrap_or_default(),
                        reason: SelectorError::Rejected { message },
                    },
                    code => DiscoveryError::Api {
                        url,
                        operation: op.describe(),
                        code,
                        reason: status.reason.clone(),
                        message,
                    },
                }
            }
            kube::Error::Auth(e) => DiscoveryError::Credentials {
                url,
                source_desc,
                detail: error_chain(&e),
            },
            e @ (kube::Error::HyperError(_)
            | kube::Error::Service(_)
            | kube::Error::RustlsTls(_)
            | kube::Error::ReadEvents(_)) => DiscoveryError::Unreachable {
                url,
                source_desc,
                operation: op.describe(),
                detail: error_chain(&e),
            },
            e => DiscoveryError::Api {
                url,
                operation: op.describe(),
                code: 0,
                reason: "unexpected response".into(),
                message: error_chain(&e),
            },
        }
    }

    /// The error for a call that did not finish before the deadline.
    pub(crate) fn deadline_error(&self, op: &Operation) -> DiscoveryError {
        DiscoveryError::Unreachable {
            url: self.api.url.clone(),
            source_desc: self.api.source.to_string(),
            operation: op.describe(),
            detail: format!(
                "no answer within the {}s timeout ({})",
                self.timeout.as_secs_f64(),
                mca::TIMEOUT.name()
            ),
        }
    }

    /// Runs one API call, bounded by the deadline; transient failures are retried (see
    /// [`Ctx::retrying`]).
    pub async fn call<T, F, Fut>(&self, op: &Operation, f: F) -> Result<T, DiscoveryError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retrying(op, f, |e| Err(self.map_error(op, e))).await
    }

    /// Reads the object that owns the job's pods (`kind` for messages): "forbidden" and "not
    /// found" are errors that name the Role rule and the `ras_k8s_expected_pods` alternative.
    pub(crate) async fn call_owner<T, F, Fut>(
        &self,
        op: &Operation,
        kind: &'static str,
        f: F,
    ) -> Result<T, DiscoveryError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retrying(op, f, |e| match e {
            kube::Error::Api(status) if matches!(status.code, 403 | 404) => {
                let message = if status.message.is_empty() {
                    status.reason.clone()
                } else {
                    status.message.clone()
                };
                Err(DiscoveryError::OwnerUnreadable {
                    kind,
                    namespace: op.namespace.clone(),
                    name: op.name.clone().unwrap_or_default(),
                    code: status.code,
                    rule: super::error::required_rule(
                        op.group,
                        op.resource,
                        op.verb,
                        op.name.as_deref(),
                    )
                    .into(),
                    message: message.into(),
                })
            }
            e => Err(self.map_error(op, e)),
        })
        .await
    }

    /// Runs one API call whose "not found" or "forbidden" answer is not fatal: those give
    /// `Ok(None)`. Used for optional lookups (owner Jobs, StatefulSets, JobSets).
    pub(crate) async fn call_optional<T, F, Fut>(
        &self,
        op: &Operation,
        mut f: F,
    ) -> Result<Option<T>, DiscoveryError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retrying(
            op,
            || {
                let fut = f();
                async move { fut.await.map(Some) }
            },
            |e| match e {
                kube::Error::Api(status) if matches!(status.code, 403 | 404) => {
                    tracing::debug!(
                        code = status.code,
                        "optional lookup {} skipped: {}",
                        op.describe(),
                        status.message
                    );
                    Ok(None)
                }
                e => Err(self.map_error(op, e)),
            },
        )
        .await
    }

    /// Runs `f` until it succeeds or fails for good, within the deadline. A transient failure
    /// (the server unreachable or closing the connection, HTTP 429 or 5xx) is retried with
    /// exponential backoff ([`RETRY_FIRST`] doubling up to [`RETRY_MAX`]) and logged as a
    /// warning; when the deadline comes first, the last failure is the error, saying how long
    /// it was retried. Any other failure goes to `fail` at once.
    pub async fn retrying<T, F, Fut>(
        &self,
        op: &Operation,
        mut f: F,
        fail: impl FnOnce(kube::Error) -> Result<T, DiscoveryError>,
    ) -> Result<T, DiscoveryError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let start = Instant::now();
        let mut delay = RETRY_FIRST;
        let mut failures = 0u32;
        let mut last: Option<kube::Error> = None;
        loop {
            let err = match tokio::time::timeout_at(self.deadline, f()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if is_transient(&e) => e,
                Ok(Err(e)) => return fail(e),
                Err(_) => {
                    return Err(match last {
                        Some(e) => self.retried_error(op, e, failures, start.elapsed()),
                        None => self.deadline_error(op),
                    })
                }
            };
            failures += 1;
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if remaining <= RETRY_FIRST {
                return Err(self.retried_error(op, err, failures, start.elapsed()));
            }
            let wait = delay.min(remaining - RETRY_FIRST / 2);
            tracing::warn!(
                "cannot {} yet ({}); retrying in {:.1}s (attempt {}, until {})",
                op.describe(),
                short_error(&err),
                wait.as_secs_f64(),
                failures + 1,
                mca::TIMEOUT.name()
            );
            last = Some(err);
            tokio::time::sleep(wait).await;
            delay = (delay * 2).min(RETRY_MAX);
        }
    }

    /// The error for a transient failure that lasted until the deadline.
    fn retried_error(
        &self,
        op: &Operation,
        err: kube::Error,
        failures: u32,
        elapsed: Duration,
    ) -> DiscoveryError {
        let note = format!(
            " (failed {failures} time{} over {:.1}s, retried until the {}s timeout, {})",
            if failures == 1 { "" } else { "s" },
            elapsed.as_secs_f64(),
            self.timeout.as_secs_f64(),
            mca::TIMEOUT.name()
        );
        match self.map_error(op, err) {
            DiscoveryError::Unreachable {
                url,
                source_desc,
                operation,
                detail,
            } => DiscoveryError::Unreachable {
                url,
                source_desc,
                operation,
                detail: detail + &note,
            },
            DiscoveryError::Api {
                url,
                operation,
                code,
                reason,
                message,
            } => DiscoveryError::Api {
                url,
                operation,
                code,
                reason,
                message: message + &note,
            },
            other => other,
        }
    }
}

/// First delay before retrying a transient API failure.
pub(crate) const RETRY_FIRST: Duration = Duration::from_millis(200);
/// Longest delay between retries.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(5);

/// Whether retrying `err` may help: the server could not be reached or dropped the connection,
/// or answered 429 (too many requests) or 5xx (the server or something in front of it failed).
pub(crate) fn is_transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(s) => s.code == 429 || (500..600).contains(&s.code),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// A one-line description of a client error, for retry warnings.
pub(crate) fn short_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => format!("HTTP {} {}: {}", s.code, s.reason, s.message),
        e => error_chain(e),
    }
}
