//! Pod discovery: which pods make up this job, once they are ready, as PRRTE nodes.
//!
//! [`discover`] resolves the namespace and label selector (inferring them from the pod we run in
//! when not configured), finds how many pods to expect, waits through a list + watch until that
//! many selected pods are Running, Ready and have an IPv4 address, and returns them in
//! allocation order with their slot counts. Every API call and the wait itself are bounded by
//! [`DiscoveryConfig::timeout`] taken as one deadline for the whole call.
//!
//! [`discover_blocking`] runs the same on a private current-thread Tokio runtime, for callers on
//! plain threads (the PRRTE RAS component).

pub mod api;
pub mod client;
pub mod error;
pub mod infer;
pub mod list;
pub mod order;
pub mod quantity;
pub mod readiness;
pub mod render;
pub mod selector;
pub mod slots;
pub mod tracker;
pub mod wait;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

pub use error::{DiscoveryError, ErrorKind, PODS_RULE};
pub use infer::{SelfIdentity, SelfNameSource};
pub use slots::{
    ParseSlotsPolicyError, SlotsPolicy, DEPRECATED_SLOTS_ANNOTATION, SLOTS_ANNOTATION,
};

use crate::settings::mca;
use api::Ctx;
use client::Environment;
use readiness::{classify, PodReadiness};

/// Default bound of a discovery call: the default of `ras_k8s_timeout` (and so of
/// `prrte-k8s pods --timeout`).
pub const DEFAULT_TIMEOUT: Duration =
    Duration::from_secs(crate::settings::mca::TIMEOUT.default_u64());

/// What to discover and how (the `ras_k8s_*` MCA parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// Namespace of the pods. Default: the namespace of the pod we run in (service account
    /// `namespace` file), else the kubeconfig context's, else "default".
    pub namespace: Option<String>,
    /// Label selector of the job's pods. Default: inferred from our own pod's labels
    /// (JobSet, Kubeflow training job, Job) or its owning StatefulSet. An empty string counts as
    /// unset.
    pub selector: Option<String>,
    /// Number of pods to wait for. Default: the owning Job's parallelism, StatefulSet's replicas
    /// or JobSet's pod count when readable, else the pods found by the first list.
    pub expected_pods: Option<u32>,
    /// Bound of the whole discovery, readiness wait included.
    pub timeout: Duration,
    /// Where slot counts come from.
    pub slots: SlotsPolicy,
    /// Explicit kubeconfig; else `$KUBECONFIG`, else in-cluster, else `~/.kube/config` (see
    /// [`client`]). An empty path counts as unset.
    pub kubeconfig: Option<PathBuf>,
    /// Name of the pod we run in. Default: `$POD_NAME`, else `$HOSTNAME`, else the host name.
    pub self_pod: Option<String>,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            namespace: None,
            selector: None,
            expected_pods: None,
            timeout: DEFAULT_TIMEOUT,
            slots: SlotsPolicy::Auto,
            kubeconfig: None,
            self_pod: None,
        }
    }
}

impl DiscoveryConfig {
    /// The configuration from the `ras_k8s_*` MCA parameters as the RAS component reads them;
    /// the error names the parameter, its value and what it accepts.
    pub fn from_params(p: &mca::RasParams) -> Result<DiscoveryConfig, DiscoveryError> {
        let slots = match &p.slots {
            None => SlotsPolicy::Auto,
            Some(s) => s
                .parse::<SlotsPolicy>()
                .map_err(|e| DiscoveryError::from(e.setting_error()))?,
        };
        let expected = mca::EXPECTED_PODS.int(&p.expected_pods.to_string())?;
        Ok(DiscoveryConfig {
            namespace: p.namespace.clone(),
            selector: p.selector.clone(),
            expected_pods: u32::try_from(expected).ok().filter(|n| *n > 0),
            timeout: mca::TIMEOUT.seconds(&p.timeout.to_string())?,
            slots,
            kubeconfig: p.kubeconfig.as_ref().map(PathBuf::from),
            self_pod: p.self_pod.clone(),
        })
    }
}

/// One pod as a PRRTE node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodNode {
    pub pod: String,
    pub namespace: String,
    /// The name prted in that pod reports: spec.hostname if set, else the pod name.
    pub hostname: String,
    pub ip: Ipv4Addr,
    pub slots: u32,
    /// The pod's workload index (see [`order`]), if it has one.
    pub index: Option<u64>,
    /// Whether this is the pod discovery ran in.
    pub is_self: bool,
    pub uid: String,
}

/// The discovered allocation, nodes in allocation order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Allocation {
    pub namespace: String,
    pub selector: String,
    pub nodes: Vec<PodNode>,
}

