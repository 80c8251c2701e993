//! `prrte-k8s grow N`: the running job gets N more pods. Its workload is raised through the
//! Kubernetes API by its kind's scale patch (an Indexed Job's `parallelism` and `completions`
//! in tandem, a StatefulSet's `replicas`; see [`crate::workload`]), the new pods are awaited
//! as `ras k8s` awaits a job's pods (same readiness rules, timeout and naming of the pods
//! missing), and they are returned for the DVM to add (`prun --add-host` with
//! [`add_host_arg`]).
//!
//! Only a job rendered elastic grows (`prrte-k8s manifest --elastic --max-pods M`: its workload
//! carries `MAX_PODS_ANNOTATION` and its Role may raise it: a StatefulSet through its `scale`
//! subresource alone, a Job by a patch its admission policy narrows); beyond M, or not elastic,
//! it is refused with the reason before anything is changed ([`check`]).

use kube::api::{Api, DynamicObject, Patch, PatchParams};

use crate::discovery::{
    discover_with, own_workload, Allocation, DiscoveryConfig, DiscoveryError, Environment, PodNode,
};
use crate::manifest::MAX_PODS_ANNOTATION;
use crate::workload::{WorkloadKind, WorkloadRef};

/// An elastic job's workload as `grow` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    pub namespace: String,
    /// Its pods now (a Job's parallelism, a StatefulSet's replicas).
    pub pods: u32,
    /// The annotation's value; None: not elastic.
    pub max_pods: Option<String>,
    /// Why this object may not grow though its kind does (a Job that is not Indexed).
    pub refusal: Option<&'static str>,
}

/// Why the job does not grow; each names the cause and the remedy. Nothing was changed unless
/// said.
#[derive(Debug, thiserror::Error)]
pub enum GrowError {
    #[error("grow by at least one pod (N >= 1)")]
    Zero,
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error("the pod this runs in belongs to no Job or StatefulSet (nothing to grow); run grow in a pod of the job")]
    NoWorkload,
    #[error("the job is a {kind} {name}: {reason}")]
    Fixed {
        kind: WorkloadKind,
        name: String,
        reason: &'static str,
    },
    #[error("{kind} {namespace}/{name} is not elastic (no {MAX_PODS_ANNOTATION} annotation): nothing was changed; render the job with `prrte-k8s manifest --elastic --max-pods M` to grow it")]
    NotElastic {
        kind: WorkloadKind,
        namespace: String,
        name: String,
    },
    #[error("{kind} {name}'s {MAX_PODS_ANNOTATION} annotation {value:?} is not a pod count: nothing was changed; set it to the most pods the job may have")]
    BadMax {
        kind: WorkloadKind,
        name: String,
        value: String,
    },
    #[error("{kind} {name} {reason}; nothing was changed")]
    Refused {
        kind: WorkloadKind,
        name: String,
        reason: &'static str,
    },
    #[error("growing {kind} {name} by {by} to {wanted} pods is beyond its --max-pods {max} (it has {pods}): nothing was changed; grow by at most {room}")]
    BeyondMax {
        kind: WorkloadKind,
        name: String,
        by: u32,
        pods: u32,
        wanted: u32,
        max: u32,
        room: u32,
    },
    #[error("{what} {kind} {namespace}/{name} failed: {source}; the job's Role must allow get on it and patch on a Job, or get and patch on a StatefulSet's scale subresource (prrte-k8s manifest --elastic grants these)")]
    Api {
        what: &'static str,
        kind: WorkloadKind,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
}

/// The pod count `w` grows to by `by`, if it may.
pub fn check(w: &Workload, by: u32) -> Result<u32, GrowError> {
    if by == 0 {
        return Err(GrowError::Zero);
    }
    let Some(value) = &w.max_pods else {
        return Err(GrowError::NotElastic {
            kind: w.kind,
            namespace: w.namespace.clone(),
            name: w.name.clone(),
        });
    };
    let max: u32 = value.trim().parse().map_err(|_| GrowError::BadMax {
        kind: w.kind,
        name: w.name.clone(),
        value: value.clone(),
    })?;
    if let Some(reason) = w.refusal {
        return Err(GrowError::Refused {
            kind: w.kind,
            name: w.name.clone(),
            reason,
        });
    }
    let wanted = w.pods.saturating_add(by);
    if wanted > max {
        return Err(GrowError::BeyondMax {
            kind: w.kind,
            name: w.name.clone(),
            by,
            pods: w.pods,
            wanted,
            max,
            room: max.saturating_sub(w.pods),
        });
    }
    Ok(wanted)
}

/// `prun --add-host`'s value for the new pods: each host name with its slots ("a:2,b:2"), so
/// PRRTE gives them the slots `ras k8s` would.
pub fn add_host_arg(nodes: &[PodNode]) -> String {
    nodes
        .iter()
        .map(|n| format!("{}:{}", n.hostname, n.slots))
        .collect::<Vec<_>>()
        .join(",")
}

