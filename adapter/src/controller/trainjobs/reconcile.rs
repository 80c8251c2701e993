//! One reconcile of a TrainJob, as Trainer's `TrainJobReconciler.Reconcile`: unless it is
//! over, its objects applied (the runtime read from the job's snapshot once there is one; the
//! JobSet left alone once it runs unsuspended; the ssh-auth Secret made once, immutable); then
//! its status from the JobSet (the failed pod read from the JobSet's pods), written when it
//! changed; past `activeDeadlineSeconds` the JobSet deleted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::{json, Value};

use crate::controller::context::apply_params;
use crate::trainjob::render::{from_snapshot, RenderError, SNAPSHOT_SUFFIX, SSH_AUTH_SUFFIX};
use crate::trainjob::status::{self, PodFailure};
use crate::trainjob::types::{TrainJobStatus, TRAINER_MANAGER};
use crate::trainjob::{is_ours, render, ssh, Runtime, TrainJob};

/// What every TrainJob reconcile shares.
pub(crate) struct TrainContext {
    pub(crate) client: Client,
    pub(crate) recorder: Recorder,
}

/// Why a reconcile failed (retried).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrainError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Render(#[from] RenderError),
    #[error("{0}")]
    Key(#[from] ssh::KeyError),
    #[error("the runtime {0}: {1}")]
    Runtime(String, String),
}

/// JobSet's API.
pub(crate) fn jobset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    )
}

fn runtime_resource(cluster: bool) -> ApiResource {
    let kind = if cluster {
        "ClusterTrainingRuntime"
    } else {
        "TrainingRuntime"
    };
    let plural = if cluster {
        "clustertrainingruntimes"
    } else {
        "trainingruntimes"
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", kind),
        plural,
    )
}

/// Whether this controller reconciles `job`: Trainer's default `managedBy` (or none) and a
/// runtime of ours.
pub(crate) fn ours(job: &TrainJob) -> bool {
    job.spec
        .managed_by
        .as_deref()
        .is_none_or(|m| m == TRAINER_MANAGER)
        && is_ours(job)
}

/// One reconcile.
pub(crate) async fn reconcile(
    job: Arc<TrainJob>,
    ctx: Arc<TrainContext>,
) -> Result<Action, TrainError> {
    if !ours(&job) {
        return Ok(Action::await_change());
    }
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let jobsets: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &jobset_resource());
    let before = job.status.clone().unwrap_or_default();
    let mut failed = None;
    if !status::finished(&before) {
        if let Err(e) = apply_objects(&ctx, &job, &jobsets).await {
            publish(
                &ctx,
                &job,
                "TrainJobResourcesCreationFailed",
                &e.to_string(),
            )
            .await;
            failed = Some(e);
        }
    }
    let jobset = jobsets
        .get_opt(&name)
        .await?
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null));
    let failure = match &jobset {
        Some(js) if jobset_failed(js) => first_failure(&ctx.client, &ns, &name).await?,
        _ => None,
    };
    let next = status::next(
        &job,
        jobset.as_ref(),
        failure.as_ref(),
        &Time(jiff::Timestamp::now()),
    );
    if next.delete_jobset {
        let dp = DeleteParams::background();
        if let Err(e) = jobsets.delete(&name, &dp).await {
            tracing::warn!("TrainJob {ns}/{name}: cannot delete the JobSet past the deadline: {e}");
        }
    }
    if next.status != before {
        write_status(&ctx.client, &ns, &name, &next.status).await?;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(match next.deadline_in {
        Some(s) => Action::requeue(Duration::from_secs(s.unsigned_abs())),
        None => Action::await_change(),
    })
}

fn jobset_failed(js: &Value) -> bool {
    js["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Failed" && c["status"] == "True")
    })
}

/// The runtime the job runs on: its snapshot once made (owned by this job), else the runtime
/// named.
async fn runtime_of(ctx: &TrainContext, job: &TrainJob) -> Result<Runtime, TrainError> {
    let ns = job.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let snapshot_name = format!("{}{SNAPSHOT_SUFFIX}", job.name_any());
    if let Some(cm) = cms.get_opt(&snapshot_name).await? {
        let own = cm
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == job.uid().as_ref());
        if !own {
            return Err(TrainError::Runtime(
                snapshot_name,
                "a snapshot ConfigMap exists but is owned by another object".into(),
            ));
        }
        let value = serde_json::to_value(cm).unwrap_or(Value::Null);
        return Ok(from_snapshot(&value)?);
    }
    let r = &job.spec.runtime_ref;
    let ar = runtime_resource(r.is_cluster());
    let api: Api<DynamicObject> = if r.is_cluster() {
        Api::all_with(ctx.client.clone(), &ar)
    } else {
        Api::namespaced_with(ctx.client.clone(), &ns, &ar)
    };
    match api.get_opt(&r.name).await? {
        Some(o) => Ok(Runtime::new(serde_json::to_value(o).unwrap_or(Value::Null))),
        None => Err(TrainError::Runtime(
            format!("{}/{}", ar.kind, r.name),
            "not found".into(),
        )),
    }
}