impl Allocation {
    /// Sum of the nodes' slots.
    pub fn total_slots(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.slots)).sum()
    }

    /// The node discovery ran in, if it is part of the allocation.
    pub fn self_node(&self) -> Option<&PodNode> {
        self.nodes.iter().find(|n| n.is_self)
    }
}

/// Milestones of a discovery, for progress display and for tests that need to know when the
/// watch is in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Namespace, selector and expected count are settled and the first list is done.
    Resolved {
        namespace: String,
        selector: String,
        selector_source: String,
        expected: u32,
        expected_source: String,
    },
    /// The number of ready pods changed (also sent once after the first list).
    Ready {
        ready: u32,
        expected: u32,
        /// How many selected pods exist but are not ready yet.
        not_ready: u32,
        /// The first of them in natural name order (at most [`wait::WAITING_FOR_SHOWN`]).
        waiting_for: Vec<String>,
    },
    /// The pod watcher listed the selected pods (`listed` of them) and watches from there; sent
    /// again whenever it has to list anew (its resource version expired).
    Watching { listed: u32 },
}

/// Discovers the allocation (see the module docs).
pub async fn discover(cfg: &DiscoveryConfig) -> Result<Allocation, DiscoveryError> {
    discover_with(cfg, &Environment::from_process(), &mut |_| {}).await
}

/// Runs [`discover`] on a private current-thread runtime; callable from any thread, including
/// one that is inside a Tokio runtime (the work then runs on a helper thread).
pub fn discover_blocking(cfg: &DiscoveryConfig) -> Result<Allocation, DiscoveryError> {
    let run = || -> Result<Allocation, DiscoveryError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| DiscoveryError::Internal {
                detail: format!("cannot start the async runtime: {e}"),
            })?;
        rt.block_on(discover(cfg))
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(run).join().unwrap_or_else(|_| {
                Err(DiscoveryError::Internal {
                    detail: "the discovery thread panicked".into(),
                })
            })
        })
    } else {
        run()
    }
}

fn invalid(param: &str, value: impl ToString, reason: impl ToString) -> DiscoveryError {
    DiscoveryError::InvalidConfig {
        param: param.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Checks the parts of the configuration that need no cluster; returns the explicit selector.
pub fn validate_config(cfg: &DiscoveryConfig) -> Result<Option<String>, DiscoveryError> {
    mca::TIMEOUT.check_duration(cfg.timeout)?;
    if cfg.expected_pods == Some(0) {
        return Err(invalid(
            &mca::EXPECTED_PODS.name(),
            "0",
            "at least one pod must be expected; leave it unset to take the count from the owning workload",
        ));
    }
    if let Some(ns) = cfg.namespace.as_deref().filter(|n| !n.trim().is_empty()) {
        if !is_dns_label(ns.trim()) {
            return Err(invalid(
                &mca::NAMESPACE.name(),
                ns,
                "a namespace name is 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit",
            ));
        }
    }
    match cfg
        .selector
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        None => Ok(None),
        Some(s) => selector::parse_selector(s)
            .map(|_| Some(s.to_string()))
            .map_err(|reason| DiscoveryError::InvalidSelector {
                selector: s.to_string(),
                reason,
            }),
    }
}

/// The API client within the call's deadline, and the namespace to look in.
async fn connect(
    cfg: &DiscoveryConfig,
    env: &Environment,
) -> Result<(Ctx, String), DiscoveryError> {
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    let connect_timeout = cfg.timeout.min(Duration::from_secs(30));
    let explicit_kubeconfig = cfg
        .kubeconfig
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty());
    let resolved =
        match tokio::time::timeout_at(deadline, client::resolve_config(explicit_kubeconfig, env))
            .await
        {
            Ok(r) => r?,
            Err(_) => {
                return Err(DiscoveryError::Internal {
                    detail: "reading the client configuration did not finish in time".into(),
                })
            }
        };
    let client = client::client_from_config(resolved, connect_timeout)?;
    let namespace = cfg
        .namespace
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .or_else(|| env.service_account_namespace())
        .or_else(|| client.context_namespace.clone())
        .unwrap_or_else(|| "default".to_string());
    let ctx = Ctx {
        api: client,
        deadline,
        timeout: cfg.timeout,
    };
    Ok((ctx, namespace))
}

