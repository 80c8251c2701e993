//! Waiting, through kube-runtime's watcher, until enough selected pods are ready.
//!
//! The wait starts from the first list discovery made (no watch at all if enough pods are ready
//! already), then follows a [`kube::runtime::watcher()`] of the selected pods, mirrored into a
//! [`reflector()`] store: the watcher lists, watches from the list's resource version, resumes a
//! dropped watch from the last version it saw, and lists again when that version has expired
//! (410 Gone). Its errors are retried with kube-runtime's default backoff until the deadline,
//! except those no retry can fix: 400 (a selector the server rejects), 401 and 403 end the wait
//! at once with the message for that cause.

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;

use super::record::PodRecord;
use kube::api::{Api, ObjectList};
use kube::runtime::reflector::{self, reflector};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;

use super::api::{Ctx, Operation};
use super::client::error_chain;
use super::error::DiscoveryError;
use super::order::{pod_index, PodIndex};
use super::progress::Progress;
use super::readiness::{classify, PodReadiness};
pub use super::tracker::evaluate;
pub(crate) use super::tracker::Evaluation;
use super::tracker::PodTracker;

/// How many not-ready pods a [`Progress::Ready`] report names (the count says how many more).
pub const WAITING_FOR_SHOWN: usize = 16;

/// A watch of the pods `selector` selects for a wait of at most `remaining`: the server ends
/// each watch call after about that long (1 to 290 s), and the watcher then resumes it.
pub fn watch_config(selector: &str, remaining: std::time::Duration) -> watcher::Config {
    let secs = u32::try_from(remaining.as_secs().saturating_add(1))
        .unwrap_or(u32::MAX)
        .clamp(1, 290);
    watcher::Config::default().labels(selector).timeout(secs)
}

fn name(p: &PodRecord) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// What is missing for `expected` ready pods, one entry per pod or gap.
pub fn problems<'a>(
    pods: impl IntoIterator<Item = &'a PodRecord>,
    eval: &Evaluation,
    expected: u32,
) -> Vec<String> {
    let mut out: Vec<String> = eval
        .not_ready
        .iter()
        .map(|(n, d)| format!("pod {n} is not ready ({d})"))
        .collect();
    let candidates = eval.ready.len() + eval.not_ready.len();
    let expected_us = expected as usize;
    if candidates < expected_us {
        let missing = expected_us - candidates;
        let mut text = format!(
            "{missing} expected pod{} do{} not exist yet ({candidates} non-terminated pod{} match the selector)",
            if missing == 1 { "" } else { "s" },
            if missing == 1 { "es" } else { "" },
            if candidates == 1 { "" } else { "s" },
        );
        // With single indices 0..expected, name the absent ones.
        let present: BTreeSet<u64> = pods
            .into_iter()
            .filter(|p| !matches!(classify(p), PodReadiness::Excluded(_)))
            .filter_map(|p| match pod_index(p) {
                Some(PodIndex::Single(i)) => Some(i),
                _ => None,
            })
            .collect();
        if !present.is_empty() {
            let absent: Vec<String> = (0..u64::from(expected))
                .filter(|i| !present.contains(i))
                .take(32)
                .map(|i| i.to_string())
                .collect();
            if !absent.is_empty() {
                text.push_str(&format!(": no live pod with index {}", absent.join(", ")));
            }
        }
        out.push(text);
    }
    for (n, d) in &eval.excluded {
        out.push(format!("pod {n} is excluded ({d})"));
    }
    out
}

pub(crate) struct Waiter<'a> {
    pub ctx: &'a Ctx,
    pub namespace: &'a str,
    pub selector: &'a str,
    pub expected: u32,
    pub expected_source: &'a str,
    pub progress: &'a mut (dyn FnMut(&Progress) + Send),
}

/// What to do about an error of the watcher.
enum WatchTrouble {
    /// Retrying cannot help: end the wait with this error.
    Fatal(DiscoveryError),
    /// The watcher retries (after its backoff); this says what went wrong, for the timeout
    /// message.
    Retry(String),
}

