//! kube-runtime's `Controller` over the TrainJobs of a namespace (or all) and the JobSets they
//! own.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::events::Recorder;
use kube::runtime::{watcher, Controller};
use kube::Client;

use super::reconcile::{error_policy, jobset_resource, reconcile, TrainContext};
use crate::trainjob::TrainJob;

/// Objects per page of the lists of the TrainJobs and the JobSets (as the MPIJobs' lists: a
/// page is read whole before its objects are).
const LIST_PAGE: u32 = 10;

/// Reconciles the TrainJobs of `scope` (None: every namespace) until `stop`.
pub(crate) async fn watch(
    client: Client,
    recorder: Recorder,
    scope: Option<String>,
    concurrency: u16,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ar = jobset_resource();
    let (jobs, jobsets): (Api<TrainJob>, Api<DynamicObject>) = match &scope {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced_with(client.clone(), ns, &ar),
        ),
        None => (Api::all(client.clone()), Api::all_with(client.clone(), &ar)),
    };
    let ctx = Arc::new(TrainContext { client, recorder });
    let page = watcher::Config::default().page_size(LIST_PAGE);
    Controller::new(jobs, page.clone())
        .owns_with(jobsets, ar, page)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}
