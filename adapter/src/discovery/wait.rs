//! Waiting, through a list + watch, until enough selected pods are ready.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, ObjectList, WatchEvent, WatchParams};

use super::api::{Ctx, Operation};
use super::error::DiscoveryError;
use super::order::{pod_index, sort_pods, PodIndex};
use super::readiness::{classify, PodReadiness};
use super::Progress;

/// The selected pods split by readiness.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Allocatable pods, in allocation order.
    pub ready: Vec<Pod>,
    /// (name, description) of pods that may still become ready.
    pub not_ready: Vec<(String, String)>,
    /// (name, reason) of terminating or finished pods.
    pub excluded: Vec<(String, String)>,
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// Classifies every pod; ready ones are sorted into allocation order.
pub fn evaluate<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Evaluation {
    let mut e = Evaluation::default();
    for p in pods {
        match classify(p) {
            PodReadiness::Ready(_) => e.ready.push(p.clone()),
            PodReadiness::NotReady(d) => e.not_ready.push((name(p), d)),
            PodReadiness::Excluded(d) => e.excluded.push((name(p), d)),
        }
    }
    sort_pods(&mut e.ready);
    e.not_ready.sort_by(|a, b| super::order::natural_cmp(&a.0, &b.0));
    e
}

/// What is missing for `expected` ready pods, one entry per pod or gap.
pub fn problems(pods: &BTreeMap<String, Pod>, eval: &Evaluation, expected: u32) -> Vec<String> {
    let mut out: Vec<String> = eval.not_ready.iter().map(|(n, d)| format!("pod {n} is not ready ({d})")).collect();
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
            .values()
            .filter(|p| !matches!(classify(p), PodReadiness::Excluded(_)))
            .filter_map(|p| match pod_index(p) {
                Some(PodIndex::Single(i)) => Some(i),
                _ => None,
            })
            .collect();
        if !present.is_empty() {
            let absent: Vec<String> =
                (0..u64::from(expected)).filter(|i| !present.contains(i)).take(32).map(|i| i.to_string()).collect();
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

pub struct Waiter<'a> {
    pub ctx: &'a Ctx,
    pub namespace: &'a str,
    pub selector: &'a str,
    pub expected: u32,
    pub expected_source: &'a str,
    pub progress: &'a mut (dyn FnMut(&Progress) + Send),
}

fn rv_of(p: &Pod) -> Option<String> {
    p.metadata.resource_version.clone().filter(|v| !v.is_empty())
}

impl Waiter<'_> {
    fn timeout_error(
        &self,
        pods: &BTreeMap<String, Pod>,
        eval: &Evaluation,
        last_error: Option<&str>,
    ) -> DiscoveryError {
        let mut problems = problems(pods, eval, self.expected);
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

    /// Evaluates, reports progress when the ready count changed, and returns the allocation
    /// once enough pods are ready.
    fn check(
        &mut self,
        pods: &BTreeMap<String, Pod>,
        last_ready: &mut Option<usize>,
    ) -> (Evaluation, Option<Vec<Pod>>) {
        let eval = evaluate(pods.values());
        if *last_ready != Some(eval.ready.len()) {
            *last_ready = Some(eval.ready.len());
            let waiting_for = eval.not_ready.iter().map(|(n, _)| n.clone()).collect();
            let ready = u32::try_from(eval.ready.len()).unwrap_or(u32::MAX);
            tracing::info!(ready, expected = self.expected, "pods ready: {ready} of {}", self.expected);
            (self.progress)(&Progress::Ready { ready, expected: self.expected, waiting_for });
        }
        if eval.ready.len() >= self.expected as usize {
            let mut chosen = eval.ready.clone();
            chosen.truncate(self.expected as usize);
            return (eval, Some(chosen));
        }
        (eval, None)
    }

    /// Waits from the state of a first list until `expected` pods are ready; returns them in
    /// allocation order.
    pub async fn wait(mut self, first: ObjectList<Pod>) -> Result<Vec<Pod>, DiscoveryError> {
        let api: Api<Pod> = Api::namespaced(self.ctx.api.client.clone(), self.namespace);
        let (mut pods, mut rv) = into_map(first);
        let mut last_ready = None;
        let mut last_error: Option<String> = None;
        let mut backoff = Duration::from_millis(100);
        let deadline = self.ctx.deadline;
        let op = Operation::pods("watch", self.namespace).selecting(self.selector);
        let (ctx, namespace, selector) = (self.ctx, self.namespace, self.selector);

        loop {
            let (eval, done) = self.check(&pods, &mut last_ready);
            if let Some(chosen) = done {
                return Ok(chosen);
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Err(self.timeout_error(&pods, &eval, last_error.as_deref()));
            }
            let secs = u32::try_from(remaining.as_secs().saturating_add(1)).unwrap_or(u32::MAX).clamp(1, 290);
            let wp = WatchParams::default().labels(self.selector).timeout(secs);
            let stream = match tokio::time::timeout_at(deadline, api.watch(&wp, &rv)).await {
                Err(_) => return Err(self.timeout_error(&pods, &eval, last_error.as_deref())),
                Ok(Ok(s)) => s,
                Ok(Err(kube::Error::Api(s))) if s.code == 410 => {
                    (pods, rv) = relist(ctx, namespace, selector, &api).await?;
                    continue;
                }
                Ok(Err(e)) => match self.ctx.map_error(&op, e) {
                    DiscoveryError::Unreachable { detail, .. } => {
                        // A connection problem after the list worked: retry until the deadline.
                        tracing::warn!("watching pods failed, retrying: {detail}");
                        last_error = Some(detail);
                        if tokio::time::timeout_at(deadline, tokio::time::sleep(backoff)).await.is_err() {
                            return Err(self.timeout_error(&pods, &eval, last_error.as_deref()));
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                        continue;
                    }
                    other => return Err(other),
                },
            };
            (self.progress)(&Progress::Watching { resource_version: rv.clone() });
            tracing::debug!(resource_version = %rv, "watching pods");
            let mut stream = std::pin::pin!(stream);
            let mut events = 0usize;
            loop {
                let item = match tokio::time::timeout_at(deadline, stream.next()).await {
                    Err(_) => {
                        let eval = evaluate(pods.values());
                        return Err(self.timeout_error(&pods, &eval, last_error.as_deref()));
                    }
                    Ok(None) => break,
                    Ok(Some(item)) => item,
                };
                match item {
                    Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                        if let Some(v) = rv_of(&p) {
                            rv = v;
                        }
                        pods.insert(name(&p), p);
                    }
                    Ok(WatchEvent::Deleted(p)) => {
                        if let Some(v) = rv_of(&p) {
                            rv = v;
                        }
                        pods.remove(&name(&p));
                    }
                    Ok(WatchEvent::Bookmark(b)) => {
                        if !b.metadata.resource_version.is_empty() {
                            rv = b.metadata.resource_version;
                        }
                    }
                    Ok(WatchEvent::Error(s)) if s.code == 410 => {
                        (pods, rv) = relist(ctx, namespace, selector, &api).await?;
                        events += 1;
                        break;
                    }
                    Ok(WatchEvent::Error(s)) => return Err(self.ctx.map_error(&op, kube::Error::Api(s))),
                    Err(e) => {
                        let detail = crate::kubeconfig::error_chain(&e);
                        tracing::warn!("the pod watch broke, restarting it: {detail}");
                        last_error = Some(detail);
                        break;
                    }
                }
                events += 1;
                backoff = Duration::from_millis(100);
                let (_, done) = self.check(&pods, &mut last_ready);
                if let Some(chosen) = done {
                    return Ok(chosen);
                }
            }
            if events == 0 {
                // The watch ended without telling anything: do not spin on a server that
                // closes watches at once.
                if tokio::time::timeout_at(deadline, tokio::time::sleep(backoff)).await.is_err() {
                    let eval = evaluate(pods.values());
                    return Err(self.timeout_error(&pods, &eval, last_error.as_deref()));
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

async fn relist(
    ctx: &Ctx,
    namespace: &str,
    selector: &str,
    api: &Api<Pod>,
) -> Result<(BTreeMap<String, Pod>, String), DiscoveryError> {
    let op = Operation::pods("list", namespace).selecting(selector);
    let list = ctx.call(&op, api.list(&ListParams::default().labels(selector))).await?;
    Ok(into_map(list))
}

/// Pods by name, and the list's resource version ("0" when the server gave none).
pub fn into_map(list: ObjectList<Pod>) -> (BTreeMap<String, Pod>, String) {
    let rv = list.metadata.resource_version.clone().filter(|v| !v.is_empty()).unwrap_or_else(|| "0".into());
    let pods = list.items.into_iter().map(|p| (name(&p), p)).collect();
    (pods, rv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    fn pod(name: &str, phase: &str, ready: bool, index: Option<u64>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        if let Some(i) = index {
            p.metadata.labels = Some([(super::super::order::JOB_COMPLETION_INDEX.to_string(), i.to_string())].into());
        }
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            pod_ip: Some("10.0.0.1".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    fn map(pods: Vec<Pod>) -> BTreeMap<String, Pod> {
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
        assert_eq!(e.ready.iter().map(name).collect::<Vec<_>>(), ["w-2", "w-10"]);
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
        let p = problems(&pods, &e, 4);
        let text = p.join(" | ");
        assert!(text.contains("pod j-b is not ready (phase Pending"), "{text}");
        assert!(text.contains("2 expected pods do not exist yet (2 non-terminated pods match"), "{text}");
        assert!(text.contains("no live pod with index 1, 3"), "{text}");
        assert!(text.contains("pod j-c is excluded (finished: phase Failed"), "{text}");
    }
}
