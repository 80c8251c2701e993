//! The child an MPIJob's pods run under, in one place: the single Indexed Job (pod 0 the
//! launcher, every pod from the Worker's template), or, where the cluster serves JobSets and
//! the MPIJob has workers, a JobSet whose replicated jobs `launcher` and `worker` each have
//! their own template. What the reconcile and the restarts do to a child is here, for both:
//! read it, its failure, its success, the pods it owns; mark it with its attempt
//! ([`ATTEMPT_LABEL`]); bring one made already in line ([`Child::update`]: `suspend`, and
//! while suspended what Kueue writes into the pod templates); apply it; delete it in the
//! foreground.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind, TypeMeta};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use super::observe::{job_condition, job_finished, job_has};
use super::retry::{api_error, ReconcileError};
use crate::workload::LAUNCHER;

/// The label of a child (and of its pods' templates) with its attempt: 0, then 1 after the
/// first restart, and so on.
pub(crate) const ATTEMPT_LABEL: &str = "prrte-k8s.io/attempt";
/// The label JobSet puts on its child Jobs and their pods with the JobSet's uid.
pub(crate) const JOBSET_UID_LABEL: &str = "jobset.sigs.k8s.io/jobset-uid";
/// The JobSet's API group.
pub(crate) const JOBSET_GROUP: &str = "jobset.x-k8s.io";
/// The JobSet's API version.
const JOBSET_VERSION: &str = "v1alpha2";
/// The JobSet's kind.
pub(crate) const JOBSET_KIND: &str = "JobSet";

/// The JobSet's resource.
pub(crate) fn jobset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(JOBSET_GROUP, JOBSET_VERSION, JOBSET_KIND),
        "jobsets",
    )
}

/// How a child failed: its reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub reason: String,
    pub message: String,
}

/// One of a child's true conditions.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Ended {
    pub reason: Option<String>,
    pub message: Option<String>,
    pub at: Option<Time>,
}

/// An MPIJob's child: the Job, or the JobSet (untyped: k8s-openapi has no type for it). One
/// at a time in a reconcile, never held in a collection: the Job is not boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Child {
    Job(Job),
    JobSet(DynamicObject),
}

impl Child {
    /// The child of the rendered object `o`, if it is a Job or a JobSet.
    pub(crate) fn from_object(o: DynamicObject) -> Result<Option<Child>, serde_json::Error> {
        let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
        match kind.as_str() {
            "Job" => Ok(Some(Child::Job(serde_json::from_value(
                serde_json::to_value(o)?,
            )?))),
            JOBSET_KIND => Ok(Some(Child::JobSet(o))),
            _ => Ok(None),
        }
    }

