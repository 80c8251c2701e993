//! Gang scheduling, as mpi-operator does it (`pkg/controller/podgroup.go`): with
//! `--gang-scheduler NAME` each MPIJob gets a PodGroup of its name, controlled by it, made with
//! its other objects before the Job, and the pods are stamped with the scheduler's name and
//! their group ([`stamp`]). `volcano` is Volcano (`scheduling.volcano.sh/v1beta1`, the pods'
//! annotation `scheduling.k8s.io/group-name`, schedulerName `volcano`); any other name is a
//! scheduler of scheduler-plugins' coscheduling by that name (`scheduling.x-k8s.io/v1alpha1`,
//! the pods' label `scheduling.x-k8s.io/pod-group`), as mpi-operator's `--gang-scheduling`
//! reads it. The PodGroup ([`pod_group`]) is sized from `runPolicy.schedulingPolicy`:
//! `minMember` is `minAvailable`, else the workers and the launcher; `minResources` is the one
//! given, else the sum of the requests (a limit where a resource has no request) of the
//! containers of the first `minMember` pods, the launcher's first; scheduler-plugins gets
//! `scheduleTimeoutSeconds` (0 when not given), Volcano the queue (`schedulingPolicy.queue`,
//! else the MPIJob's annotation `scheduling.volcano.sh/queue-name`) and the priority class
//! (`schedulingPolicy.priorityClass`, else the Launcher's template's, else the Worker's).
//! Kubernetes' own Workload API (`scheduling.k8s.io`, alpha) is refused: see
//! [`WORKLOAD_UNSUPPORTED`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::DynamicObject;
use kube::ResourceExt;
use serde_json::{json, Map, Value};

use crate::discovery::quantity::Quantity as Exact;
use crate::manifest::mpijob::model::{MpiJob, ReplicaSpec};
use crate::manifest::mpijob::Note;

/// The `--gang-scheduler` value that names Volcano.
pub(crate) const VOLCANO: &str = "volcano";
/// The pods' label naming their scheduler-plugins PodGroup.
pub(crate) const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// The pods' annotation naming their Volcano PodGroup.
pub(crate) const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// The MPIJob's annotation naming its Volcano queue (when `schedulingPolicy.queue` does not).
pub(crate) const QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";

/// Why `--gang-scheduler workload` is refused.
pub(crate) const WORKLOAD_UNSUPPORTED: &str = "Kubernetes' Workload API (scheduling.k8s.io, alpha behind the GenericWorkload gate) is not supported: its shape changed with each release (1.35's v1alpha1 Workload and the pods' spec.workloadRef, 1.36's v1alpha2 and spec.schedulingGroup) and this controller cannot show it working; give volcano or the name of a scheduler-plugins scheduler";

/// The gang scheduler the controller renders for (`--gang-scheduler`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GangScheduler {
    /// Volcano.
    Volcano,
    /// scheduler-plugins' coscheduling, in the scheduler of this name.
    SchedulerPlugins(String),
}

/// `--gang-scheduler NAME`: `volcano`, or the name of a scheduler-plugins scheduler (a DNS
/// subdomain, as a pod's `schedulerName`); `workload` is refused ([`WORKLOAD_UNSUPPORTED`]).
pub(crate) fn parse_scheduler(name: &str) -> Result<GangScheduler, String> {
    match name {
        VOLCANO => Ok(GangScheduler::Volcano),
        "workload" => Err(WORKLOAD_UNSUPPORTED.to_string()),
        n if is_subdomain(n) => Ok(GangScheduler::SchedulerPlugins(n.to_string())),
        n => Err(format!("{n:?} cannot name a scheduler: give volcano or the schedulerName of a scheduler-plugins scheduler (lower-case letters, digits, '-' and '.', at most 253)")),
    }
}

/// Whether `s` is a DNS-1123 subdomain.
fn is_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

impl GangScheduler {
    /// The pods' `schedulerName`.
    pub(crate) fn scheduler_name(&self) -> &str {
        match self {
            GangScheduler::Volcano => VOLCANO,
            GangScheduler::SchedulerPlugins(n) => n,
        }
    }
}

/// A quantity of the MPIJob that cannot be summed.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {why}; give a Kubernetes quantity (e.g. 500m, 2, 4Gi)")]
pub(crate) struct GangError {
    field: String,
    why: String,
}