/// No selected pod that could ever be allocated: the error, naming the excluded ones.
fn no_pods(items: &[Pod], namespace: String, selector: String) -> DiscoveryError {
    let excluded = items
        .iter()
        .filter_map(|p| match classify(p) {
            PodReadiness::Excluded(d) => Some(format!(
                "{} ({d})",
                p.metadata.name.as_deref().unwrap_or("")
            )),
            _ => None,
        })
        .collect();
    DiscoveryError::NoPods {
        namespace,
        selector,
        excluded,
    }
}

/// What the first list and the inference found.
struct Found<'a> {
    items: &'a [Pod],
    /// The listed pods that may still be allocated.
    candidates: &'a [&'a Pod],
    own_pod: Option<&'a Pod>,
    statefulset: Option<&'a k8s_openapi::api::apps::v1::StatefulSet>,
}

/// How many pods to expect when `ras_k8s_expected_pods` is not set, and why: the owning
/// workload's count when readable, else the pods of the first list (none is an error).
async fn expected_from_pods(
    ctx: &Ctx,
    namespace: &str,
    selector: &str,
    mut workload: Option<infer::Workload>,
    found: Found<'_>,
) -> Result<(u32, String), DiscoveryError> {
    let candidates = found.candidates;
    if workload.is_none() {
        workload = infer::workload_of(candidates);
    }
    let owned_job = match &workload {
        Some(infer::Workload::Job(name)) => found
            .own_pod
            .into_iter()
            .chain(candidates.iter().copied())
            .any(|p| infer::controller_of(p, "Job").is_some_and(|o| &o.name == name)),
        _ => true,
    };
    let from_workload = match &workload {
        Some(w) => {
            infer::expected_from_workload(ctx, namespace, w, found.statefulset, owned_job).await?
        }
        None => None,
    };
    if let Some(found) = from_workload {
        return Ok(found);
    }
    if candidates.is_empty() {
        return Err(no_pods(found.items, namespace.into(), selector.into()));
    }
    let n = u32::try_from(candidates.len()).unwrap_or(u32::MAX);
    Ok((
        n,
        "the number of matching pods at the first list".to_string(),
    ))
}