/// Applies the job's objects.
async fn apply_objects(
    ctx: &TrainContext,
    job: &TrainJob,
    jobsets: &Api<DynamicObject>,
) -> Result<(), TrainError> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let runtime = runtime_of(ctx, job).await?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let keys = match secrets.get_opt(&format!("{name}{SSH_AUTH_SUFFIX}")).await? {
        Some(_) => None,
        None => Some(ssh::generate()?),
    };
    let rendered = render(job, &runtime, keys.as_ref())?;
    // Trainer leaves a JobSet alone once it runs unsuspended.
    let existing = jobsets.get_opt(&name).await?;
    let keep_jobset = existing.is_some_and(|js| {
        !job.spec.suspend.unwrap_or(false) && js.data["spec"]["suspend"] != json!(true)
    });
    let pp = apply_params(true);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    apply(&cms, &rendered.snapshot, &pp).await?;
    if !keep_jobset {
        apply(jobsets, &rendered.jobset, &pp).await?;
    }
    if let Some(s) = &rendered.ssh_auth {
        apply(&secrets, s, &pp).await?;
    }
    if let Some(h) = &rendered.hostfile {
        apply(&cms, h, &pp).await?;
    }
    Ok(())
}

async fn apply<K>(api: &Api<K>, object: &Value, pp: &PatchParams) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(name, pp, &Patch::Apply(object)).await.map(|_| ())
}

/// The first container of the JobSet's pods that ended with a non-zero code, the launcher's
/// first.
async fn first_failure(
    client: &Client,
    ns: &str,
    jobset: &str,
) -> Result<Option<PodFailure>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}"));
    let mut list = pods.list(&lp).await?.items;
    list.sort_by_key(|p| {
        let rjob = p
            .labels()
            .get("jobset.sigs.k8s.io/replicatedjob-name")
            .cloned();
        (rjob.as_deref() != Some("launcher"), p.name_any())
    });
    Ok(list.iter().find_map(pod_failure))
}

/// A pod's first container that ended with a non-zero exit code.
pub(crate) fn pod_failure(p: &Pod) -> Option<PodFailure> {
    let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let t = c.state.as_ref()?.terminated.as_ref()?;
        (t.exit_code != 0).then(|| PodFailure {
            pod: p.name_any(),
            container: c.name.clone(),
            exit_code: t.exit_code,
        })
    })
}

/// Writes the status as Trainer does: a merge patch of `status` (an empty list removed).
async fn write_status(
    client: &Client,
    ns: &str,
    name: &str,
    s: &TrainJobStatus,
) -> Result<(), kube::Error> {
    let list = |v: Value| match v.as_array() {
        Some(a) if a.is_empty() => Value::Null,
        _ => v,
    };
    let body = json!({"status": {
        "conditions": list(serde_json::to_value(&s.conditions).unwrap_or(Value::Null)),
        "jobsStatus": list(serde_json::to_value(&s.jobs_status).unwrap_or(Value::Null)),
    }});
    let api: Api<TrainJob> = Api::namespaced(client.clone(), ns);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
}

/// A warning event on the TrainJob (a failure to record it is logged).
async fn publish(ctx: &TrainContext, job: &TrainJob, reason: &str, message: &str) {
    let ev = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(message.chars().take(1000).collect()),
        action: "Reconciling".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &job.object_ref(&())).await {
        tracing::warn!(
            "cannot record the event {reason} on {}: {e}",
            job.name_any()
        );
    }
}

/// After a failed reconcile: logged, retried in 5 s.
pub(crate) fn error_policy(job: Arc<TrainJob>, e: &TrainError, _: Arc<TrainContext>) -> Action {
    tracing::warn!(
        "TrainJob {}/{}: {e} (retried in 5 s)",
        job.namespace().unwrap_or_default(),
        job.name_any()
    );
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainjob::render::tests::job;

    #[test]
    fn ours_is_trainers_manager_and_a_prrte_k8s_runtime() {
        let j = job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}}));
        assert!(ours(&j));
        let mut m = j.clone();
        m.spec.managed_by = Some(TRAINER_MANAGER.into());
        assert!(ours(&m));
        m.spec.managed_by = Some("kueue.x-k8s.io/multikueue".into());
        assert!(!ours(&m));
        let other = job(json!({"runtimeRef": {"name": "deepspeed-distributed"}}));
        assert!(!ours(&other));
    }

    #[test]
    fn a_pods_failure_is_its_first_nonzero_exit() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "pi-launcher-0-0-x"},
            "status": {"containerStatuses": [
                {"name": "side", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0}}},
                {"name": "node", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 3}}}]}}))
        .unwrap();
        assert_eq!(
            pod_failure(&p),
            Some(PodFailure {
                pod: "pi-launcher-0-0-x".into(),
                container: "node".into(),
                exit_code: 3
            })
        );
    }
}
