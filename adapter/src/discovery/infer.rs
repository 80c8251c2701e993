//! Inferring what the configuration leaves open: our own pod, the selector, the expected
//! number of pods.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, DynamicObject, ListParams};

use super::api::{Ctx, Operation};
use super::error::DiscoveryError;
use super::readiness::{classify, PodReadiness};
use super::record::PodRecord;
use super::selector::validate_value;
use crate::workload::{
    WorkloadKind, WorkloadRef, JOBSET_NAME_LABEL, JOBSET_REPLICATED_JOB_LABEL, JOB_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
};

pub(crate) const KUBEFLOW_JOB_LABEL: &str = "training.kubeflow.org/job-name";

/// The labels looked for on our own pod, most encompassing workload first: a JobSet's pods
/// also carry the name of their child Job, and the whole JobSet is the MPI job.
pub(crate) const INFERENCE_LABELS: &[&str] = &[
    JOBSET_NAME_LABEL,
    KUBEFLOW_JOB_LABEL,
    JOB_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
];

/// Labels controllers set per revision of a pod template; never part of a selector for all
/// pods (nor are the labels a kind sets per pod: [`WorkloadKind::per_pod_labels`]).
const REVISION_LABELS: &[&str] = &["controller-revision-hash", "pod-template-hash"];

/// How the name of our own pod was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SelfNameSource {
    /// `DiscoveryConfig::self_pod` (MCA param / CLI).
    Config,
    /// The `POD_NAME` environment variable.
    PodNameEnv,
    /// The `HOSTNAME` environment variable.
    HostnameEnv,
    /// gethostname(2).
    Gethostname,
}

impl SelfNameSource {
    pub fn describe(self) -> &'static str {
        match self {
            SelfNameSource::Config => "the self_pod setting",
            SelfNameSource::PodNameEnv => "$POD_NAME",
            SelfNameSource::HostnameEnv => "$HOSTNAME",
            SelfNameSource::Gethostname => "the host name",
        }
    }

    /// A host name equals the pod name unless the pod sets spec.hostname.
    pub(crate) fn is_hostname(self) -> bool {
        matches!(
            self,
            SelfNameSource::HostnameEnv | SelfNameSource::Gethostname
        )
    }
}

/// Who we are, as far as the environment tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelfIdentity {
    pub name: String,
    pub source: SelfNameSource,
}

impl SelfIdentity {
    /// From the configuration, else `POD_NAME`, else `HOSTNAME`, else gethostname(2).
    pub fn resolve(
        configured: Option<&str>,
        pod_name_env: Option<&str>,
        hostname_env: Option<&str>,
    ) -> Option<SelfIdentity> {
        let pick = |v: Option<&str>, source| {
            v.map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| SelfIdentity {
                    name: v.to_string(),
                    source,
                })
        };
        pick(configured, SelfNameSource::Config)
            .or_else(|| pick(pod_name_env, SelfNameSource::PodNameEnv))
            .or_else(|| pick(hostname_env, SelfNameSource::HostnameEnv))
            .or_else(|| {
                let h = nix::unistd::gethostname().ok()?.into_string().ok()?;
                pick(Some(&h), SelfNameSource::Gethostname)
            })
    }

    /// Whether `pod` is the pod we run in.
    pub fn matches(&self, pod: &Pod) -> bool {
        self.is(
            pod.metadata.name.as_deref(),
            pod.spec.as_ref().and_then(|s| s.hostname.as_deref()),
        )
    }

    /// Whether the pod `pod` records is the pod we run in.
    pub(crate) fn matches_record(&self, pod: &PodRecord) -> bool {
        self.is(
            pod.metadata.name.as_deref(),
            pod.spec.as_ref().and_then(|s| s.hostname.as_deref()),
        )
    }

    /// Whether a pod of that name and hostname is the pod we run in.
    fn is(&self, name: Option<&str>, hostname: Option<&str>) -> bool {
        name == Some(self.name.as_str())
            || (self.source.is_hostname() && hostname == Some(self.name.as_str()))
    }
}

/// The workload the selected pods belong to, used to find the expected pod count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub workload: WorkloadRef,
    /// The parts of it the pods are in, a JobSet's replicated jobs: the count is theirs
    /// (None: all).
    pub replicated_jobs: Option<BTreeSet<String>>,
}

impl Owner {
    fn whole(kind: WorkloadKind, name: &str) -> Owner {
        Owner {
            workload: WorkloadRef::new(kind, name),
            replicated_jobs: None,
        }
    }
}

/// A selector inferred from our own pod.
#[derive(Debug, Clone)]
pub(crate) struct InferredSelector {
    pub selector: String,
    /// Human-readable basis ("label batch.kubernetes.io/job-name of pod ns/x").
    pub(crate) basis: String,
    pub workload: Option<Owner>,
    pub(crate) own_pod: Pod,
    /// The owner object read during inference (a StatefulSet), reused for the expected count.
    pub(crate) owner_object: Option<DynamicObject>,
}