/// [`discover`] with an explicit environment and a progress callback.
pub async fn discover_with(
    cfg: &DiscoveryConfig,
    env: &Environment,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<Allocation, DiscoveryError> {
    let explicit_selector = validate_config(cfg)?;
    let (ctx, namespace) = connect(cfg, env).await?;
    let me = SelfIdentity::resolve(
        cfg.self_pod.as_deref(),
        env.pod_name.as_deref(),
        env.hostname.as_deref(),
    );
    tracing::debug!(namespace = %namespace, self_pod = ?me, "discovering pods via {}", ctx.api.url);

    let (selector, selector_source, workload, own_pod, known_sts) = match explicit_selector {
        Some(s) => (s, mca::SELECTOR.name(), None, None, None),
        None => {
            let inf = infer::infer_selector(&ctx, &namespace, me.as_ref()).await?;
            tracing::info!("selector {:?} inferred from {}", inf.selector, inf.basis);
            (
                inf.selector,
                inf.basis,
                inf.workload,
                Some(inf.own_pod),
                inf.statefulset,
            )
        }
    };

    let first = list::list_pods(&ctx, &namespace, &selector).await?;

    let candidates: Vec<&Pod> = first
        .items
        .iter()
        .filter(|p| !matches!(classify(p), PodReadiness::Excluded(_)))
        .collect();
    let (expected, expected_source) = match cfg.expected_pods {
        Some(n) => (n, format!("set by {}", mca::EXPECTED_PODS.name())),
        None => {
            let found = Found {
                items: &first.items,
                candidates: &candidates,
                own_pod: own_pod.as_ref(),
                statefulset: known_sts.as_ref(),
            };
            expected_from_pods(&ctx, &namespace, &selector, workload, found).await?
        }
    };
    tracing::info!(expected, "expecting {expected} pods ({expected_source})");
    progress(&Progress::Resolved {
        namespace: namespace.clone(),
        selector: selector.clone(),
        selector_source,
        expected,
        expected_source: expected_source.clone(),
    });

    let chosen = wait::Waiter {
        ctx: &ctx,
        namespace: &namespace,
        selector: &selector,
        expected,
        expected_source: &expected_source,
        progress,
    }
    .wait(first)
    .await?;

    let own_uid = own_pod.as_ref().and_then(|p| p.metadata.uid.clone());
    let nodes = build_nodes(&chosen, &namespace, cfg.slots, |p| match &own_uid {
        Some(uid) => p.metadata.uid.as_ref() == Some(uid),
        None => me.as_ref().is_some_and(|m| m.matches(p)),
    })?;
    Ok(Allocation {
        namespace,
        selector,
        nodes,
    })
}

/// Turns ready pods (already in allocation order) into nodes.
pub fn build_nodes(
    pods: &[Pod],
    namespace: &str,
    policy: SlotsPolicy,
    is_self: impl Fn(&Pod) -> bool,
) -> Result<Vec<PodNode>, DiscoveryError> {
    let indices = order::reported_indices(pods);
    pods.iter()
        .zip(indices)
        .map(|(p, index)| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let ip = readiness::pod_ipv4(p).ok_or_else(|| DiscoveryError::Internal {
                detail: format!("ready pod {name} has no IPv4 address"),
            })?;
            let slots = slots::pod_slots(p, policy).map_err(|b| {
                DiscoveryError::InvalidSlotsAnnotation {
                    pod: name.clone(),
                    namespace: namespace.to_string(),
                    annotation: b.annotation.to_string(),
                    value: b.value,
                    reason: b.reason.to_string(),
                }
            })?;
            let hostname = p
                .spec
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| name.clone());
            Ok(PodNode {
                pod: name,
                namespace: namespace.to_string(),
                hostname,
                ip,
                slots,
                index,
                is_self: is_self(p),
                uid: p.metadata.uid.clone().unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    #[test]
    fn config_validation() {
        let ok = DiscoveryConfig {
            selector: Some(" app=x ".into()),
            ..Default::default()
        };
        assert_eq!(validate_config(&ok).unwrap().as_deref(), Some("app=x"));
        let empty = DiscoveryConfig {
            selector: Some("".into()),
            ..Default::default()
        };
        assert_eq!(validate_config(&empty).unwrap(), None);
        let bad = DiscoveryConfig {
            selector: Some("app in (x".into()),
            ..Default::default()
        };
        let e = validate_config(&bad).unwrap_err();
        assert!(matches!(e, DiscoveryError::InvalidSelector { .. }));
        assert!(
            e.to_string().contains("not closed") && e.to_string().contains("ras_k8s_selector"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        let zero = DiscoveryConfig {
            timeout: Duration::ZERO,
            ..Default::default()
        };
        assert!(validate_config(&zero)
            .unwrap_err()
            .to_string()
            .contains("ras_k8s_timeout"));
        let none = DiscoveryConfig {
            expected_pods: Some(0),
            ..Default::default()
        };
        assert!(validate_config(&none)
            .unwrap_err()
            .to_string()
            .contains("ras_k8s_expected_pods"));
        let ns = DiscoveryConfig {
            namespace: Some("Bad_NS".into()),
            ..Default::default()
        };
        assert!(validate_config(&ns)
            .unwrap_err()
            .to_string()
            .contains("ras_k8s_namespace"));
    }

    #[test]
    fn nodes_carry_hostname_slots_and_self() {
        let mk = |name: &str, hostname: Option<&str>, ip: &str, ann: Option<&str>| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            p.metadata.uid = Some(format!("uid-{name}"));
            if let Some(a) = ann {
                p.metadata.annotations =
                    Some([(SLOTS_ANNOTATION.to_string(), a.to_string())].into());
            }
            p.spec = Some(PodSpec {
                hostname: hostname.map(String::from),
                ..Default::default()
            });
            p.status = Some(PodStatus {
                pod_ip: Some(ip.into()),
                ..Default::default()
            });
            p
        };
        let pods = vec![
            mk("a", Some("host-a"), "10.0.0.1", Some("4")),
            mk("b", None, "10.0.0.2", None),
        ];
        let nodes = build_nodes(&pods, "ns", SlotsPolicy::Auto, |p| {
            p.metadata.name.as_deref() == Some("b")
        })
        .unwrap();
        assert_eq!(nodes[0].hostname, "host-a");
        assert_eq!(nodes[0].slots, 4);
        assert!(!nodes[0].is_self);
        assert_eq!(nodes[1].hostname, "b");
        assert_eq!(nodes[1].ip, Ipv4Addr::new(10, 0, 0, 2));
        assert!(nodes[1].is_self);
        assert_eq!(nodes[1].uid, "uid-b");
        let bad = vec![mk("c", None, "10.0.0.3", Some("lots"))];
        let e = build_nodes(&bad, "ns", SlotsPolicy::Auto, |_| false).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("ns/c") && s.contains("\"lots\""), "{s}");
    }

    #[test]
    fn blocking_works_inside_a_runtime_too() {
        // Fails fast on configuration, both from a plain thread and from inside a runtime.
        let cfg = DiscoveryConfig {
            timeout: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(
            discover_blocking(&cfg).unwrap_err().kind(),
            ErrorKind::InvalidConfig
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt.block_on(async { discover_blocking(&cfg) }).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }
}
