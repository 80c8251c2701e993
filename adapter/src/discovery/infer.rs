//! Inferring what the configuration leaves open: our own pod, the selector, the expected
//! number of pods.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;

use super::api::{Ctx, Operation};
use super::error::DiscoveryError;
pub(crate) use super::keys::{JOBSET_NAME_LABEL, JOBSET_REPLICATED_JOB_LABEL};
use super::readiness::{classify, PodReadiness};
use super::record::PodRecord;
use super::selector::validate_value;

pub(crate) const KUBEFLOW_JOB_LABEL: &str = "training.kubeflow.org/job-name";
pub(crate) const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
pub(crate) const LEGACY_JOB_NAME_LABEL: &str = "job-name";

/// The labels looked for on our own pod, most encompassing workload first: a JobSet's pods
/// also carry the name of their child Job, and the whole JobSet is the MPI job.
pub(crate) const INFERENCE_LABELS: &[&str] = &[
    JOBSET_NAME_LABEL,
    KUBEFLOW_JOB_LABEL,
    JOB_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
];

/// Labels a StatefulSet sets per pod or per revision; never part of a selector for all pods.
const PER_POD_LABELS: &[&str] = &[
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "controller-revision-hash",
    "pod-template-hash",
];

/// How the name of our own pod was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelfNameSource {
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
pub struct SelfIdentity {
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
    pub fn matches_record(&self, pod: &PodRecord) -> bool {
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
pub(crate) enum Workload {
    Job(String),
    StatefulSet(String),
    /// A JobSet; `replicated_jobs` limits the count to those replicated jobs (None: all).
    JobSet {
        name: String,
        replicated_jobs: Option<BTreeSet<String>>,
    },
}

/// A selector inferred from our own pod.
#[derive(Debug, Clone)]
pub(crate) struct InferredSelector {
    pub selector: String,
    /// Human-readable basis ("label batch.kubernetes.io/job-name of pod ns/x").
    pub basis: String,
    pub workload: Option<Workload>,
    pub own_pod: Pod,
    /// The StatefulSet read during inference, reused for the expected count.
    pub statefulset: Option<StatefulSet>,
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

pub fn controller_of<'a>(pod: &'a PodRecord, kind: &str) -> Option<&'a OwnerReference> {
    let owners = pod.metadata.owner_references.as_ref()?;
    owners
        .iter()
        .find(|o| o.kind == kind && o.controller == Some(true))
        .or_else(|| owners.iter().find(|o| o.kind == kind))
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

/// Infers the selector from our own pod: a workload label, else the StatefulSet that owns it.
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
            let workload = match *key {
                JOBSET_NAME_LABEL => Some(Workload::JobSet {
                    name: value.clone(),
                    replicated_jobs: None,
                }),
                JOB_NAME_LABEL | LEGACY_JOB_NAME_LABEL => Some(Workload::Job(value.clone())),
                _ => None,
            };
            return Ok(InferredSelector {
                selector: format!("{key}={value}"),
                basis: format!("label {key} of our pod {ns}/{own_name}"),
                workload,
                own_pod: own,
                statefulset: None,
            });
        }
    }
    if let Some(owner) = controller_of(&PodRecord::from(&own), "StatefulSet") {
        let sts_name = owner.name.clone();
        let api: Api<StatefulSet> = Api::namespaced(ctx.api.client.clone(), ns);
        let op = Operation::get_named("statefulsets", "apps", ns, &sts_name);
        let sts = ctx.call_optional(&op, || api.get(&sts_name)).await?;
        let from_sts = sts
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| label_selector_string(&s.selector));
        let (selector, basis) = match from_sts {
            Some(sel) => (
                sel,
                format!(
                    "spec.selector of StatefulSet {ns}/{sts_name}, owner of our pod {own_name}"
                ),
            ),
            None => {
                // The StatefulSet is unreadable: its pods share the template labels, which
                // include everything its selector matches on.
                let template: Vec<String> = labels
                    .iter()
                    .filter(|(k, _)| !PER_POD_LABELS.contains(&k.as_str()))
                    .filter(|(k, v)| {
                        super::selector::validate_key(k).is_ok() && validate_value(v).is_ok()
                    })
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                if template.is_empty() {
                    return Err(not_inferable(ns, &own_name));
                }
                (
                    template.join(","),
                    format!("template labels of our pod {ns}/{own_name} (owned by StatefulSet {sts_name})"),
                )
            }
        };
        return Ok(InferredSelector {
            selector,
            basis,
            workload: Some(Workload::StatefulSet(sts_name)),
            own_pod: own,
            statefulset: sts,
        });
    }
    Err(not_inferable(ns, &own_name))
}

fn not_inferable(ns: &str, pod: &str) -> DiscoveryError {
    DiscoveryError::SelectorNotInferable {
        pod: pod.to_string(),
        namespace: ns.to_string(),
        looked_for: INFERENCE_LABELS.iter().map(|s| s.to_string()).collect(),
    }
}

