//! `PMIX_ALLOC_RELEASE` on the Kubernetes side: which pods lowering the job's workload by N
//! removes (Kubernetes takes an Indexed Job's highest indexes and a StatefulSet's highest
//! ordinals), checked before anything changes, the job's right to lower it tried by a
//! server-side dry run, and then the workload lowered and the pods awaited gone.
use std::time::Duration;

use super::rules::{from_grow, refuse, Refusal, Status};
use crate::discovery::{discover_with, own_workload, DiscoveryConfig, Environment};
use crate::elastic::grow::{read_workload, set_pods, GrowError, Workload};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

/// What a release of N pods will do.
#[derive(Clone)]
pub struct Plan {
    /// The workload's name.
    pub workload: String,
    /// The host names of the pods that go, highest index first.
    pub removed: Vec<String>,
    /// Their pod names.
    pub pods: Vec<String>,
    /// The workload's pod count after.
    pub to: u32,
    w: Workload,
    client: kube::Client,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("workload", &self.workload)
            .field("removed", &self.removed)
            .field("to", &self.to)
            .finish()
    }
}

/// Whether `w` may give `by` pods back: elastic, and never its last pod (pod 0 runs prte).
pub fn check(w: &Workload, by: u32) -> Result<u32, Refusal> {
    if let Some(reason) = w.kind.fixed().or(w.refusal) {
        return Err(refuse(
            Status::NotSupported,
            format!("the job is a {} {}: {reason}", w.kind, w.name),
        ));
    }
    if w.max_pods.is_none() {
        return Err(from_grow(&GrowError::NotElastic {
            kind: w.kind,
            namespace: w.namespace.clone(),
            name: w.name.clone(),
        }));
    }
    if by == 0 {
        return Err(refuse(Status::BadParam, "release at least one pod"));
    }
    if by >= w.pods {
        return Err(refuse(
            Status::OutOfResource,
            format!(
                "{} {} has {} pods: at most {} can be released (pod 0 runs the DVM); nothing was changed",
                w.kind,
                w.name,
                w.pods,
                w.pods.saturating_sub(1)
            ),
        ));
    }
    Ok(w.pods - by)
}

/// The pods a release of `by` removes, and the dry run of lowering the workload.
pub async fn plan(cfg: &DiscoveryConfig, env: &Environment, by: u32) -> Result<Plan, Refusal> {
    let refused = |e: GrowError| from_grow(&e);
    let own = own_workload(cfg, env)
        .await
        .map_err(|e| refused(e.into()))?;
    let wref = own.workload.ok_or_else(|| refused(GrowError::NoWorkload))?;
    let w = read_workload(&own.client, &own.namespace, wref)
        .await
        .map_err(refused)?;
    let to = check(&w, by)?;
    let now = DiscoveryConfig {
        expected_pods: Some(w.pods),
        exclude_self: false,
        ..cfg.clone()
    };
    let alloc = discover_with(&now, env, &mut |_| {})
        .await
        .map_err(|e| refused(e.into()))?;
    let mut going: Vec<_> = alloc
        .nodes
        .iter()
        .filter(|n| n.index.is_some_and(|i| i >= u64::from(to)))
        .collect();
    going.sort_by_key(|n| std::cmp::Reverse(n.index));
    if going.len() != by as usize {
        return Err(refuse(
            Status::Error,
            format!(
                "{} {} has {} pods, but {} of them have an index >= {to}: cannot tell which pods lowering it removes; nothing was changed",
                w.kind,
                w.name,
                alloc.nodes.len(),
                going.len()
            ),
        ));
    }
    set_pods(&own.client, &w, to, true).await.map_err(|e| {
        refuse(
            Status::Error,
            format!("{e} (a dry run: nothing was changed)"),
        )
    })?;
    Ok(Plan {
        workload: w.name.clone(),
        removed: going.iter().map(|n| n.hostname.clone()).collect(),
        pods: going.iter().map(|n| n.pod.clone()).collect(),
        to,
        w,
        client: own.client,
    })
}

/// Lowers the workload as planned and waits (within `cfg.timeout`) until its removed pods are
/// gone from the API.
pub async fn apply(cfg: &DiscoveryConfig, plan: &Plan) -> Result<(), Refusal> {
    set_pods(&plan.client, &plan.w, plan.to, false)
        .await
        .map_err(|e| refuse(Status::Error, e.to_string()))?;
    let pods: Api<Pod> = Api::namespaced(plan.client.clone(), &plan.w.namespace);
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    loop {
        let mut left = Vec::new();
        for p in &plan.pods {
            if pods
                .get_opt(p)
                .await
                .map_err(|e| refuse(Status::Error, format!("reading pod {p}: {e}")))?
                .is_some()
            {
                left.push(p.as_str());
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(refuse(
                Status::Timeout,
                format!(
                    "{} {} was lowered to {} pods, but pod(s) {} still exist after {} s",
                    plan.w.kind,
                    plan.w.name,
                    plan.to,
                    left.join(", "),
                    cfg.timeout.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::WorkloadKind;

    fn job(pods: u32, max: Option<&str>) -> Workload {
        Workload {
            kind: WorkloadKind::Job,
            name: "el".into(),
            namespace: "ns".into(),
            pods,
            max_pods: max.map(String::from),
            refusal: None,
        }
    }

    #[test]
    fn an_elastic_job_gives_back_all_but_its_first_pod() {
        assert_eq!(check(&job(4, Some("8")), 2), Ok(2));
        assert_eq!(check(&job(4, Some("8")), 3), Ok(1));
        let r = check(&job(4, Some("8")), 4).unwrap_err();
        assert_eq!(r.status, Status::OutOfResource);
        assert!(
            r.reason.contains("at most 3 can be released"),
            "{}",
            r.reason
        );
        assert_eq!(
            check(&job(4, Some("8")), 0).unwrap_err().status,
            Status::BadParam
        );
    }

    #[test]
    fn a_job_not_elastic_or_of_a_fixed_kind_is_refused_with_the_remedy() {
        let r = check(&job(4, None), 1).unwrap_err();
        assert_eq!(r.status, Status::NotSupported);
        assert!(r.reason.contains("--elastic --max-pods"), "{}", r.reason);
        let mut js = job(4, Some("8"));
        js.kind = WorkloadKind::JobSet;
        assert_eq!(check(&js, 1).unwrap_err().status, Status::NotSupported);
    }
}