fn pods_api(ctx: &Ctx, ns: &str) -> Api<Pod> {
    Api::namespaced(ctx.api.client.clone(), ns)
}

/// Finds our own pod in `ns`. A name taken from the host name may be the pod's spec.hostname
/// rather than its name; then the pod with that hostname is looked for.
pub(crate) async fn find_own_pod(
    ctx: &Ctx,
    ns: &str,
    me: Option<&SelfIdentity>,
) -> Result<Pod, DiscoveryError> {
    let Some(me) = me else {
        return Err(DiscoveryError::SelfPodNotFound {
            pod: "(unknown)".into(),
            name_source: "no POD_NAME, HOSTNAME or host name available".into(),
            namespace: ns.to_string(),
        });
    };
    let api = pods_api(ctx, ns);
    let op = Operation::pods("get", ns).named(&me.name);
    if let Some(pod) = ctx.call(&op, || api.get_opt(&me.name)).await? {
        return Ok(pod);
    }
    if me.source.is_hostname() {
        let op = Operation::pods("list", ns);
        let lp = ListParams::default();
        let list = ctx.call(&op, || api.list(&lp)).await?;
        let mut found: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| {
                me.matches(p) && !matches!(classify(&PodRecord::from(p)), PodReadiness::Excluded(_))
            })
            .collect();
        if found.len() == 1 {
            return Ok(found.remove(0));
        }
    }
    Err(DiscoveryError::SelfPodNotFound {
        pod: me.name.clone(),
        name_source: me.source.describe().to_string(),
        namespace: ns.to_string(),
    })
}

pub fn controller_of(pod: &PodRecord, kind: WorkloadKind) -> Option<&OwnerReference> {
    let owners = pod.metadata.owner_references.as_ref()?;
    let kind = kind.name();
    owners
        .iter()
        .find(|o| o.kind == kind && o.controller == Some(true))
        .or_else(|| owners.iter().find(|o| o.kind == kind))
}

/// A dynamic API for `kind` in `ns`.
fn api_of(ctx: &Ctx, ns: &str, kind: WorkloadKind) -> Api<DynamicObject> {
    Api::namespaced_with(ctx.api.client.clone(), ns, &kind.api_resource())
}

/// The `get` of the workload `w` in `ns`.
fn get_op(ns: &str, w: &WorkloadRef) -> Operation {
    Operation::get_named(w.kind.plural(), w.kind.group(), ns, &w.name)
}