/// The MPIJob `job` as the conversion reads it: with a gang scheduler the PodGroup honours
/// `schedulingPolicy`'s `minAvailable`, `minResources` and `scheduleTimeoutSeconds`, so the
/// conversion does not see them (it would note them not honoured), and with Volcano the queue
/// is Volcano's, not a Kueue queue (the MPIJob's label `kueue.x-k8s.io/queue-name` still is).
pub(crate) fn for_conversion<'a>(job: &'a MpiJob, gang: Option<&GangScheduler>) -> Cow<'a, MpiJob> {
    let Some(gang) = gang else {
        return Cow::Borrowed(job);
    };
    let mut job = job.clone();
    if let Some(s) = job
        .spec
        .run_policy
        .as_mut()
        .and_then(|p| p.scheduling_policy.as_mut())
    {
        s.min_available = None;
        s.min_resources = None;
        s.schedule_timeout_seconds = None;
        if *gang == GangScheduler::Volcano {
            s.queue = None;
        }
    }
    Cow::Owned(job)
}

/// The replica spec `role` of `job`.
fn replica<'a>(job: &'a MpiJob, role: &str) -> Option<&'a ReplicaSpec> {
    job.spec.mpi_replica_specs.get(role)
}

/// The PodGroup's `minMember`: `schedulingPolicy.minAvailable`, else the workers and the
/// launcher.
pub(crate) fn min_member(job: &MpiJob) -> i32 {
    let given = job
        .spec
        .run_policy
        .as_ref()
        .and_then(|p| p.scheduling_policy.as_ref())
        .and_then(|s| s.min_available);
    given.unwrap_or_else(|| {
        replica(job, "Worker")
            .and_then(|w| w.replicas)
            .unwrap_or(0)
            .saturating_add(1)
    })
}

/// The PodGroup's priority class (Volcano's): `schedulingPolicy.priorityClass`, else the
/// Launcher's template's, else the Worker's.
fn priority_class(job: &MpiJob) -> Option<String> {
    let given = job
        .spec
        .run_policy
        .as_ref()
        .and_then(|p| p.scheduling_policy.as_ref())
        .and_then(|s| s.priority_class.clone());
    let of = |role| {
        replica(job, role)
            .and_then(|r| r.template.as_ref())
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.priority_class_name.clone())
    };
    given
        .into_iter()
        .chain(of("Launcher"))
        .chain(of("Worker"))
        .find(|p| !p.is_empty())
}

/// A sum of quantities, exact in thousandths, in the format of its first term (binary or
/// decimal), as the API server's `Quantity.Add` keeps it.
#[derive(Debug, Clone, Copy, Default)]
struct Sum {
    millis: u128,
    binary: bool,
}

