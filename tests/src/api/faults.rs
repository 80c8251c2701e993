//! Fault injection for the sandbox API server: tests make it answer errors, end watches early
//! or expire them, delay answers, or refuse connections altogether, to check that clients
//! (discovery in `ras k8s`, kubectl) retry, resume and fail clearly.
//!
//! ```ignore
//! use sandbox::api::faults::{Fault, FaultRule};
//! // The next 3 pod lists answer 500, then the server behaves again.
//! api.inject(FaultRule::new(Fault::Status(500)).path("/pods").list().times(3));
//! // Every pod watch ends after 2 events (the client must watch again).
//! api.inject(FaultRule::new(Fault::CloseWatchAfter(2)).path("/pods").watch());
//! // The next pod watch is expired: 200 with one ERROR event carrying 410 Gone.
//! api.inject(FaultRule::new(Fault::WatchGone).path("/pods").watch().times(1));
//! // The server is down: every connection is closed at once, until set_down(false).
//! api.set_down(true);
//! ```
//!
//! Rules are checked in the order they were added; the first that matches and has uses left
//! applies. [`FaultHandle::hits`] tells how often a rule applied (the handle is what
//! `inject` returns).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server does instead of (or on top of) answering normally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and a Kubernetes `Status` body (500, 503, 429, 403, 404,
    /// 410 Expired for a list, ...).
    Status(u16),
    /// For a watch: answer 200 with one `ERROR` event carrying 410 Gone ("too old resource
    /// version"), then end the stream, as the real API server does for an expired watch.
    WatchGone,
    /// For a watch: end the stream (cleanly) after this many events.
    CloseWatchAfter(usize),
    /// For a watch: end the stream after this long, whatever was sent.
    CloseWatchAfterTime(Duration),
    /// Wait this long, then answer normally.
    Delay(Duration),
}

/// Which requests a rule applies to.
#[derive(Debug, Clone, Default)]
struct Matcher {
    method: Option<String>,
    path: Option<String>,
    watch: Option<bool>,
}

/// One fault and the requests it applies to.
#[derive(Debug, Clone)]
pub struct FaultRule {
    fault: Fault,
    matcher: Matcher,
    /// Uses left (None: unlimited).
    times: Option<u32>,
}

impl FaultRule {
    /// A rule that applies `fault` to every request, without limit.
    pub fn new(fault: Fault) -> FaultRule {
        FaultRule {
            fault,
            matcher: Matcher::default(),
            times: None,
        }
    }
    /// Only requests with this method (GET, POST, ...).
    pub fn method(mut self, m: &str) -> Self {
        self.matcher.method = Some(m.to_ascii_uppercase());
        self
    }
    /// Only requests whose path (without the query) contains `s`, e.g. "/pods" or "/jobs/".
    pub fn path(mut self, s: &str) -> Self {
        self.matcher.path = Some(s.to_string());
        self
    }
    /// Only watches (`?watch=true`/`1`).
    pub fn watch(mut self) -> Self {
        self.matcher.watch = Some(true);
        self
    }
    /// Only requests that are not watches (gets and lists).
    pub fn list(mut self) -> Self {
        self.matcher.watch = Some(false);
        self
    }
    /// At most `n` uses.
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }
}

/// A rule inside the server, with its use counter.
pub(crate) struct Active {
    rule: FaultRule,
    used: AtomicU32,
    hits: Arc<AtomicU64>,
}

/// How often an injected rule applied.
#[derive(Debug, Clone)]
pub struct FaultHandle {
    hits: Arc<AtomicU64>,
}

impl FaultHandle {
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

/// The fault state of one API server.
#[derive(Default)]
pub struct Faults {
    rules: Mutex<Vec<Active>>,
    down: AtomicBool,
    /// Connections refused while down.
    pub refused: AtomicU64,
}

/// Whether a request is a watch, from its query string.
pub fn is_watch(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .any(|(k, v)| k == "watch" && super::query::query_true(&v))
}

impl Faults {
    pub fn add(&self, rule: FaultRule) -> FaultHandle {
        let hits = Arc::new(AtomicU64::new(0));
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Active {
                rule,
                used: AtomicU32::new(0),
                hits: hits.clone(),
            });
        FaultHandle { hits }
    }

    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// The fault for a request, if a rule matches and has uses left (counting the use).
    pub fn pick(&self, method: &str, path: &str, watch: bool) -> Option<Fault> {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        for a in rules.iter() {
            let m = &a.rule.matcher;
            if m.method.as_deref().is_some_and(|x| x != method)
                || m.path.as_deref().is_some_and(|p| !path.contains(p))
                || m.watch.is_some_and(|w| w != watch)
            {
                continue;
            }
            if let Some(limit) = a.rule.times {
                if a.used.fetch_add(1, Ordering::SeqCst) >= limit {
                    continue;
                }
            }
            a.hits.fetch_add(1, Ordering::SeqCst);
            return Some(a.rule.fault.clone());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_in_order_and_run_out() {
        let f = Faults::default();
        let h = f.add(
            FaultRule::new(Fault::Status(500))
                .path("/pods")
                .list()
                .times(2),
        );
        f.add(FaultRule::new(Fault::WatchGone).path("/pods").watch());
        assert_eq!(
            f.pick("GET", "/api/v1/namespaces/d/pods", false),
            Some(Fault::Status(500))
        );
        assert_eq!(f.pick("GET", "/api/v1/namespaces/d/jobs", false), None);
        assert_eq!(
            f.pick("GET", "/api/v1/namespaces/d/pods", true),
            Some(Fault::WatchGone)
        );
        assert_eq!(
            f.pick("GET", "/api/v1/namespaces/d/pods", false),
            Some(Fault::Status(500))
        );
        assert_eq!(f.pick("GET", "/api/v1/namespaces/d/pods", false), None);
        assert_eq!(h.hits(), 2);
        assert!(
            is_watch(Some("labelSelector=a&watch=true"))
                && !is_watch(Some("watch=false"))
                && !is_watch(None)
        );
    }
}