/// The nodes of `after` that `before` did not have (by pod uid), in allocation order.
pub(crate) fn new_nodes(before: &Allocation, after: &Allocation) -> Vec<PodNode> {
    after
        .nodes
        .iter()
        .filter(|n| !before.nodes.iter().any(|b| b.uid == n.uid))
        .cloned()
        .collect()
}

fn api_error(what: &'static str, w: &Workload, source: kube::Error) -> GrowError {
    GrowError::Api {
        what,
        kind: w.kind,
        namespace: w.namespace.clone(),
        name: w.name.clone(),
        source: Box::new(source),
    }
}

/// A dynamic API for the kind of `w`.
pub(crate) fn api_of(client: &kube::Client, ns: &str, kind: WorkloadKind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &kind.api_resource())
}

/// Reads the workload of our own pod.
pub(crate) async fn read_workload(
    client: &kube::Client,
    ns: &str,
    wref: WorkloadRef,
) -> Result<Workload, GrowError> {
    let kind = wref.kind;
    if let Some(reason) = kind.fixed() {
        return Err(GrowError::Fixed {
            kind,
            name: wref.name,
            reason,
        });
    }
    let w = Workload {
        kind,
        name: wref.name,
        namespace: ns.to_string(),
        pods: 0,
        max_pods: None,
        refusal: None,
    };
    let object = api_of(client, ns, kind)
        .get(&w.name)
        .await
        .map_err(|e| api_error("reading", &w, e))?;
    Ok(Workload {
        pods: kind.scaled_pods(&object.data),
        max_pods: annotation(&object.metadata),
        refusal: kind.scale_refusal(&object.data),
        ..w
    })
}

fn annotation(m: &kube::api::ObjectMeta) -> Option<String> {
    m.annotations.as_ref()?.get(MAX_PODS_ANNOTATION).cloned()
}

/// Patches `w` to `pods` with its kind's scale patch.
pub(crate) async fn raise(client: &kube::Client, w: &Workload, pods: u32) -> Result<(), GrowError> {
    set_pods(client, w, pods, false).await
}

/// Patches `w` to `pods` (up or down) with its kind's scale patch; `dry_run`: the API server
/// checks and admits it without making it (a server-side dry run).
pub(crate) async fn set_pods(
    client: &kube::Client,
    w: &Workload,
    pods: u32,
    dry_run: bool,
) -> Result<(), GrowError> {
    let Some(patch) = w.kind.scale_patch(pods) else {
        return Err(GrowError::Fixed {
            kind: w.kind,
            name: w.name.clone(),
            reason: w.kind.fixed().unwrap_or("its pod count cannot change"),
        });
    };
    let (api, pp, patch) = (
        api_of(client, &w.namespace, w.kind),
        PatchParams {
            dry_run,
            ..PatchParams::default()
        },
        Patch::Merge(patch),
    );
    // A kind with a scale subresource is raised through it alone: its job's Role may patch
    // nothing else of it (a patch of a StatefulSet itself could rewrite its pod template).
    let done = if w.kind.scales_through_subresource() {
        api.patch_scale(&w.name, &pp, &patch).await.map(drop)
    } else {
        api.patch(&w.name, &pp, &patch).await.map(drop)
    };
    done.map_err(|e| api_error("patching", w, e))
}

/// What a growth did.
#[derive(Debug, Clone)]
pub struct Grown {
    pub workload: Workload,
    /// The pod count now.
    pub pods: u32,
    /// The new pods, Ready, in allocation order.
    pub new: Vec<PodNode>,
}

/// Grows the job of the pod we run in by `by` pods and waits for them to be Ready.
pub async fn grow(cfg: &DiscoveryConfig, env: &Environment, by: u32) -> Result<Grown, GrowError> {
    if by == 0 {
        return Err(GrowError::Zero);
    }
    let own = own_workload(cfg, env).await?;
    let wref = own.workload.ok_or(GrowError::NoWorkload)?;
    let w = read_workload(&own.client, &own.namespace, wref).await?;
    let pods = check(&w, by)?;
    // The pods the job has now, as discovery sees them (all Ready: the job runs).
    let fixed = DiscoveryConfig {
        expected_pods: Some(w.pods),
        exclude_self: false,
        ..cfg.clone()
    };
    let before = discover_with(&fixed, env, &mut |_| {}).await?;
    raise(&own.client, &w, pods).await?;
    let grown = DiscoveryConfig {
        expected_pods: Some(pods),
        ..fixed
    };
    let after = discover_with(&grown, env, &mut |_| {}).await?;
    Ok(Grown {
        new: new_nodes(&before, &after),
        workload: w,
        pods,
    })
}

#[cfg(test)]
mod tests;