    /// `Job` or `JobSet`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Child::Job(_) => "Job",
            Child::JobSet(_) => JOBSET_KIND,
        }
    }

    /// The Job, if the child is one.
    #[cfg(test)]
    pub fn job(&self) -> Option<&Job> {
        match self {
            Child::Job(j) => Some(j),
            Child::JobSet(_) => None,
        }
    }

    /// Whether the child is a JobSet.
    pub(crate) fn is_jobset(&self) -> bool {
        matches!(self, Child::JobSet(_))
    }

    pub(crate) fn meta(&self) -> &ObjectMeta {
        match self {
            Child::Job(j) => &j.metadata,
            Child::JobSet(o) => &o.metadata,
        }
    }

    pub(crate) fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Child::Job(j) => &mut j.metadata,
            Child::JobSet(o) => &mut o.metadata,
        }
    }

    /// The child's true condition of `type_`.
    fn condition(&self, type_: &str) -> Option<Ended> {
        match self {
            Child::Job(j) => job_condition(j, type_).map(|c| Ended {
                reason: c.reason.clone(),
                message: c.message.clone(),
                at: c.last_transition_time.clone(),
            }),
            Child::JobSet(o) => o.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == type_ && c["status"] == "True")
                .map(|c| Ended {
                    reason: c["reason"].as_str().map(String::from),
                    message: c["message"].as_str().map(String::from),
                    at: serde_json::from_value(c["lastTransitionTime"].clone()).ok(),
                }),
        }
    }

    /// The child's `Failed` condition, if it failed.
    pub(crate) fn failed(&self) -> Option<Ended> {
        self.condition("Failed")
    }

    /// The failure of the child (its condition `Failed`), if it failed.
    pub(crate) fn failure(&self) -> Option<Failure> {
        let c = self.failed()?;
        Some(Failure {
            reason: c.reason.unwrap_or_default(),
            message: c.message.unwrap_or_default(),
        })
    }

    /// The child's success (the Job's `Complete`, the JobSet's `Completed`), if it succeeded.
    pub(crate) fn complete(&self) -> Option<Ended> {
        match self {
            Child::Job(_) => self.condition("Complete"),
            Child::JobSet(_) => self.condition("Completed"),
        }
    }

    /// When the child succeeded: the Job's `completionTime`, else its condition's time.
    pub(crate) fn completion_time(&self) -> Option<Time> {
        let own = match self {
            Child::Job(j) => j.status.as_ref().and_then(|s| s.completion_time.clone()),
            Child::JobSet(_) => None,
        };
        own.or_else(|| self.complete().and_then(|c| c.at))
    }

    /// Whether the child has finished (succeeded or failed).
    pub(crate) fn finished(&self) -> bool {
        self.complete().is_some() || self.failed().is_some()
    }

    /// Whether the child itself ends its pods (suspended, failing or failed, succeeding or
    /// complete): its deletions of them are not news.
    pub(crate) fn ending(&self) -> bool {
        match self {
            Child::Job(j) => {
                j.spec.as_ref().and_then(|s| s.suspend) == Some(true)
                    || job_has(
                        j,
                        &["FailureTarget", "Failed", "SuccessCriteriaMet", "Complete"],
                    )
            }
            Child::JobSet(o) => o.data["spec"]["suspend"] == true || self.finished(),
        }
    }

    /// Whether the launcher's pod is done (with `cleanPodPolicy: None` the workers stay up,
    /// so the child itself does not complete): the Job's index 0 among its completed
    /// indexes, the JobSet's replicated job `launcher` succeeded.
    pub(crate) fn launcher_done(&self) -> bool {
        match self {
            Child::Job(j) => {
                j.status
                    .as_ref()
                    .and_then(|s| s.completed_indexes.as_deref())
                    .and_then(|c| c.split([',', '-']).next())
                    == Some("0")
            }
            Child::JobSet(o) => o.data["status"]["replicatedJobsStatus"]
                .as_array()
                .is_some_and(|rs| {
                    rs.iter().any(|r| {
                        r["name"] == LAUNCHER && r["succeeded"].as_i64().is_some_and(|n| n >= 1)
                    })
                }),
        }
    }

    /// Whether the pod `p` is one of the child's: owned by the Job, or labelled with the
    /// JobSet's uid (its child Jobs own its pods).
    pub(crate) fn owns_pod(&self, p: &Pod) -> bool {
        let uid = self.meta().uid.as_deref().unwrap_or_default();
        match self {
            Child::Job(_) => p.owner_references().iter().any(|r| r.uid == uid),
            Child::JobSet(_) => p.labels().get(JOBSET_UID_LABEL).map(String::as_str) == Some(uid),
        }
    }

    /// Applies `f` to each of the child's pod templates: the Job's, the JobSet's launcher's
    /// and workers'.
    pub(crate) fn each_template(&mut self, mut f: impl FnMut(&mut PodTemplateSpec)) {
        match self {
            Child::Job(j) => f(&mut j.spec.get_or_insert_with(JobSpec::default).template),
            Child::JobSet(o) => each_job_spec(&mut o.data, |spec| f(&mut spec.template)),
        }
    }

    /// Marks the child (its metadata and its pods' templates) with its `attempt`; an attempt
    /// after the first gets what is left of the deadline (`left`) where the child has one.
    pub(crate) fn mark(&mut self, attempt: u32, left: Option<i64>) {
        let value = attempt.to_string();
        self.meta_mut()
            .labels
            .get_or_insert_with(Default::default)
            .insert(ATTEMPT_LABEL.into(), value.clone());
        let mark = |spec: &mut JobSpec| {
            spec.template
                .metadata
                .get_or_insert_with(Default::default)
                .labels
                .get_or_insert_with(Default::default)
                .insert(ATTEMPT_LABEL.into(), value.clone());
            if attempt > 0 && spec.active_deadline_seconds.is_some() {
                spec.active_deadline_seconds = left.or(spec.active_deadline_seconds);
            }
        };
        match self {
            Child::Job(j) => mark(j.spec.get_or_insert_with(JobSpec::default)),
            Child::JobSet(o) => each_job_spec(&mut o.data, mark),
        }
    }

    /// The child `existing` brought in line with `want` (None: nothing to change), as the body
    /// of the controller's apply: the child as it is (so that the apply keeps every field, its
    /// own and the ones others set, e.g. a growth's parallelism) with `spec.suspend`
    /// following the MPIJob, and, while it is suspended, each pod template's scheduling
    /// directives (replaced: a key Kueue removed goes) and its labels and annotations (added
    /// or changed: the Job controller adds its own) too, so that what Kueue writes when it
    /// admits the job reaches the pods. A finished child, or one of another kind than
    /// `want` (made before the cluster served JobSets, or after), is left alone.
    pub(crate) fn update(existing: &Child, want: &Child) -> Option<Child> {
        match (existing, want) {
            (Child::Job(have), Child::Job(want)) => job_update(have, want).map(Child::Job),
            (Child::JobSet(have), Child::JobSet(want)) => {
                jobset_update(have, want).map(Child::JobSet)
            }
            _ => None,
        }
    }
}