/// Guesses the workload of pods selected by an explicit selector: all of them in one JobSet,
/// or all controlled by one Job or StatefulSet.
pub(crate) fn workload_of(pods: &[&PodRecord]) -> Option<Workload> {
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
            return Some(Workload::JobSet {
                name,
                replicated_jobs: (!rjobs.is_empty()).then_some(rjobs),
            });
        }
    }
    for kind in ["Job", "StatefulSet"] {
        let owners: BTreeSet<Option<String>> = pods
            .iter()
            .map(|p| controller_of(p, kind).map(|o| o.name.clone()))
            .collect();
        if owners.len() == 1 {
            if let Some(Some(name)) = owners.into_iter().next() {
                return Some(if kind == "Job" {
                    Workload::Job(name)
                } else {
                    Workload::StatefulSet(name)
                });
            }
        }
    }
    None
}

/// The number of pods a Job runs at once: parallelism (default 1), at most completions.
pub(crate) fn job_pod_count(job: &Job) -> Option<u32> {
    let spec = job.spec.as_ref()?;
    let parallelism = spec.parallelism.unwrap_or(1);
    let n = match spec.completions {
        Some(c) => parallelism.min(c),
        None => parallelism,
    };
    u32::try_from(n).ok().filter(|n| *n > 0)
}

/// The replica count of a StatefulSet (default 1).
pub(crate) fn statefulset_pod_count(sts: &StatefulSet) -> Option<u32> {
    let replicas = sts.spec.as_ref().map(|s| s.replicas.unwrap_or(1))?;
    u32::try_from(replicas).ok().filter(|n| *n > 0)
}

/// Pods of a JobSet: sum over replicated jobs of replicas × pods per job.
pub(crate) fn jobset_pod_count(
    spec: &serde_json::Value,
    only: Option<&BTreeSet<String>>,
) -> Option<u32> {
    let rjobs = spec.get("replicatedJobs")?.as_array()?;
    let mut total: u64 = 0;
    let mut counted = 0;
    for rj in rjobs {
        let name = rj.get("name").and_then(|n| n.as_str()).unwrap_or("");
        if only.is_some_and(|o| !o.contains(name)) {
            continue;
        }
        let replicas = rj.get("replicas").and_then(|r| r.as_u64()).unwrap_or(1);
        let jspec = rj.get("template").and_then(|t| t.get("spec"));
        let parallelism = jspec
            .and_then(|s| s.get("parallelism"))
            .and_then(|p| p.as_u64())
            .unwrap_or(1);
        let per_job = match jspec
            .and_then(|s| s.get("completions"))
            .and_then(|c| c.as_u64())
        {
            Some(c) => parallelism.min(c),
            None => parallelism,
        };
        total = total.saturating_add(replicas.saturating_mul(per_job));
        counted += 1;
    }
    if counted == 0 {
        return None;
    }
    u32::try_from(total).ok().filter(|n| *n > 0)
}

/// Reads the expected pod count from the workload (`None` when its spec gives none); an owner
/// that cannot be read (403, 404) is an error naming the rule, never a silent fallback.
///
/// `owned_job`: whether a pod really is controlled by the Job (an ownerReference), not just
/// labelled with its name; a labelled-only Job that does not exist (404) is no error then.
/// Returns the count and a description of where it came from.
pub(crate) async fn expected_from_workload(
    ctx: &Ctx,
    ns: &str,
    workload: &Workload,
    known_sts: Option<&StatefulSet>,
    owned_job: bool,
) -> Result<Option<(u32, String)>, DiscoveryError> {
    match workload {
        Workload::Job(name) => {
            let api: Api<Job> = Api::namespaced(ctx.api.client.clone(), ns);
            let op = Operation::get_named("jobs", "batch", ns, name);
            let job = match ctx.call_owner(&op, "Job", || api.get(name)).await {
                Ok(j) => j,
                Err(DiscoveryError::OwnerUnreadable { code: 404, .. }) if !owned_job => {
                    tracing::info!("no Job {ns}/{name} (the pods only carry its name as a label)");
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            Ok(job_pod_count(&job).map(|n| (n, format!("spec.parallelism of Job {ns}/{name}"))))
        }
        Workload::StatefulSet(name) => {
            let sts = match known_sts {
                Some(s) => Some(s.clone()),
                None => {
                    let api: Api<StatefulSet> = Api::namespaced(ctx.api.client.clone(), ns);
                    let op = Operation::get_named("statefulsets", "apps", ns, name);
                    Some(ctx.call_owner(&op, "StatefulSet", || api.get(name)).await?)
                }
            };
            Ok(sts
                .as_ref()
                .and_then(statefulset_pod_count)
                .map(|n| (n, format!("spec.replicas of StatefulSet {ns}/{name}"))))
        }
        Workload::JobSet {
            name,
            replicated_jobs,
        } => {
            let gvk = GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet");
            let ar = ApiResource::from_gvk_with_plural(&gvk, "jobsets");
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.api.client.clone(), ns, &ar);
            let op = Operation::get_named("jobsets", "jobset.x-k8s.io", ns, name);
            let js = ctx.call_owner(&op, "JobSet", || api.get(name)).await?;
            Ok(js
                .data
                .get("spec")
                .and_then(|spec| jobset_pod_count(spec, replicated_jobs.as_ref()))
                .map(|n| (n, format!("replicated jobs of JobSet {ns}/{name}"))))
        }
    }
}

#[cfg(test)]
mod tests;
