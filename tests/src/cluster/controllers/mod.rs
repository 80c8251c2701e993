//! The Job, StatefulSet, JobSet, Deployment and ReplicaSet controllers: they expand those
//! objects into pods (a JobSet into Jobs, a Deployment into ReplicaSets) as the real
//! controllers do and keep their status up to date. Their event loop also hands each change to
//! the store's garbage collector (`api::store::gc`: an object whose owners went before it was
//! made goes too). They only use the store, so they also run next to an API server without
//! pods ([`spawn`]).
//!
//! This file routes store events to the controllers; one file per controller (`job`,
//! `statefulset`, `jobset`, `deployment` with the ReplicaSet's), with the Job's policies (`job_policy`) and index sets (`indexes`) beside
//! it, and what they share: `pods` (owners, pods from templates, phases, readiness) and
//! `conditions`.

use crate::api::resources::{DEPLOYMENTS, JOBS, JOBSETS, PODS, REPLICASETS, STATEFULSETS};
use crate::api::Store;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

mod conditions;
mod deployment;
mod indexes;
mod job;
mod job_policy;
mod job_tracking;
mod jobset;
mod pods;
mod statefulset;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_jobset;
#[cfg(test)]
mod tests_suspend;

pub use deployment::{reconcile_deployment, reconcile_replicaset};
pub use indexes::{compress_indexes, parse_indexes};
use job::reconcile_timed_jobs;
pub use job::{job_pod, reconcile_job};
pub use job_policy::{pod_failure_rule, success_rule_met};
pub use job_tracking::TRACKING_FINALIZER;
pub use jobset::reconcile_jobset;
pub use statefulset::{reconcile_sts, sts_pod};

/// Runs the controllers until the store's event feed closes or the task is aborted.
pub fn spawn(store: Store) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store))
}

async fn run(store: Store) {
    let mut rx = store.subscribe();
    reconcile_all(&store);
    // Deadlines and TTLs are reconciled as time passes.
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = tick.tick() => {
                reconcile_timed_jobs(&store);
                reconcile_timed_jobsets(&store);
                continue;
            }
        };
        match ev {
            Ok(ev) => {
                let (ns, name) = (ev.namespace.as_str(), ev.name.as_str());
                // The garbage collector: an object made after its owner went goes too.
                if store.collect_if_dangling(&ev) {
                    continue;
                }
                if std::ptr::eq(ev.resource, &JOBS) {
                    if ev.kind != crate::api::EventType::Deleted {
                        reconcile_job(&store, ns, name);
                    }
                    for (kind, owner) in controller_of(&ev.object) {
                        if kind == "JobSet" {
                            reconcile_jobset(&store, ns, &owner);
                        }
                    }
                } else if std::ptr::eq(ev.resource, &JOBSETS) {
                    if ev.kind != crate::api::EventType::Deleted {
                        reconcile_jobset(&store, ns, name);
                    }
                } else if std::ptr::eq(ev.resource, &DEPLOYMENTS) {
                    if ev.kind != crate::api::EventType::Deleted {
                        reconcile_deployment(&store, ns, name);
                    }
                } else if std::ptr::eq(ev.resource, &REPLICASETS) {
                    if ev.kind != crate::api::EventType::Deleted {
                        reconcile_replicaset(&store, ns, name);
                    }
                    for (kind, owner) in controller_of(&ev.object) {
                        if kind == "Deployment" {
                            reconcile_deployment(&store, ns, &owner);
                        }
                    }
                } else if std::ptr::eq(ev.resource, &STATEFULSETS) {
                    if ev.kind != crate::api::EventType::Deleted {
                        reconcile_sts(&store, ns, name);
                    }
                } else if std::ptr::eq(ev.resource, &PODS) {
                    // The pod as the event shows it: counted if it is stored no more but was
                    // still tracked, released if its Job is gone.
                    let gone = Some(&ev.object);
                    let removed = ev.kind == crate::api::EventType::Deleted;
                    for (kind, owner) in controller_of(&ev.object) {
                        match kind.as_str() {
                            "Job" => job::reconcile_job_seeing(&store, ns, &owner, gone, removed),
                            "StatefulSet" => reconcile_sts(&store, ns, &owner),
                            "ReplicaSet" => reconcile_replicaset(&store, ns, &owner),
                            _ => {}
                        }
                    }
                }
            }
            Err(RecvError::Lagged(_)) => reconcile_all(&store),
            Err(RecvError::Closed) => return,
        }
    }
}

fn reconcile_all(store: &Store) {
    store.collect_all_dangling();
    job_tracking::release_orphans(store);
    for (rt, f) in [
        (&JOBS, reconcile_job as fn(&Store, &str, &str)),
        (&STATEFULSETS, reconcile_sts),
        (&JOBSETS, reconcile_jobset),
        (&DEPLOYMENTS, reconcile_deployment),
        (&REPLICASETS, reconcile_replicaset),
    ] {
        if let Ok(l) = store.list(rt, None, &Default::default()) {
            for o in l.items {
                let ns = o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                f(store, &ns, &name);
            }
        }
    }
}

/// Reconciles the finished JobSets that have a TTL.
fn reconcile_timed_jobsets(store: &Store) {
    if let Ok(l) = store.list(&JOBSETS, None, &Default::default()) {
        for o in l.items.iter().filter(|o| jobset::has_ttl(o)) {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
            let name = o["metadata"]["name"].as_str().unwrap_or("");
            reconcile_jobset(store, ns, name);
        }
    }
}

fn controller_of(pod: &Value) -> Vec<(String, String)> {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
                .map(|o| {
                    (
                        o["kind"].as_str().unwrap_or("").to_string(),
                        o["name"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
