//! After the command: the workers' pods seen finished in the API before the launcher exits.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tracing::{info, warn};

use super::super::request::LaunchTarget;
use super::peers::{PeersError, PEER_TIMEOUT};
use crate::protocol::FramedConn;

/// After a successful command, how long the launcher waits for the workers' pods to be
/// finished before it exits itself (see [`wait_workers_finished`]).
pub(crate) const WORKER_EXIT_WAIT: Duration = Duration::from_secs(20);

/// Waits (at most `limit`) until every pod in `pods` of `namespace` (all matched by
/// `selector`) is finished: phase `Succeeded` or `Failed`, or gone. Follows one watch of the
/// selected pods, so a pod's end is seen as soon as its kubelet reports it. Returns the pods
/// still not finished.
async fn wait_pods_finished(
    kubeconfig: Option<&std::path::Path>,
    namespace: &str,
    selector: &str,
    pods: Vec<String>,
    limit: Duration,
) -> Result<Vec<String>, PeersError> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::{watcher, Event};
    use kube::runtime::WatchStreamExt;
    use kube::Api;
    let mut left = Unfinished::new(pods);
    if left.is_empty() {
        return Ok(Vec::new());
    }
    let deadline = tokio::time::Instant::now() + limit;
    let api = tokio::time::timeout_at(
        deadline,
        crate::discovery::client::connect(kubeconfig, PEER_TIMEOUT),
    )
    .await
    .map_err(|_| PeersError::NoClient(limit))??;
    let pods_api: Api<Pod> = Api::namespaced(api.client, namespace);
    let config = crate::discovery::wait::watch_config(selector, limit);
    let events = watcher(pods_api, config).default_backoff();
    let mut events = std::pin::pin!(events);
    let finished = |p: &Pod| {
        matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    };
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    while !left.is_empty() {
        match tokio::time::timeout_at(deadline, events.next()).await {
            // The deadline, or a watcher that ended: what is left is not seen finished.
            Err(_) | Ok(None) => break,
            Ok(Some(Ok(Event::Init))) => left.listing(),
            Ok(Some(Ok(Event::InitApply(p) | Event::Apply(p)))) => {
                left.seen(&name(&p), finished(&p))
            }
            Ok(Some(Ok(Event::InitDone))) => left.listed(),
            Ok(Some(Ok(Event::Delete(p)))) => left.seen(&name(&p), true),
            // The watcher backs off and lists again.
            Ok(Some(Err(e))) => {
                warn!(error = %e, "batch launcher: watching the worker pods; retrying")
            }
        }
    }
    Ok(left.into_names())
}

/// The pods not yet seen finished, as a watch of them shows them: a pod that a (re)list does
/// not hold is gone, hence finished.
#[derive(Debug)]
struct Unfinished {
    left: std::collections::BTreeSet<String>,
    /// The pods of the list under way (from `Init` to `InitDone`).
    listing: Option<std::collections::BTreeSet<String>>,
}

impl Unfinished {
    fn new(pods: Vec<String>) -> Unfinished {
        Unfinished {
            left: pods.into_iter().collect(),
            listing: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    /// A (re)list begins.
    fn listing(&mut self) {
        self.listing = Some(Default::default());
    }

    /// Pod `name` as a list or an event shows it.
    fn seen(&mut self, name: &str, finished: bool) {
        if let Some(l) = &mut self.listing {
            l.insert(name.to_string());
        }
        if finished {
            self.left.remove(name);
        }
    }

    /// The list is complete: the pods it did not hold are gone.
    fn listed(&mut self) {
        if let Some(l) = self.listing.take() {
            self.left.retain(|n| l.contains(n));
        }
    }

    fn into_names(self) -> Vec<String> {
        self.left.into_iter().collect()
    }
}

/// After `finish {0}`: waits until the API shows the pod of each told worker finished, and
/// the pods of the workers that went away (`lost`: evicted or deleted, still ending) too,
/// within [`WORKER_EXIT_WAIT`]; meanwhile it logs when every told worker's agent has closed
/// its connection (it exits at once). Only logs what it cannot confirm.
pub(super) async fn wait_workers_finished(
    namespace: &str,
    selector: &str,
    told: Vec<(LaunchTarget, FramedConn<TcpStream>)>,
    lost: Vec<String>,
) {
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::now() + WORKER_EXIT_WAIT;
    let mut pods: Vec<String> = told.iter().map(|(t, _)| t.pod.clone()).collect();
    pods.extend(lost);
    let closed = async {
        futures::future::join_all(told.into_iter().map(|(t, mut conn)| async move {
            // Anything but a frame means the connection ended.
            loop {
                match tokio::time::timeout_at(
                    deadline,
                    crate::protocol::recv_frame(&mut conn, None),
                )
                .await
                {
                    Ok(Ok(_)) => continue,
                    Ok(Err(_)) => return,
                    Err(_) => {
                        warn!(pod = %t.pod, "batch launcher: a worker's agent did not exit within {WORKER_EXIT_WAIT:?} of being told the job succeeded");
                        return;
                    }
                }
            }
        }))
        .await;
        info!(
            waited_ms = t0.elapsed().as_millis() as u64,
            "batch launcher: every told worker's agent has closed its connection"
        );
    };
    // The same client configuration as discovery: $KUBECONFIG, else in-cluster. The watch
    // starts at once: its list is done by the time the agents have exited.
    let finished = wait_pods_finished(None, namespace, selector, pods, WORKER_EXIT_WAIT);
    let mut finished = std::pin::pin!(finished);
    let finished = tokio::select! {
        // Every pod finished: whatever connection is still open no longer matters.
        r = &mut finished => r,
        () = closed => finished.await,
    };
    match finished {
        Ok(left) if left.is_empty() => {
            info!(
                waited_ms = t0.elapsed().as_millis() as u64,
                "batch launcher: every worker pod is finished"
            )
        }
        Ok(left) => {
            warn!(pods = ?left, "batch launcher: worker pods not shown finished within {WORKER_EXIT_WAIT:?}; exiting anyway")
        }
        Err(e) => {
            warn!(error = %e, "batch launcher: cannot check that the worker pods finished; exiting anyway")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Unfinished;

    #[test]
    fn a_pod_is_left_until_it_is_seen_finished_or_gone() {
        let mut u = Unfinished::new(vec!["w-1".into(), "w-2".into(), "w-3".into()]);
        u.listing();
        u.seen("w-1", true);
        u.seen("w-2", false);
        // w-3 is not in the list: it is gone.
        u.listed();
        assert_eq!(names_of(&u), ["w-2"]);
        u.seen("w-2", false);
        assert!(!u.is_empty());
        u.seen("w-2", true);
        assert!(u.is_empty());
        assert!(u.into_names().is_empty());
    }

    #[test]
    fn a_relist_forgets_only_pods_it_does_not_hold() {
        let mut u = Unfinished::new(vec!["w-1".into(), "w-2".into()]);
        // Events outside a list do not make the pods they do not name gone.
        u.seen("w-1", false);
        u.listed();
        assert_eq!(names_of(&u), ["w-1", "w-2"]);
        // A relist that holds w-2 only: w-1 was deleted meanwhile.
        u.listing();
        u.seen("w-2", false);
        u.listed();
        assert_eq!(u.into_names(), ["w-2"]);
    }

    fn names_of(u: &Unfinished) -> Vec<&str> {
        u.left.iter().map(String::as_str).collect()
    }
}
