//! What an MPIJob should have in the cluster, computed without one: which MPIJobs are ours
//! ([`managed`]), the objects `--from-mpijob` renders for it, each owned by the MPIJob
//! ([`desired`]; the launcher is told the MPIJob, to record its `DaemonsUp` event there, and
//! its Role may create Events), and the change a Job already made needs ([`job_update`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use serde_json::{json, Map, Value};

use crate::launch::daemons_up::MpiJobRef;
use crate::manifest::api_server::ApiServer;
use crate::manifest::mpijob::model::MpiJob;
use crate::manifest::mpijob::{from_model, MpiJobError, Note, Overrides, CONTROLLER_NAME};
use crate::manifest::{objects, ManifestError};

/// Why an MPIJob's objects cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DesiredError {
    /// The conversion refused the MPIJob (its reason is the user's to fix).
    #[error(transparent)]
    Convert(#[from] MpiJobError),
    /// The converted job could not be rendered into objects.
    #[error(transparent)]
    Render(#[from] ManifestError),
    /// The MPIJob has no name or uid: not one the API server returned, so nothing can name it
    /// as its owner.
    #[error("the MPIJob has no name or uid: it was not read from the API server")]
    Unsaved,
}

/// What the command line gives every conversion.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Settings {
    /// `--inject-image`: the image whose init container copies the runtime into the pods.
    pub(crate) inject_image: String,
    /// `--image-pull-policy` of every container.
    pub(crate) pull_policy: Option<String>,
    /// `--api-server-cidr`, `--api-server-port` or `--api-server-from-cluster`: where the pods
    /// may reach the Kubernetes API.
    pub api_server: ApiServer,
    /// `--manage-all`: also the MPIJobs that name no `managedBy`.
    pub(crate) manage_all: bool,
}

/// Whether the controller reconciles the MPIJob `job`: its `spec.runPolicy.managedBy` names
/// [`CONTROLLER_NAME`], or names nothing (absent or empty) and `manage_all` is set. Every other
/// value belongs to another controller (mpi-operator's `kubeflow.org/mpi-operator`, Kueue's
/// `kueue.x-k8s.io/multikueue`).
pub fn managed(job: &MpiJob, manage_all: bool) -> bool {
    let by = job
        .spec
        .run_policy
        .as_ref()
        .and_then(|p| p.managed_by.as_deref());
    match by {
        Some(m) if !m.is_empty() => m == CONTROLLER_NAME,
        _ => manage_all,
    }
}

/// The objects of one MPIJob.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The ServiceAccount, Role, RoleBinding, Secret and NetworkPolicy: created if absent,
    /// never changed (the Secret keeps the key it was made with).
    pub others: Vec<Value>,
    /// The Indexed Job, created last (its pods need the others).
    pub job: Value,
    /// What the conversion changed or cannot honour.
    pub notes: Vec<Note>,
}

/// The MPIJob `job` as its launcher names it to record events there (its `DaemonsUp`).
fn events_to(job: &MpiJob) -> Option<MpiJobRef> {
    Some(MpiJobRef {
        name: job.metadata.name.clone().filter(|n| !n.is_empty())?,
        uid: job.uid().filter(|u| !u.is_empty())?,
    })
}

/// The objects `--from-mpijob` renders for the MPIJob `job` (as the API server returns it),
/// each controlled by it (`controller: true`: deleting the MPIJob deletes them); `key` is the
/// Secret's (made in the controller, used only if the Secret is created).
pub fn desired(job: &MpiJob, s: &Settings, key: &str) -> Result<Desired, DesiredError> {
    let overrides = Overrides {
        inject_image: s.inject_image.clone(),
        pull_policy: s.pull_policy.clone(),
        api_server: s.api_server.clone(),
        ..Default::default()
    };
    let (mut plan, notes) = from_model(job, &overrides)?;
    plan.events_to = Some(events_to(job).ok_or(DesiredError::Unsaved)?);
    let owner = OwnerReference {
        // The MPIJob's deletion in the foreground waits for them.
        block_owner_deletion: Some(true),
        ..job.controller_owner_ref(&()).ok_or(DesiredError::Unsaved)?
    };
    let mut others = Vec::new();
    let mut made = Value::Null;
    for mut o in objects(&plan, Some(key))? {
        o["metadata"]["ownerReferences"] = json!([owner]);
        if o["kind"] == "Job" {
            made = o;
        } else {
            others.push(o);
        }
    }
    Ok(Desired {
        others,
        job: made,
        notes,
    })
}

/// A JSON merge patch that turns `old` into `new` (None: they are equal): removed keys become
/// null, objects are patched key by key, anything else is replaced.
pub(crate) fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            for (k, v) in n {
                if let Some(d) = merge_diff(o.get(k).unwrap_or(&Value::Null), v) {
                    out.insert(k.clone(), d);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// The fields of a suspended Job's pod template Kubernetes lets change (its scheduling
/// directives), which Kueue writes into the MPIJob's templates before it admits the job.
const SCHEDULING: &[&str] = &["nodeSelector", "tolerations", "affinity", "schedulingGates"];

/// Whether the Job has finished (`Complete` or `Failed`).
pub(crate) fn job_finished(job: &Value) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"
            })
        })
}

/// The merge patch the Job `existing` needs to follow `desired` (None: nothing to change).
/// Only `spec.suspend` follows the MPIJob once the Job runs; while it is suspended, the pod
/// template's scheduling directives, labels and annotations follow too (what Kueue writes
/// when it admits the job reaches the pods). A finished Job is left alone.
pub(crate) fn job_update(existing: &Value, desired: &Value) -> Option<Value> {
    if job_finished(existing) {
        return None;
    }
    let suspended = existing["spec"]["suspend"] == true;
    let want = desired["spec"]["suspend"] == true;
    let mut patch = json!({});
    if suspended {
        let old = &existing["spec"]["template"];
        let new = &desired["spec"]["template"];
        for f in SCHEDULING {
            let (o, n) = (&old["spec"][f], &new["spec"][f]);
            // Keys Kueue removed become null, so no stale one stays.
            if let Some(d) = merge_diff(o, n) {
                patch["spec"]["template"]["spec"][f] = d;
            }
        }
        // Labels and annotations are only added or changed: the Job controller adds its own.
        for m in ["labels", "annotations"] {
            if let Some(n) = new["metadata"][m].as_object() {
                for (k, v) in n {
                    if old["metadata"][m].get(k) != Some(v) {
                        patch["spec"]["template"]["metadata"][m][k] = v.clone();
                    }
                }
            }
        }
    }
    if suspended != want {
        patch["spec"]["suspend"] = json!(want);
    }
    (patch != json!({})).then_some(patch)
}
