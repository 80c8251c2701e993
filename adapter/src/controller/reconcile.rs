//! One reconcile of one MPIJob, against the API: read what is there, make what is missing
//! ([`super::desired`]), write the status ([`super::status`]) and its events. Every object is
//! written with server-side apply under one field manager, [`MANAGER`](super::context::MANAGER), and every write is
//! idempotent: the objects are made only while the Job is absent and only where they are
//! absent (an existing Secret keeps its key), the Job is applied again only where it differs,
//! the status only when it changed, so a controller restarted mid-job changes nothing and
//! duplicates nothing. An object of a job's name that is not this MPIJob's own
//! ([`super::ownership`]) is never taken over: nothing is made; when it goes by itself (an
//! earlier MPIJob's of the same name still being deleted) a warning event names it and the
//! reconcile is retried, else the MPIJob fails (`Failed`, reason `ErrResourceExists`) naming it
//! and the remedy. What the API server refuses (422, or 400 on an apply) fails the MPIJob with
//! the server's message; other errors are retried with a backoff ([`super::retry`]).
//!
//! MPIJobs are watched as their heads ([`super::head`]), each the controller manages read
//! from the API server as it is stored ([`StoredMpiJob`]) and into the model one at a time,
//! here: one that does not fit it (a field of another type) stops no other MPIJob's
//! reconcile. When it is the controller's, its status gets the condition `Failed` naming the
//! field, with a warning event, and nothing is made for it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DynamicObject, Patch};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::child::{self, Child};
use super::context::{apply_params, Context};
use super::desired::{desired, managed, managed_by, Desired, LAUNCHER_TEMPLATE_IGNORED};
use super::ownership::{not_managed, owned, passing};
use super::pod_ends::pod_ends;
use super::restart::{self, Verdict};
use super::retry::{api_error, backoff, ReconcileError, INVALID};
use super::status::{finished, next_status, phase, refused, Notice, Observed};
use super::status_write::write_status;
use crate::manifest::mpijob::model::{MpiJob, MpiJobStatus};
use crate::manifest::mpijob::stored::{StoredMpiJob, Unfit};
use crate::manifest::{fresh_key, JOB_LABEL};

/// How often a live MPIJob is looked at even when nothing it watches changed.
const RESYNC: Duration = Duration::from_secs(300);

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// Reconciles the MPIJob `stored`: as the model when it fits it, else as one that cannot run.
pub(crate) async fn reconcile(
    stored: Arc<StoredMpiJob>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    ctx.metrics.reconciled();
    let out = match stored.model() {
        Ok(obj) => reconcile_model(obj, &ctx).await,
        Err(unfit) => reconcile_unfit(&stored, &unfit, &ctx).await,
    };
    if out.is_ok() {
        ctx.failures.succeeded(&key_of(&stored));
    }
    out
}