/// Renders a LabelSelector in selector-string syntax.
pub(crate) fn label_selector_string(sel: &LabelSelector) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        parts.push(format!("{k}={v}"));
    }
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        match e.operator.as_str() {
            "In" => parts.push(format!("{} in ({values})", e.key)),
            "NotIn" => parts.push(format!("{} notin ({values})", e.key)),
            "Exists" => parts.push(e.key.clone()),
            "DoesNotExist" => parts.push(format!("!{}", e.key)),
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// Infers the selector from our own pod: a workload label, else the selector of the workload
/// that controls it (a StatefulSet).
pub(crate) async fn infer_selector(
    ctx: &Ctx,
    ns: &str,
    me: Option<&SelfIdentity>,
) -> Result<InferredSelector, DiscoveryError> {
    let own = find_own_pod(ctx, ns, me).await?;
    let own_name = own.metadata.name.clone().unwrap_or_default();
    let labels = own.metadata.labels.clone().unwrap_or_default();
    for key in INFERENCE_LABELS {
        if let Some(value) = labels
            .get(*key)
            .filter(|v| !v.is_empty() && validate_value(v).is_ok())
        {
            let workload = WorkloadKind::named_by_label(key).map(|k| Owner::whole(k, value));
            return Ok(InferredSelector {
                selector: format!("{key}={value}"),
                basis: format!("label {key} of our pod {ns}/{own_name}"),
                workload,
                own_pod: own,
                owner_object: None,
            });
        }
    }
    // Kinds that put no label with their name on their pods: their pods are found through
    // their controller.
    let unlabelled = WorkloadKind::ALL
        .into_iter()
        .filter(|k| k.owns_pods() && k.pod_label().is_none());
    let record = PodRecord::from(&own);
    for kind in unlabelled {
        if let Some(owner) = controller_of(&record, kind) {
            let name = owner.name.clone();
            return by_controller(ctx, ns, own, &labels, WorkloadRef::new(kind, name)).await;
        }
    }
    Err(not_inferable(ns, &own_name))
}

/// The selector of `owner`, the workload that controls our pod `own` (`labels`: its labels).
async fn by_controller(
    ctx: &Ctx,
    ns: &str,
    own: Pod,
    labels: &BTreeMap<String, String>,
    owner: WorkloadRef,
) -> Result<InferredSelector, DiscoveryError> {
    let own_name = own.metadata.name.clone().unwrap_or_default();
    let (kind, name) = (owner.kind, owner.name.as_str());
    let api = api_of(ctx, ns, kind);
    let object = ctx
        .call_optional(&get_op(ns, &owner), || api.get(name))
        .await?;
    let from_object = object
        .as_ref()
        .and_then(|o| kind.selector(&o.data))
        .and_then(|s| label_selector_string(&s));
    let (selector, basis) = match from_object {
        Some(sel) => (
            sel,
            format!("spec.selector of {kind} {ns}/{name}, owner of our pod {own_name}"),
        ),
        None => {
            // The workload is unreadable: its pods share the template labels, which include
            // everything its selector matches on.
            let Some(template) = template_selector(kind, labels) else {
                return Err(not_inferable(ns, &own_name));
            };
            (
                template,
                format!("template labels of our pod {ns}/{own_name} (owned by {kind} {name})"),
            )
        }
    };
    Ok(InferredSelector {
        selector,
        basis,
        workload: Some(Owner {
            workload: owner,
            replicated_jobs: None,
        }),
        own_pod: own,
        owner_object: object,
    })
}

/// The selector of the pods of a workload of `kind` that share the template labels among our
/// own pod's `labels` (those set per pod or per revision left out); None: there are none.
pub(crate) fn template_selector(
    kind: WorkloadKind,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    let template: Vec<String> = labels
        .iter()
        .filter(|(k, _)| {
            !REVISION_LABELS.contains(&k.as_str()) && !kind.per_pod_labels().contains(&k.as_str())
        })
        .filter(|(k, v)| super::selector::validate_key(k).is_ok() && validate_value(v).is_ok())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    (!template.is_empty()).then(|| template.join(","))
}

fn not_inferable(ns: &str, pod: &str) -> DiscoveryError {
    DiscoveryError::SelectorNotInferable {
        pod: pod.to_string(),
        namespace: ns.to_string(),
        looked_for: INFERENCE_LABELS.iter().map(|s| s.to_string()).collect(),
    }
}

/// Guesses the workload of pods selected by an explicit selector: all of them in one JobSet,
/// or all controlled by one workload of a kind that owns its pods (a Job or StatefulSet).
pub(crate) fn workload_of(pods: &[&PodRecord]) -> Option<Owner> {
    if pods.is_empty() {
        return None;
    }
    let label = |p: &PodRecord, k: &str| p.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let jobsets: BTreeSet<Option<String>> =
        pods.iter().map(|p| label(p, JOBSET_NAME_LABEL)).collect();
    if jobsets.len() == 1 {
        if let Some(Some(name)) = jobsets.into_iter().next() {
            let rjobs: BTreeSet<String> = pods
                .iter()
                .filter_map(|p| label(p, JOBSET_REPLICATED_JOB_LABEL))
                .collect();
            return Some(Owner {
                workload: WorkloadRef::new(WorkloadKind::JobSet, name),
                replicated_jobs: (!rjobs.is_empty()).then_some(rjobs),
            });
        }
    }
    for kind in WorkloadKind::ALL.into_iter().filter(|k| k.owns_pods()) {
        let owners: BTreeSet<Option<String>> = pods
            .iter()
            .map(|p| controller_of(p, kind).map(|o| o.name.clone()))
            .collect();
        if owners.len() == 1 {
            if let Some(Some(name)) = owners.into_iter().next() {
                return Some(Owner::whole(kind, &name));
            }
        }
    }
    None
}

/// Reads the expected pod count from the workload (`None` when its spec gives none); an owner
/// that cannot be read (403, 404) is an error naming the rule, never a silent fallback.
///
/// `known`: the owner object, if inference read it already. `owned`: whether a pod really is
/// controlled by the workload (an ownerReference), not just labelled with its name; a
/// labelled-only workload that does not exist (404) is no error then. Returns the count and a
/// description of where it came from.
pub(crate) async fn expected_from_workload(
    ctx: &Ctx,
    ns: &str,
    owner: &Owner,
    known: Option<&DynamicObject>,
    owned: bool,
) -> Result<Option<(u32, String)>, DiscoveryError> {
    let w = &owner.workload;
    let object = match known {
        Some(o) => o.clone(),
        None => {
            let api = api_of(ctx, ns, w.kind);
            match ctx
                .call_owner(&get_op(ns, w), w.kind.name(), || api.get(&w.name))
                .await
            {
                Ok(o) => o,
                Err(DiscoveryError::OwnerUnreadable { code: 404, .. }) if !owned => {
                    tracing::info!(
                        "no {} {ns}/{} (the pods only carry its name as a label)",
                        w.kind,
                        w.name
                    );
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
    };
    Ok(w.kind
        .expected_pods(&object.data, owner.replicated_jobs.as_ref())
        .map(|n| {
            let source = w.kind.count_source();
            (n, format!("{source} of {} {ns}/{}", w.kind, w.name))
        }))
}

#[cfg(test)]
mod tests;
