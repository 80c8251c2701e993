//! What an MPIJob should have in the cluster, computed without one: which MPIJobs are ours
//! ([`managed`]), the objects `--from-mpijob` renders for it, and with `--gang-scheduler` its
//! PodGroup ([`super::gang`]), each owned by the MPIJob ([`desired`]; the launcher is told the
//! MPIJob, to record its `DaemonsUp` event there, and its Role may create Events). Its child is
//! a JobSet whose launcher has a pod of its own where the cluster serves JobSets
//! (`--launcher-pod`, by default), else the Indexed Job ([`super::child`], which also brings a
//! child already made in line), with a warning where the Launcher's template is not honoured
//! ([`launcher_warning`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::core::dynamic::ParseDynamicObjectError;
use kube::{Resource, ResourceExt};

use super::child::Child;
use super::gang::{self, GangError, GangScheduler};
use super::pod_policy::{check, PodPolicy};

use crate::manifest::api_server::ApiServer;
use crate::manifest::mpijob::model::MpiJob;
use crate::manifest::mpijob::{from_model, MpiJobError, Note, Overrides, CONTROLLER_NAME};
use crate::manifest::{objects, ManifestError};
use crate::settings::mpijob::MpiJobRef;

/// Why an MPIJob's objects cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DesiredError {
    /// The conversion refused the MPIJob (its reason is the user's to fix).
    #[error(transparent)]
    Convert(#[from] MpiJobError),
    /// The converted job could not be rendered into objects.
    #[error(transparent)]
    Render(#[from] ManifestError),
    /// The PodGroup cannot be sized (a quantity that is not one).
    #[error(transparent)]
    Gang(#[from] GangError),
    /// The pod templates ask what the site refuses (`--refuse-foreign-secrets`,
    /// `--refuse-node-name`).
    #[error("{0}")]
    Policy(String),
    /// The MPIJob has no name or uid: not one the API server returned, so nothing can name it
    /// as its owner.
    #[error("the MPIJob has no name or uid: it was not read from the API server")]
    Unsaved,
    /// A rendered object does not read back as the object it is (a bug).
    #[error("a rendered object does not read back: {0}; this is a bug in prrte-k8s")]
    Object(String),
    /// The rendering made no Job nor JobSet (a bug).
    #[error("the rendering made no Job nor JobSet; this is a bug in prrte-k8s")]
    NoJob,
}

impl From<serde_json::Error> for DesiredError {
    fn from(e: serde_json::Error) -> Self {
        DesiredError::Object(e.to_string())
    }
}

impl From<ParseDynamicObjectError> for DesiredError {
    fn from(e: ParseDynamicObjectError) -> Self {
        DesiredError::Object(e.to_string())
    }
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
    /// What the pod templates may not ask.
    pub(crate) pod_policy: PodPolicy,
    /// `--gang-scheduler`: the scheduler whose PodGroup each MPIJob gets.
    pub(crate) gang: Option<GangScheduler>,
    /// The launcher in a pod of its own: each MPIJob with workers gets a JobSet (the cluster
    /// serves them), else the one Indexed Job.
    pub(crate) jobset: bool,
    /// Why the launcher is pod 0 of the one Indexed Job (`jobset` false): the remedy the
    /// warning on an MPIJob whose Launcher's template pod 0 does not get names.
    pub(crate) shared_because: SharedBecause,
}

/// Why the launcher is pod 0 of the one Indexed Job, from the Worker's template.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum SharedBecause {
    /// `--launcher-pod shared`.
    #[default]
    Chosen,
    /// `--launcher-pod auto`, and the API server serves no JobSet.
    NoJobSet,
}

/// The reason of the warning event on an MPIJob whose Launcher's template its launcher does
/// not get (pod 0 of one Indexed Job is the Worker's template).
pub(crate) const LAUNCHER_TEMPLATE_IGNORED: &str = "LauncherTemplateIgnored";

/// How many of the Launcher's fields the warning names (then how many more).
const FIELDS_NAMED: usize = 8;

/// The warning for an MPIJob whose launcher is pod 0 of the one Indexed Job while its
/// Launcher's template differs from the Worker's (`notes`, the conversion's): the fields pod 0
/// does not get and the remedy (`shared_because`). None when the launcher gets its template.
pub(crate) fn launcher_warning(notes: &[Note], shared_because: SharedBecause) -> Option<String> {
    let lost: Vec<&str> = notes
        .iter()
        .filter(|n| n.launcher_lost)
        .map(|n| n.field.as_str())
        .collect();
    let first = lost.first()?;
    let prefix = first
        .find(".template.")
        .map_or("", |i| &first[..i + ".template.".len()]);
    let named: Vec<&str> = lost
        .iter()
        .take(FIELDS_NAMED)
        .map(|f| f.strip_prefix(prefix).unwrap_or(f))
        .collect();
    let more = lost.len().saturating_sub(FIELDS_NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let remedy = match shared_because {
        SharedBecause::NoJobSet => "the cluster serves no JobSet (jobset.x-k8s.io/v1alpha2), so the launcher cannot have a pod of its own: install JobSet and restart the controller (--launcher-pod auto, the default, then gives each MPIJob a JobSet), or run it with --launcher-pod jobset once JobSet is installed",
        SharedBecause::Chosen => "the controller runs with --launcher-pod shared: run it with --launcher-pod auto (the default) or jobset where JobSet is installed, for the launcher to have a pod of its own",
    };
    Some(format!(
        "the Launcher's pod template is not honoured: the launcher is pod 0 of one Indexed Job, made from the Worker's template, and the Launcher's differs in {}{more} ({}); {remedy}",
        named.join(", "),
        prefix.trim_end_matches('.'),
    ))
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
    managed_by(by, manage_all)
}

/// Whether the controller reconciles an MPIJob whose `spec.runPolicy.managedBy` is `by`
/// ([`managed`]'s rule).
pub(crate) fn managed_by(by: Option<&str>, manage_all: bool) -> bool {
    match by {
        Some(m) if !m.is_empty() => m == CONTROLLER_NAME,
        _ => manage_all,
    }
}

/// The objects of one MPIJob, each controlled by it.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The ServiceAccount, Role, RoleBinding, Secret, NetworkPolicy and, with a gang
    /// scheduler, the PodGroup: made while the child is absent, never changed (the Secret
    /// keeps the key it was made with; the child's pods are never more nor fewer than the
    /// PodGroup was sized for).
    pub others: Vec<DynamicObject>,
    /// The child, the Indexed Job or the JobSet, made last (its pods need the others).
    pub child: Child,
    /// What the conversion changed or cannot honour.
    pub notes: Vec<Note>,
    /// The warning that the launcher does not get the Launcher's template
    /// ([`launcher_warning`]), when it does not.
    pub launcher_warning: Option<String>,
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
    if let Some(why) = check(job, &s.pod_policy) {
        return Err(DesiredError::Policy(why));
    }
    let overrides = Overrides {
        inject_image: s.inject_image.clone(),
        pull_policy: s.pull_policy.clone(),
        api_server: s.api_server.clone(),
        jobset: s.jobset,
        ..Default::default()
    };
    let gang = s.gang.as_ref();
    let (mut plan, mut notes) = from_model(&gang::for_conversion(job, gang), &overrides)?;
    plan.events_to = Some(events_to(job).ok_or(DesiredError::Unsaved)?);
    let owner = OwnerReference {
        // The MPIJob's deletion in the foreground waits for them.
        block_owner_deletion: Some(true),
        ..job.controller_owner_ref(&()).ok_or(DesiredError::Unsaved)?
    };
    let mut others = Vec::new();
    let mut made = None;
    for o in objects(&plan, Some(key))? {
        let mut o: DynamicObject = serde_json::from_value(o)?;
        o.metadata.owner_references = Some(vec![owner.clone()]);
        let is_child = o
            .types
            .as_ref()
            .is_some_and(|t| t.kind == "Job" || t.kind == super::child::JOBSET_KIND);
        if is_child && made.is_none() {
            made = Child::from_object(o)?;
        } else {
            others.push(o);
        }
    }
    let mut made = made.ok_or(DesiredError::NoJob)?;
    if let Some(g) = gang {
        // Before the child, whose pods it groups.
        let mut group = gang::pod_group(job, g)?;
        group.metadata.owner_references = Some(vec![owner]);
        let mut stamped = Vec::new();
        made.each_template(|t| stamped.extend(gang::stamp(t, g, &group.name_any())));
        // The same note of each template once.
        stamped.dedup();
        notes.extend(stamped);
        others.push(group);
    }
    let launcher_warning = match made.is_jobset() {
        true => None,
        false => launcher_warning(&notes, s.shared_because),
    };
    Ok(Desired {
        others,
        child: made,
        notes,
        launcher_warning,
    })
}

#[cfg(test)]
mod tests;