/// `namespace/name` of `obj`.
fn key_of(obj: &StoredMpiJob) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Reconciles the MPIJob `obj`, read into the model.
async fn reconcile_model(obj: MpiJob, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = obj.name_any();
    let ns = obj
        .namespace()
        .ok_or_else(|| ReconcileError::NoNamespace(name.clone()))?;
    let key = format!("{ns}/{name}");
    if !managed(&obj, ctx.settings.manage_all) || obj.metadata.deletion_timestamp.is_some() {
        ctx.metrics.set_phase(&key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    let old = obj.status.clone().unwrap_or_default();
    if finished(&old) && old.completion_time.is_some() {
        // Nothing is made again, even after the Job's TTL deleted it.
        ctx.metrics.set_phase(&key, Some(phase(&old)));
        ctx.forget(&key);
        return after_end(&obj, &old, &ns, ctx).await;
    }
    let job = child::read(&ctx.client, &ns, &name, ctx.settings.jobset).await?;
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    // A child being deleted (a restart's, or by hand) is waited for, then made again.
    let going = job
        .as_ref()
        .is_some_and(|j| owned(j.meta(), &uid) && restart::going(j.meta()));
    if job.is_none() && !still_there(ctx, &ns, &name, &uid).await? {
        // The cache lagged behind a delete: making the objects now would leave them to the
        // garbage collector (their owner is gone); there is nothing to do.
        ctx.metrics.set_phase(&key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    let live = job.as_ref().filter(|_| !going).map(Child::meta);
    let earlier = restart::earlier(live, &old);
    // What cannot be made is the MPIJob's to fix: it fails, naming why.
    let made = match job.filter(|_| !going) {
        // Nothing is made while the last child goes.
        None if going => Ok(None),
        j => make(ctx, &obj, &ns, j, earlier).await.map(Some),
    };
    let (job, refusal) = match made {
        Ok(j) => (j, None),
        Err(e) => match e.refusal() {
            Some(r) => (None, Some(r)),
            None => return Err(e),
        },
    };
    let pods = match &job {
        Some(j) => pods_of(ctx, &ns, &name, j).await?,
        None => Vec::new(),
    };
    let failure = job.as_ref().and_then(|j| {
        let f = j.failure()?;
        Some(match j.is_jobset() {
            true => restart::of_jobset(f, restart::deadline_passed(&obj, &now())),
            false => f,
        })
    });
    let verdict = failure
        .as_ref()
        .map(|f| restart::verdict(f, earlier, restart::backoff_limit(&obj)));
    // The failed attempt is over: the status is the next one's.
    let restarting = going || matches!(verdict, Some(Verdict::Restart { .. }));
    let observed = Observed {
        name: &name,
        namespace: &ns,
        suspend: obj
            .spec
            .run_policy
            .as_ref()
            .and_then(|p| p.suspend)
            .unwrap_or(false),
        workers: obj
            .spec
            .mpi_replica_specs
            .get("Worker")
            .and_then(|w| w.replicas)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        job: job.as_ref().filter(|_| !restarting),
        pods: if restarting { &[] } else { &pods },
        invalid: None,
    };
    let mut out = match &refusal {
        Some((reason, why)) => refused(&old, &key, reason, why, &now()),
        None => next_status(&old, &observed, &now()),
    };
    let next = u32::from(matches!(verdict, Some(Verdict::Restart { .. })));
    let failed = failure.as_ref().zip(verdict.as_ref());
    restart::apply(&mut out, &key, earlier + next, failed, &now());
    if out.status != old && !write_status(ctx, &ns, &name, &out.status).await? {
        // Deleted since it was read: its objects go with it.
        ctx.metrics.set_phase(&key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    for end in pod_ends(&pods, job.as_ref().is_some_and(Child::ending)) {
        if ctx.first_post(&key, &end.uid) {
            publish(ctx, &obj, &end.notice).await;
        }
    }
    for n in &out.notices {
        publish(ctx, &obj, n).await;
    }
    if out.started_running {
        if let Some(created) = &obj.metadata.creation_timestamp {
            let secs = jiff::Timestamp::now()
                .duration_since(created.0)
                .as_secs_f64();
            ctx.metrics.running_after(secs);
        }
    }
    ctx.metrics.set_phase(&key, Some(phase(&out.status)));
    if let (Some(Verdict::Restart { .. }), Some(j)) = (&verdict, &job) {
        child::delete(&ctx.client, &ns, j).await?;
    }
    Ok(if finished(&out.status) {
        Action::await_change()
    } else if restarting {
        // The child's deletion wakes it; this, should a watch event be missed.
        Action::requeue(RESTART_CHECK)
    } else {
        Action::requeue(RESYNC)
    })
}

/// How often an MPIJob that restarts is looked at while its failed child goes.
const RESTART_CHECK: Duration = Duration::from_secs(5);

/// After the MPIJob's end (`old`, the status that says it): its replica counts are made again
/// while its child is there (the conditions and `completionTime` stay), and
/// `runPolicy.cleanPodPolicy: All` deletes its workers, finished ones too (`Running`, the
/// default: the child has stopped those still running; `None`: the workers stay up, their
/// agents told so when the child was made).
async fn after_end(
    obj: &MpiJob,
    old: &MpiJobStatus,
    ns: &str,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let name = obj.name_any();
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let job = child::read(&ctx.client, ns, &name, ctx.settings.jobset)
        .await?
        .filter(|j| owned(j.meta(), &uid));
    let Some(job) = job else {
        return Ok(Action::await_change());
    };
    let pods = pods_of(ctx, ns, &name, &job).await?;
    if clean_all(obj) {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
        let workers = pods
            .iter()
            .filter(|p| !super::observe::launcher(p) && p.metadata.deletion_timestamp.is_none());
        for p in workers {
            match api.delete(&p.name_any(), &Default::default()).await {
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                r => {
                    r.map_err(api_error(format!(
                        "deleting the worker pod {ns}/{}",
                        p.name_any()
                    )))?;
                }
            }
        }
    }
    let observed = Observed {
        name: &name,
        namespace: ns,
        suspend: false,
        workers: 0,
        job: Some(&job),
        pods: &pods,
        invalid: None,
    };
    let mut out = next_status(old, &observed, &now());
    restart::apply(
        &mut out,
        "",
        restart::earlier(Some(job.meta()), old),
        None,
        &now(),
    );
    if out.status != *old {
        write_status(ctx, ns, &name, &out.status).await?;
    }
    Ok(Action::await_change())
}

/// Whether the MPIJob's `runPolicy.cleanPodPolicy` is `All`.
fn clean_all(obj: &MpiJob) -> bool {
    obj.spec
        .run_policy
        .as_ref()
        .and_then(|p| p.clean_pod_policy.as_deref())
        == Some("All")
}

/// Reconciles the MPIJob `obj`, which does not fit the model (`unfit`): when it is the
/// controller's (its `managedBy`, read however the rest is shaped), its status gets the
/// condition `Failed` (reason `ValidationError`) naming the field, and a warning event says the
/// same, once; nothing is made for it. It is looked at again when it changes.
async fn reconcile_unfit(
    obj: &StoredMpiJob,
    unfit: &Unfit,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let name = obj.name_any();
    let ns = obj
        .namespace()
        .ok_or_else(|| ReconcileError::NoNamespace(name.clone()))?;
    let key = format!("{ns}/{name}");
    let ours = obj
        .managed_by()
        .is_ok_and(|by| managed_by(by.as_deref(), ctx.settings.manage_all));
    if !ours || obj.metadata.deletion_timestamp.is_some() {
        ctx.metrics.set_phase(&key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    tracing::warn!("MPIJob {key} does not fit the MPIJob type: {unfit}");
    let old = obj.status().unwrap_or_default();
    let why = format!(
        "{unfit} (the MPIJob does not fit {} {})",
        MpiJob::api_version(&()),
        MpiJob::kind(&())
    );
    let observed = Observed {
        name: &name,
        namespace: &ns,
        suspend: false,
        workers: 0,
        job: None,
        pods: &[],
        invalid: Some(&why),
    };
    let out = next_status(&old, &observed, &now());
    if out.status != old && !write_status(ctx, &ns, &name, &out.status).await? {
        ctx.metrics.set_phase(&key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    for n in &out.notices {
        publish(ctx, obj, n).await;
    }
    ctx.metrics.set_phase(&key, Some(phase(&out.status)));
    Ok(Action::await_change())
}

/// After a failed reconcile: counted, logged, retried after a backoff that doubles with each
/// failure of the MPIJob in a row (5 s to 5 min).
pub(crate) fn error_policy<K: Resource>(
    obj: Arc<K>,
    e: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.failed();
    let key = format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    );
    let wait = backoff(ctx.failures.failed(&key));
    tracing::warn!("MPIJob {key}: {e} (retried in {} s)", wait.as_secs());
    Action::requeue(wait)
}

/// Whether the MPIJob `ns/name` is still stored with `uid` and not being deleted, read from
/// the API server (not the cache, which may lag behind a delete).
async fn still_there(
    ctx: &Context,
    ns: &str,
    name: &str,
    uid: &str,
) -> Result<bool, ReconcileError> {
    let api: Api<StoredMpiJob> = Api::namespaced(ctx.client.clone(), ns);
    let cur = api
        .get_opt(name)
        .await
        .map_err(api_error(format!("reading the MPIJob {ns}/{name}")))?;
    Ok(cur.is_some_and(|o| {
        o.metadata.uid.as_deref() == Some(uid) && o.metadata.deletion_timestamp.is_none()
    }))
}

/// The error of the `kind` `key` (`namespace/name`, of `meta`), which is not the MPIJob's own:
/// retried, with a warning event on the MPIJob, when it goes by itself; else a refusal
/// (`ErrResourceExists`) naming it.
async fn not_ours(
    ctx: &Context,
    obj: &MpiJob,
    kind: &str,
    key: &str,
    meta: &ObjectMeta,
) -> ReconcileError {
    let name = obj.name_any();
    if !passing(meta, &name) {
        let job = format!("{}/{name}", obj.namespace().unwrap_or_default());
        return ReconcileError::Refused {
            reason: EXISTS,
            why: not_managed(kind, key, meta, &job),
        };
    }
    let e = ReconcileError::NotOurs {
        kind: kind.into(),
        key: key.into(),
    };
    let notice = Notice {
        warning: true,
        reason: EXISTS.into(),
        message: e.to_string(),
    };
    publish(ctx, obj, &notice).await;
    e
}

/// The reason of the condition `Failed` of an MPIJob an object of whose names is another's
/// (mpi-operator's event reason for the same).
const EXISTS: &str = "ErrResourceExists";

/// Makes what the MPIJob `obj` should have and is missing, and brings its child (`job`, as
/// read) in line; returns the child. A child made now is attempt `attempt`
/// ([`Child::mark`]). An existing child that is not its own, or an MPIJob the conversion
/// refuses, is an error.
async fn make(
    ctx: &Context,
    obj: &MpiJob,
    ns: &str,
    job: Option<Child>,
    attempt: u32,
) -> Result<Child, ReconcileError> {
    let uid = obj.metadata.uid.as_deref().unwrap_or_default();
    if let Some(j) = &job {
        if !owned(j.meta(), uid) {
            let at = format!("{ns}/{}", obj.name_any());
            return Err(not_ours(ctx, obj, j.kind(), &at, j.meta()).await);
        }
    }
    // The key is used only if the Secret is made now; it never leaves this process otherwise.
    let mut d = desired(obj, &ctx.settings, &fresh_key()).map_err(|e| ReconcileError::Refused {
        reason: INVALID,
        why: e.to_string(),
    })?;
    d.child.mark(attempt, restart::deadline_left(obj, &now()));
    // Said once, when the first attempt's child is made.
    let warning = d
        .launcher_warning
        .clone()
        .filter(|_| job.is_none() && attempt == 0);
    let made = ensure(ctx, obj, ns, d, job).await?;
    if let Some(message) = warning {
        tracing::warn!("MPIJob {ns}/{}: {message}", obj.name_any());
        let notice = Notice {
            warning: true,
            reason: LAUNCHER_TEMPLATE_IGNORED.into(),
            message,
        };
        publish(ctx, obj, &notice).await;
    }
    Ok(made)
}

/// Makes the objects that are missing and brings the child in line; returns the child.
async fn ensure(
    ctx: &Context,
    obj: &MpiJob,
    ns: &str,
    d: Desired,
    job: Option<Child>,
) -> Result<Child, ReconcileError> {
    let Some(existing) = job else {
        // The child last: its pods need the others. What an earlier, interrupted reconcile made
        // is left as it is; what another made stops it all.
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let mut missing = Vec::new();
        for o in &d.others {
            let (api, kind) = api_of(ctx, ns, o);
            let at = format!("{ns}/{}", o.name_any());
            match api
                .get_opt(&o.name_any())
                .await
                .map_err(api_error(format!("reading the {kind} {at}")))?
            {
                None => missing.push((api, kind, o)),
                Some(cur) if owned(&cur.metadata, uid) => {}
                Some(cur) => return Err(not_ours(ctx, obj, &kind, &at, &cur.metadata).await),
            }
        }
        // Made now, so the controller's alone (no force: another writer's field is a conflict).
        for (api, kind, o) in missing {
            // Never the object in an error: the Secret's holds its key.
            let what = format!("making the {kind} {ns}/{}", o.name_any());
            api.patch(&o.name_any(), &apply_params(false), &Patch::Apply(o))
                .await
                .map_err(api_error(what))?;
        }
        return child::apply(&ctx.client, ns, &d.child, &apply_params(false), "making").await;
    };
    match Child::update(&existing, &d.child) {
        None => Ok(existing),
        // The fields that change (suspend, the template's scheduling) are the controller's,
        // made from the MPIJob: forced.
        Some(next) => child::apply(&ctx.client, ns, &next, &apply_params(true), "updating").await,
    }
}

/// The API of the object `o` (of a kind the rendering makes), and its kind.
fn api_of(ctx: &Context, ns: &str, o: &DynamicObject) -> (Api<DynamicObject>, String) {
    let t = o.types.clone().unwrap_or_default();
    let gvk = GroupVersionKind::try_from(&t)
        .unwrap_or_else(|_| GroupVersionKind::gvk("", &t.api_version, &t.kind));
    let api = Api::namespaced_with(ctx.client.clone(), ns, &ApiResource::from_gvk(&gvk));
    (api, t.kind)
}

/// The pods of the child `job` in `ns` (by the job's label, and the child's own:
/// [`Child::owns_pod`]), from the controller's pod cache: the watch that wakes the MPIJobs
/// fills it.
async fn pods_of(
    ctx: &Context,
    ns: &str,
    name: &str,
    job: &Child,
) -> Result<Vec<Arc<Pod>>, ReconcileError> {
    // Before the first list is in, the cache would show no pod at all.
    tokio::time::timeout(CACHE_WAIT, ctx.pods.wait_until_ready())
        .await
        .ok()
        .and_then(Result::ok)
        .ok_or(ReconcileError::PodCache)?;
    Ok(ctx.pods.state_filter(|p| {
        p.metadata.namespace.as_deref() == Some(ns)
            && p.labels().get(JOB_LABEL).map(String::as_str) == Some(name)
            && job.owns_pod(p)
    }))
}

/// How long a reconcile waits for the pod cache's first list.
const CACHE_WAIT: Duration = Duration::from_secs(30);

/// Publishes an event on the MPIJob (a failure is logged, never fatal).
async fn publish<K: Resource<DynamicType = ()>>(ctx: &Context, obj: &K, n: &Notice) {
    let ev = Event {
        type_: if n.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: n.reason.clone(),
        note: Some(n.message.clone()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = obj.object_ref(&());
    if let Err(e) = ctx.recorder.publish(&ev, &reference).await {
        tracing::warn!(
            "cannot record the event {} on {}: {e}",
            n.reason,
            obj.meta().name.as_deref().unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests;