/// Applies `f` to the Job spec of each of the JobSet's (`data`'s) replicated jobs.
fn each_job_spec(data: &mut Value, mut f: impl FnMut(&mut JobSpec)) {
    let Some(rjs) = data["spec"]["replicatedJobs"].as_array_mut() else {
        return;
    };
    for rj in rjs {
        let at = &mut rj["template"]["spec"];
        let Ok(mut spec) = serde_json::from_value::<JobSpec>(at.clone()) else {
            continue;
        };
        f(&mut spec);
        if let Ok(v) = serde_json::to_value(&spec) {
            *at = v;
        }
    }
}

/// The pod templates of the JobSet `data`, by replicated job.
fn jobset_templates(data: &Value) -> Vec<(String, PodTemplateSpec)> {
    data["spec"]["replicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|rj| {
            let t = serde_json::from_value(rj["template"]["spec"]["template"].clone()).ok()?;
            Some((rj["name"].as_str()?.to_string(), t))
        })
        .collect()
}

/// What Kueue writes into a suspended child's pod template `want` brought into `t`.
fn admit(t: &mut PodTemplateSpec, w: &PodTemplateSpec) {
    let (ts, ws) = (
        t.spec.get_or_insert_with(Default::default),
        w.spec.clone().unwrap_or_default(),
    );
    ts.node_selector = ws.node_selector;
    ts.tolerations = ws.tolerations;
    ts.affinity = ws.affinity;
    ts.scheduling_gates = ws.scheduling_gates;
    let meta = t.metadata.get_or_insert_with(Default::default);
    let wm = w.metadata.clone().unwrap_or_default();
    for (mine, theirs) in [
        (&mut meta.labels, wm.labels),
        (&mut meta.annotations, wm.annotations),
    ] {
        if let Some(add) = theirs.filter(|m| !m.is_empty()) {
            mine.get_or_insert_with(Default::default).extend(add);
        }
    }
}

/// The metadata of an apply's body: the object's name, namespace, labels, annotations and
/// owners, none of the server's fields.
fn apply_meta(m: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        labels: m.labels.clone(),
        annotations: m.annotations.clone(),
        owner_references: m.owner_references.clone(),
        ..Default::default()
    }
}

/// [`Child::update`] of a Job.
pub(crate) fn job_update(existing: &Job, want: &Job) -> Option<Job> {
    if job_finished(existing) {
        return None;
    }
    let have = existing.spec.as_ref()?;
    let new = want.spec.as_ref()?;
    let mut next = have.clone();
    if have.suspend == Some(true) {
        admit(&mut next.template, &new.template);
    }
    let suspend = new.suspend == Some(true);
    if have.suspend.unwrap_or(false) != suspend {
        next.suspend = Some(suspend);
    }
    if &next == have {
        return None;
    }
    Some(Job {
        metadata: apply_meta(&existing.metadata),
        spec: Some(next),
        status: None,
    })
}