impl Sum {
    fn text(self) -> String {
        if !self.millis.is_multiple_of(1000) {
            return format!("{}m", self.millis);
        }
        let units = self.millis / 1000;
        if units == 0 {
            return "0".into();
        }
        let (base, suffixes): (u128, [&str; 6]) = if self.binary {
            (1024, ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
        } else {
            (1000, ["k", "M", "G", "T", "P", "E"])
        };
        let (mut n, mut suffix) = (units, "");
        for s in suffixes {
            if !n.is_multiple_of(base) {
                break;
            }
            n /= base;
            suffix = s;
        }
        format!("{n}{suffix}")
    }
}

/// Adds `count` pods' worth of `resources` (each resource's request, else its limit) to `sum`;
/// `at` names the containers' field.
fn add_resources(
    sum: &mut BTreeMap<String, Sum>,
    resources: &ResourceRequirements,
    count: u128,
    at: &str,
) -> Result<(), GangError> {
    let mut merged: BTreeMap<&String, (&Quantity, &str)> = BTreeMap::new();
    for (name, q) in resources.requests.iter().flatten() {
        merged.insert(name, (q, "requests"));
    }
    for (name, q) in resources.limits.iter().flatten() {
        merged.entry(name).or_insert((q, "limits"));
    }
    for (name, (q, kind)) in merged {
        let field = format!("{at}.resources.{kind}.{name}");
        let exact = Exact::parse(&q.0).map_err(|e| GangError {
            field: field.clone(),
            why: e.to_string(),
        })?;
        let millis = exact.millis_ceil().ok_or_else(|| GangError {
            field,
            why: format!("{:?} is negative", q.0),
        })?;
        let entry = sum.entry(name.clone()).or_insert(Sum {
            millis: 0,
            binary: q.0.ends_with('i'),
        });
        entry.millis = entry.millis.saturating_add(millis.saturating_mul(count));
    }
    Ok(())
}

/// The PodGroup's `minResources` for `min_member` pods: `schedulingPolicy.minResources` when
/// given; none for no pod; else the containers' requests (a limit where a resource has no
/// request) of the launcher and of as many workers as `min_member` takes beside it (all when it
/// takes more). mpi-operator orders the replicas by the value of their priority classes, which
/// it reads from the cluster; here the launcher always counts first, as mpi-operator counts it
/// when the classes are the same or absent.
fn min_resources(
    job: &MpiJob,
    min_member: i32,
) -> Result<Option<BTreeMap<String, Quantity>>, GangError> {
    let given = job
        .spec
        .run_policy
        .as_ref()
        .and_then(|p| p.scheduling_policy.as_ref())
        .and_then(|s| s.min_resources.clone());
    if given.is_some() {
        return Ok(given);
    }
    if min_member == 0 {
        return Ok(None);
    }
    let launchers = replica(job, "Launcher").map_or(0, |l| l.replicas.unwrap_or(1));
    let mut workers = replica(job, "Worker").map_or(0, |w| w.replicas.unwrap_or(0));
    if launchers.saturating_add(workers) > min_member {
        workers = min_member.saturating_sub(1).max(0);
    }
    let mut sum = BTreeMap::new();
    for (role, count) in [("Launcher", launchers), ("Worker", workers)] {
        let Some(spec) = replica(job, role)
            .and_then(|r| r.template.as_ref())
            .and_then(|t| t.spec.as_ref())
        else {
            continue;
        };
        let count = u128::try_from(count).unwrap_or(0);
        for (i, c) in spec.containers.iter().enumerate() {
            if let Some(r) = &c.resources {
                let at = format!("spec.mpiReplicaSpecs.{role}.template.spec.containers[{i}]");
                add_resources(&mut sum, r, count, &at)?;
            }
        }
    }
    Ok(Some(
        sum.into_iter()
            .map(|(k, v)| (k, Quantity(v.text())))
            .collect(),
    ))
}

/// The PodGroup of the MPIJob `job` for `gang` (its name and namespace, no owner yet).
pub(crate) fn pod_group(job: &MpiJob, gang: &GangScheduler) -> Result<DynamicObject, GangError> {
    let min_member = min_member(job);
    let resources = min_resources(job, min_member)?;
    let policy = job
        .spec
        .run_policy
        .as_ref()
        .and_then(|p| p.scheduling_policy.clone())
        .unwrap_or_default();
    let mut spec = Map::new();
    spec.insert("minMember".into(), json!(min_member));
    let api_version = match gang {
        GangScheduler::SchedulerPlugins(_) => {
            spec.insert(
                "scheduleTimeoutSeconds".into(),
                json!(policy.schedule_timeout_seconds.unwrap_or(0)),
            );
            if let Some(r) = resources.filter(|r| !r.is_empty()) {
                spec.insert("minResources".into(), json!(r));
            }
            "scheduling.x-k8s.io/v1alpha1"
        }
        GangScheduler::Volcano => {
            let queue = policy
                .queue
                .filter(|q| !q.is_empty())
                .or_else(|| job.annotations().get(QUEUE_ANNOTATION).cloned())
                .filter(|q| !q.is_empty());
            if let Some(q) = queue {
                spec.insert("queue".into(), json!(q));
            }
            if let Some(p) = priority_class(job) {
                spec.insert("priorityClassName".into(), json!(p));
            }
            if let Some(r) = resources {
                spec.insert("minResources".into(), json!(r));
            }
            "scheduling.volcano.sh/v1beta1"
        }
    };
    let obj = json!({
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": job.name_any(), "namespace": job.namespace()},
        "spec": Value::Object(spec),
    });
    serde_json::from_value(obj).map_err(|e| GangError {
        field: "spec.runPolicy.schedulingPolicy".into(),
        why: e.to_string(),
    })
}

/// Stamps the pod template `t` for `gang` and the PodGroup `group`: its `schedulerName`, and
/// the label (scheduler-plugins) or annotation (Volcano) naming the group. A schedulerName the
/// template gave is replaced, as mpi-operator replaces it: the note says so.
pub(crate) fn stamp(t: &mut PodTemplateSpec, gang: &GangScheduler, group: &str) -> Option<Note> {
    let spec = t.spec.get_or_insert_with(Default::default);
    let name = gang.scheduler_name().to_string();
    let replaced = spec
        .scheduler_name
        .replace(name.clone())
        .filter(|old| !old.is_empty() && *old != name);
    let meta = t.metadata.get_or_insert_with(Default::default);
    let (map, key) = match gang {
        GangScheduler::SchedulerPlugins(_) => (&mut meta.labels, POD_GROUP_LABEL),
        GangScheduler::Volcano => (&mut meta.annotations, GROUP_NAME_ANNOTATION),
    };
    map.get_or_insert_with(Default::default)
        .insert(key.into(), group.into());
    replaced.map(|old| {
        Note::new(
            "spec.mpiReplicaSpecs.*.template.spec.schedulerName",
            format!("{old:?} replaced by {name:?}, the gang scheduler's (--gang-scheduler)"),
        )
    })
}

#[cfg(test)]
mod tests;