impl Waiter<'_> {
    fn timeout_error(
        &self,
        pods: &PodTracker,
        last_error: Option<&str>,
        deleted: &BTreeSet<String>,
    ) -> DiscoveryError {
        let eval = pods.evaluation();
        let mut problems = problems(pods.pods(), &eval, self.expected);
        for name in deleted.iter().filter(|n| !pods.contains(n)) {
            problems.push(format!("pod {name} was deleted during the wait"));
        }
        if let Some(e) = last_error {
            problems.push(format!("the last watch attempt failed: {e}"));
        }
        DiscoveryError::Timeout {
            namespace: self.namespace.to_string(),
            selector: self.selector.to_string(),
            expected: self.expected,
            expected_source: self.expected_source.to_string(),
            ready: u32::try_from(eval.ready.len()).unwrap_or(u32::MAX),
            waited_ms: u64::try_from(self.ctx.timeout.as_millis()).unwrap_or(u64::MAX),
            problems,
        }
    }

    /// Reports progress when the ready count changed, and, once enough pods are ready,
    /// returns the names of the first `expected` of them in allocation order. O(log n) apart
    /// from the report's few names: the tracker keeps the order as events arrive.
    fn check(&mut self, pods: &PodTracker, last_ready: &mut Option<usize>) -> Option<Vec<String>> {
        let ready_len = pods.ready_len();
        if *last_ready != Some(ready_len) {
            *last_ready = Some(ready_len);
            let waiting_for = pods.first_not_ready(WAITING_FOR_SHOWN);
            let not_ready = u32::try_from(pods.not_ready_len()).unwrap_or(u32::MAX);
            let ready = u32::try_from(ready_len).unwrap_or(u32::MAX);
            tracing::info!(
                ready,
                expected = self.expected,
                "pods ready: {ready} of {}",
                self.expected
            );
            (self.progress)(&Progress::Ready {
                ready,
                expected: self.expected,
                not_ready,
                waiting_for,
            });
        }
        (ready_len >= self.expected as usize).then(|| pods.first_ready(self.expected as usize))
    }

    /// Sorts a watcher error into fatal (400, 401, 403) and retried (everything else,
    /// including 410 Gone, after which the watcher lists again).
    fn trouble(&self, err: watcher::Error) -> WatchTrouble {
        let (verb, status) = match &err {
            watcher::Error::InitialListFailed(kube::Error::Api(s)) => ("list", Some(s.as_ref())),
            watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s)) => ("watch", Some(s.as_ref())),
            watcher::Error::WatchError(s) => ("watch", Some(s.as_ref())),
            watcher::Error::InitialListFailed(_) => ("list", None),
            _ => ("watch", None),
        };
        match status {
            Some(s) if matches!(s.code, 400 | 401 | 403) => {
                let op = Operation::pods(verb, self.namespace).selecting(self.selector);
                WatchTrouble::Fatal(
                    self.ctx
                        .map_error(&op, kube::Error::Api(Box::new(s.clone()))),
                )
            }
            Some(s) if s.code == 410 => WatchTrouble::Retry(format!(
                "the watch's resource version expired (410 {}), listing again",
                s.reason
            )),
            _ => WatchTrouble::Retry(error_chain(&err)),
        }
    }

    /// Waits from the state of a first list until `expected` pods are ready; returns them in
    /// allocation order.
    pub async fn wait(
        mut self,
        first: ObjectList<PodRecord>,
    ) -> Result<Vec<PodRecord>, DiscoveryError> {
        let mut pods = PodTracker::new(first.items);
        let mut last_ready = None;
        if let Some(chosen) = self.check(&pods, &mut last_ready) {
            return Ok(pods.take(&chosen));
        }
        let deadline = self.ctx.deadline;
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let api: Api<Pod> = Api::namespaced(self.ctx.api.client.clone(), self.namespace);
        let config = watch_config(self.selector, remaining);
        let (store, writer) = reflector::store();
        let events = reflector(writer, watcher(api, config)).default_backoff();
        let mut events = std::pin::pin!(events);
        let mut last_error: Option<String> = None;
        // Pods seen during the wait that were deleted (named in the timeout message).
        let mut deleted: BTreeSet<String> = BTreeSet::new();
        loop {
            let item = match tokio::time::timeout_at(deadline, events.next()).await {
                Err(_) => {
                    return Err(self.timeout_error(&pods, last_error.as_deref(), &deleted));
                }
                Ok(None) => {
                    return Err(DiscoveryError::Internal {
                        detail: "the pod watcher ended".into(),
                    });
                }
                Ok(Some(item)) => item,
            };
            match item {
                // The store takes a (re)list in full at InitDone.
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(watcher::Event::InitDone) => {
                    let listed = store
                        .state()
                        .iter()
                        .map(|p| PodRecord::from(&**p))
                        .collect::<Vec<_>>();
                    deleted.extend(pods.replace_all(listed));
                    let listed = u32::try_from(pods.len()).unwrap_or(u32::MAX);
                    tracing::debug!(listed, "watching pods");
                    (self.progress)(&Progress::Watching { listed });
                }
                Ok(watcher::Event::Apply(p)) => {
                    pods.apply(PodRecord::from(p));
                }
                Ok(watcher::Event::Delete(p)) => {
                    let p = PodRecord::from(p);
                    tracing::warn!(
                        "pod {} was deleted while waiting for the job's pods",
                        name(&p)
                    );
                    pods.remove(&name(&p));
                    deleted.insert(name(&p));
                }
                Err(e) => match self.trouble(e) {
                    WatchTrouble::Fatal(e) => return Err(e),
                    WatchTrouble::Retry(detail) => {
                        tracing::warn!("watching pods: {detail}; retrying");
                        last_error = Some(detail);
                        continue;
                    }
                },
            }
            if let Some(chosen) = self.check(&pods, &mut last_ready) {
                return Ok(pods.take(&chosen));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::{RecordCondition, RecordStatus};
    use super::*;
    use std::collections::BTreeMap;

    fn pod(name: &str, phase: &str, ready: bool, index: Option<u64>) -> PodRecord {
        let mut p = PodRecord::default();
        p.metadata.name = Some(name.into());
        if let Some(i) = index {
            p.metadata.labels = Some(
                [(
                    super::super::order::JOB_COMPLETION_INDEX.to_string(),
                    i.to_string(),
                )]
                .into(),
            );
        }
        p.status = Some(RecordStatus {
            phase: Some(phase.into()),
            pod_ip: Some("10.0.0.1".into()),
            conditions: Some(vec![RecordCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    fn map(pods: Vec<PodRecord>) -> BTreeMap<String, PodRecord> {
        pods.into_iter().map(|p| (name(&p), p)).collect()
    }

    #[test]
    fn evaluation_splits_and_orders() {
        let pods = map(vec![
            pod("w-10", "Running", true, None),
            pod("w-2", "Running", true, None),
            pod("w-3", "Pending", false, None),
            pod("w-4", "Failed", false, None),
        ]);
        let e = evaluate(pods.values());
        assert_eq!(
            e.ready.iter().map(|p| name(p)).collect::<Vec<_>>(),
            ["w-2", "w-10"]
        );
        assert_eq!(e.not_ready.len(), 1);
        assert_eq!(e.excluded.len(), 1);
    }

    #[test]
    fn problems_name_unready_missing_and_excluded() {
        let pods = map(vec![
            pod("j-a", "Running", true, Some(0)),
            pod("j-b", "Pending", false, Some(2)),
            pod("j-c", "Failed", false, Some(1)),
        ]);
        let e = evaluate(pods.values());
        let p = problems(pods.values(), &e, 4);
        let text = p.join(" | ");
        assert!(
            text.contains("pod j-b is not ready (phase Pending"),
            "{text}"
        );
        assert!(
            text.contains("2 expected pods do not exist yet (2 non-terminated pods match"),
            "{text}"
        );
        assert!(text.contains("no live pod with index 1, 3"), "{text}");
        assert!(
            text.contains("pod j-c is excluded (finished: phase Failed"),
            "{text}"
        );
    }
}