/// [`Child::update`] of a JobSet.
fn jobset_update(existing: &DynamicObject, want: &DynamicObject) -> Option<DynamicObject> {
    if Child::JobSet(existing.clone()).finished() {
        return None;
    }
    let have = &existing.data["spec"];
    let mut next = existing.data.clone();
    let suspended = have["suspend"] == true;
    if suspended {
        let wanted = jobset_templates(&want.data);
        for rj in next["spec"]["replicatedJobs"].as_array_mut()? {
            let name = rj["name"].as_str().unwrap_or_default().to_string();
            let Some((_, w)) = wanted.iter().find(|(n, _)| *n == name) else {
                continue;
            };
            let at = &mut rj["template"]["spec"]["template"];
            let mut t: PodTemplateSpec = serde_json::from_value(at.clone()).unwrap_or_default();
            admit(&mut t, w);
            if let Ok(v) = serde_json::to_value(&t) {
                *at = v;
            }
        }
    }
    let suspend = want.data["spec"]["suspend"] == true;
    if suspended != suspend {
        next["spec"]["suspend"] = Value::Bool(suspend);
    }
    if next["spec"] == *have {
        return None;
    }
    Some(DynamicObject {
        types: Some(TypeMeta {
            api_version: format!("{JOBSET_GROUP}/{JOBSET_VERSION}"),
            kind: JOBSET_KIND.into(),
        }),
        metadata: apply_meta(&existing.metadata),
        data: serde_json::json!({"spec": next["spec"].clone()}),
    })
}

/// The child `name` in `ns`: with `jobset`, its JobSet if there is one, else its Job (made
/// before the cluster served JobSets, or of an MPIJob without workers).
pub(crate) async fn read(
    client: &Client,
    ns: &str,
    name: &str,
    jobset: bool,
) -> Result<Option<Child>, ReconcileError> {
    if jobset {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &jobset_resource());
        let js = api
            .get_opt(name)
            .await
            .map_err(api_error(format!("reading the JobSet {ns}/{name}")))?;
        if let Some(js) = js {
            return Ok(Some(Child::JobSet(js)));
        }
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    Ok(jobs
        .get_opt(name)
        .await
        .map_err(api_error(format!("reading the Job {ns}/{name}")))?
        .map(Child::Job))
}

/// Applies the child `c` with `params` (the controller's server-side apply); returns it as
/// the API server stored it. `what` says why ("making", "updating").
pub(crate) async fn apply(
    client: &Client,
    ns: &str,
    c: &Child,
    params: &PatchParams,
    what: &str,
) -> Result<Child, ReconcileError> {
    let name = c.meta().name.clone().unwrap_or_default();
    let why = format!("{what} the {} {ns}/{name}", c.kind());
    match c {
        Child::Job(j) => {
            let api: Api<Job> = Api::namespaced(client.clone(), ns);
            api.patch(&name, params, &Patch::Apply(j))
                .await
                .map(Child::Job)
                .map_err(api_error(why))
        }
        Child::JobSet(o) => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &jobset_resource());
            api.patch(&name, params, &Patch::Apply(o))
                .await
                .map(Child::JobSet)
                .map_err(api_error(why))
        }
    }
}

/// Deletes the failed child `c` in the foreground (its pods go first; it is made again once it
/// is gone); one already gone, or another of the name (another uid), is left.
pub(crate) async fn delete(client: &Client, ns: &str, c: &Child) -> Result<(), ReconcileError> {
    let name = c.meta().name.clone().unwrap_or_default();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: c.meta().uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::foreground()
    };
    let r = match c {
        Child::Job(_) => {
            let api: Api<Job> = Api::namespaced(client.clone(), ns);
            api.delete(&name, &params).await.map(|_| ())
        }
        Child::JobSet(_) => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &jobset_resource());
            api.delete(&name, &params).await.map(|_| ())
        }
    };
    match r {
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        r => r.map_err(api_error(format!(
            "deleting the failed {} {ns}/{name}",
            c.kind()
        ))),
    }
}

#[cfg(test)]
mod tests;
