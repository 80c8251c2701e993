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

pub(crate) mod allocation;
pub(crate) mod api;
pub mod client;
pub(crate) mod error;
pub(crate) mod infer;
pub(crate) mod keys;
pub mod list;
pub(crate) mod names;
pub(crate) mod order;
pub(crate) mod progress;
pub(crate) mod quantity;
pub(crate) mod readiness;
pub mod record;
pub mod render;
pub(crate) mod selector;
pub(crate) mod slots;
pub mod tracker;
pub mod wait;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use record::PodRecord;

pub(crate) use allocation::PodNode;
pub use allocation::{build_nodes, Allocation};
#[cfg(test)]
pub(crate) use error::required_rule;
pub use error::{DiscoveryError, ErrorKind, PODS_RULE};
pub(crate) use infer::SelfIdentity;
pub use progress::Progress;
pub use slots::SlotsPolicy;
pub(crate) use slots::SLOTS_ANNOTATION;

use crate::settings::mca;
use crate::workload::WorkloadRef;
use api::Ctx;
pub use client::Environment;
use names::is_dns_label;
use readiness::{classify, PodReadiness};

/// Default bound of a discovery call: the default of `ras_k8s_timeout` (and so of
/// `prrte-k8s pods --timeout`).
pub(crate) const DEFAULT_TIMEOUT: Duration =
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
    /// Leave the pod we run in out of the allocation (it launches, the other pods run the
    /// ranks). The expected count still counts it: discovery waits for it as for every pod.
    pub exclude_self: bool,
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
            exclude_self: false,
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
        // Read by the allocation requests (`elastic::allocreq::RateLimit`); a bad value fails
        // the DVM's allocation here, naming the parameter, rather than each request later.
        mca::ALLOC_REQUESTS_PER_MINUTE.int(&p.alloc_requests_per_minute.to_string())?;
        Ok(DiscoveryConfig {
            namespace: p.namespace.clone(),
            selector: p.selector.clone(),
            expected_pods: u32::try_from(expected).ok().filter(|n| *n > 0),
            timeout: mca::TIMEOUT.seconds(&p.timeout.to_string())?,
            slots,
            kubeconfig: p.kubeconfig.as_ref().map(PathBuf::from),
            self_pod: p.self_pod.clone(),
            exclude_self: p.exclude_self,
        })
    }
}

impl DiscoveryConfig {
    /// The configuration from the `ras_k8s_*` settings in the environment `env`
    /// (`PRTE_MCA_ras_k8s_*`), as prte in the same pod would read them: for programs that
    /// discover the pods in PRRTE's place (a hostfile for a launcher without our RAS). A bad
    /// value names its variable.
    pub(crate) fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<DiscoveryConfig, DiscoveryError> {
        let text = |s: &crate::settings::Setting| -> Result<Option<String>, DiscoveryError> {
            Ok(s.lookup(env)?.map(|(_, v)| v.trim().to_string()))
        };
        let int = |s: &crate::settings::Setting| -> Result<Option<i32>, DiscoveryError> {
            Ok(s.from_env(env, |s, t| s.mca_int(t))?)
        };
        let defaults = mca::RasParams::default();
        let p = mca::RasParams {
            namespace: text(&mca::NAMESPACE)?,
            selector: text(&mca::SELECTOR)?,
            expected_pods: int(&mca::EXPECTED_PODS)?.unwrap_or(defaults.expected_pods),
            timeout: int(&mca::TIMEOUT)?.unwrap_or(defaults.timeout),
            slots: text(&mca::SLOTS)?.or(defaults.slots),
            kubeconfig: text(&mca::KUBECONFIG)?,
            self_pod: text(&mca::SELF_POD)?,
            exclude_self: mca::EXCLUDE_SELF
                .from_env(env, |s, t| s.mca_bool(t))?
                .unwrap_or(defaults.exclude_self),
            ..defaults
        };
        DiscoveryConfig::from_params(&p)
    }
}

/// Discovers the allocation (see the module docs).
pub async fn discover(cfg: &DiscoveryConfig) -> Result<Allocation, DiscoveryError> {
    discover_with(cfg, &Environment::from_process(), &mut |_| {}).await
}

/// Runs [`discover`] on a private current-thread runtime; callable from any thread, including
/// one that is inside a Tokio runtime (the work then runs on a helper thread).
pub fn discover_blocking(cfg: &DiscoveryConfig) -> Result<Allocation, DiscoveryError> {
    let run = || -> Result<Allocation, DiscoveryError> {
        let rt = crate::runtime::current_thread().map_err(|e| DiscoveryError::Internal {
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

/// Our own pod's workload and an API client to act on it (what `prrte-k8s grow` needs).
pub(crate) struct OwnWorkload {
    pub client: kube::Client,
    pub namespace: String,
    /// None when our pod carries no workload label and no owning StatefulSet.
    pub workload: Option<WorkloadRef>,
}

/// Finds the workload of the pod we run in, as discovery infers it (bounded by the timeout).
pub(crate) async fn own_workload(
    cfg: &DiscoveryConfig,
    env: &Environment,
) -> Result<OwnWorkload, DiscoveryError> {
    validate_config(cfg)?;
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    let (ctx, namespace) = connect(cfg, env, deadline).await?;
    let me = SelfIdentity::resolve(
        cfg.self_pod.as_deref(),
        env.pod_name.as_deref(),
        env.hostname.as_deref(),
    );
    let inf = infer::infer_selector(&ctx, &namespace, me.as_ref()).await?;
    Ok(OwnWorkload {
        client: ctx.api.client,
        namespace,
        workload: inf.workload.map(|o| o.workload),
    })
}

fn invalid(param: &str, value: impl ToString, reason: impl ToString) -> DiscoveryError {
    DiscoveryError::InvalidConfig {
        param: param.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Checks the parts of the configuration that need no cluster; returns the explicit selector.
pub(crate) fn validate_config(cfg: &DiscoveryConfig) -> Result<Option<String>, DiscoveryError> {
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

/// [`discover`] with an explicit environment and a progress callback.
pub async fn discover_with(
    cfg: &DiscoveryConfig,
    env: &Environment,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<Allocation, DiscoveryError> {
    let explicit_selector = validate_config(cfg)?;
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    let (ctx, namespace) = connect(cfg, env, deadline).await?;
    let me = SelfIdentity::resolve(
        cfg.self_pod.as_deref(),
        env.pod_name.as_deref(),
        env.hostname.as_deref(),
    );
    tracing::debug!(namespace = %namespace, self_pod = ?me, "discovering pods via {}", ctx.api.url);

    let (selector, selector_source, workload, own_pod, known_owner) = match explicit_selector {
        Some(s) => (s, mca::SELECTOR.name(), None, None, None),
        None => {
            let inf = infer::infer_selector(&ctx, &namespace, me.as_ref()).await?;
            tracing::info!("selector {:?} inferred from {}", inf.selector, inf.basis);
            (
                inf.selector,
                inf.basis,
                inf.workload,
                Some(inf.own_pod),
                inf.owner_object,
            )
        }
    };

    let first = list::list_pods(&ctx, &namespace, &selector).await?;

    let (expected, expected_source) = match cfg.expected_pods {
        Some(n) => (n, format!("set by {}", mca::EXPECTED_PODS.name())),
        None => {
            expected_count(
                &ctx,
                &namespace,
                &selector,
                &first.items,
                workload,
                own_pod.as_ref(),
                known_owner.as_ref(),
            )
            .await?
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
    let mut nodes = build_nodes(&chosen, &namespace, cfg.slots, |p| match &own_uid {
        Some(uid) => p.metadata.uid.as_ref() == Some(uid),
        None => me.as_ref().is_some_and(|m| m.matches_record(p)),
    })?;
    if cfg.exclude_self {
        leave_out_self(&mut nodes, &namespace, me.as_ref())?;
    }
    Ok(Allocation {
        namespace,
        selector,
        nodes,
    })
}

/// `ras_k8s_exclude_self`: removes the pod we run in from `nodes`; an error if it was the only
/// one. A pod we run in that is not one of the job's (prte started elsewhere) leaves nothing
/// to remove, with a warning.
fn leave_out_self(
    nodes: &mut Vec<PodNode>,
    namespace: &str,
    me: Option<&SelfIdentity>,
) -> Result<(), DiscoveryError> {
    let Some(at) = nodes.iter().position(|n| n.is_self) else {
        tracing::warn!(
            self_pod = ?me,
            "{} is set, but the pod prte runs in is not one of the job's pods: nothing is left out",
            mca::EXCLUDE_SELF.name()
        );
        return Ok(());
    };
    if nodes.len() == 1 {
        return Err(DiscoveryError::OnlySelf {
            namespace: namespace.to_string(),
            pod: nodes[at].pod.clone(),
        });
    }
    let gone = nodes.remove(at);
    tracing::info!(
        pod = %gone.pod,
        "{}: the pod prte runs in is left out of the allocation",
        mca::EXCLUDE_SELF.name()
    );
    Ok(())
}

/// The namespace of the job's pods: `explicit` (ras_k8s_namespace) if set, else the service
/// account's (the pod we run in), else the kubeconfig context's of `client`, else "default".
pub(crate) fn pods_namespace(
    explicit: Option<&str>,
    env: &Environment,
    client: &client::ApiClient,
) -> String {
    explicit
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .or_else(|| env.service_account_namespace())
        .or_else(|| client.context_namespace.clone())
        .unwrap_or_else(|| "default".to_string())
}

/// The API client of a discovery (bounded by `deadline`), and the namespace of the pods:
/// ras_k8s_namespace, else the service account's, else the kubeconfig context's, else
/// "default".
async fn connect(
    cfg: &DiscoveryConfig,
    env: &Environment,
    deadline: tokio::time::Instant,
) -> Result<(Ctx, String), DiscoveryError> {
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
    let namespace = pods_namespace(cfg.namespace.as_deref(), env, &client);
    let ctx = Ctx {
        api: client,
        deadline,
        timeout: cfg.timeout,
    };
    Ok((ctx, namespace))
}

/// How many pods to wait for, and where that number comes from, when ras_k8s_expected_pods
/// does not say: the owning workload (as inference found it, else as the listed pods name it),
/// else the pods the first list found (`first`); none at all is an error.
async fn expected_count(
    ctx: &Ctx,
    namespace: &str,
    selector: &str,
    first: &[PodRecord],
    mut workload: Option<infer::Owner>,
    own_pod: Option<&Pod>,
    known_owner: Option<&DynamicObject>,
) -> Result<(u32, String), DiscoveryError> {
    let own_pod = own_pod.map(PodRecord::from);
    let candidates: Vec<&PodRecord> = first
        .iter()
        .filter(|p| !matches!(classify(p), PodReadiness::Excluded(_)))
        .collect();
    if workload.is_none() {
        workload = infer::workload_of(&candidates);
    }
    // Whether a pod is controlled by the workload, not just labelled with its name (only a
    // kind that owns its pods can tell).
    let owned = match &workload {
        Some(o) if o.workload.kind.owns_pods() => {
            let w = &o.workload;
            own_pod
                .iter()
                .chain(candidates.iter().copied())
                .any(|p| infer::controller_of(p, w.kind).is_some_and(|r| r.name == w.name))
        }
        _ => true,
    };
    let from_workload = match &workload {
        Some(o) => infer::expected_from_workload(ctx, namespace, o, known_owner, owned).await?,
        None => None,
    };
    if let Some(found) = from_workload {
        return Ok(found);
    }
    if candidates.is_empty() {
        let excluded = first
            .iter()
            .filter_map(|p| match classify(p) {
                PodReadiness::Excluded(d) => Some(format!(
                    "{} ({d})",
                    p.metadata.name.as_deref().unwrap_or("")
                )),
                _ => None,
            })
            .collect();
        return Err(DiscoveryError::NoPods {
            namespace: namespace.to_string(),
            selector: selector.to_string(),
            excluded,
        });
    }
    let n = u32::try_from(candidates.len()).unwrap_or(u32::MAX);
    Ok((
        n,
        "the number of matching pods at the first list".to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn config_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let cfg = DiscoveryConfig::from_env(&vars(&[])).unwrap();
        assert_eq!(cfg, DiscoveryConfig::default());
        let cfg = DiscoveryConfig::from_env(&vars(&[
            ("PRTE_MCA_ras_k8s_exclude_self", "true"),
            ("PRTE_MCA_ras_k8s_selector", "app=x"),
            ("PRTE_MCA_ras_k8s_timeout", "20"),
            ("PRTE_MCA_ras_k8s_expected_pods", "3"),
            ("PRTE_MCA_ras_k8s_slots", "one"),
        ]))
        .unwrap();
        assert!(cfg.exclude_self);
        assert_eq!(cfg.selector.as_deref(), Some("app=x"));
        assert_eq!(cfg.timeout, Duration::from_secs(20));
        assert_eq!(cfg.expected_pods, Some(3));
        assert_eq!(cfg.slots, SlotsPolicy::One);
        let cfg = DiscoveryConfig::from_env(&vars(&[("PRTE_MCA_ras_k8s_slots", " 3 ")])).unwrap();
        assert_eq!(cfg.slots, SlotsPolicy::Fixed(3));
        let e = DiscoveryConfig::from_env(&vars(&[("PRTE_MCA_ras_k8s_slots", "0")])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        let e = e.to_string();
        assert!(
            e.contains("ras_k8s_slots") && e.contains("\"0\"") && e.contains("whole number"),
            "{e}"
        );
        let e = DiscoveryConfig::from_env(&vars(&[("PRTE_MCA_ras_k8s_exclude_self", "maybe")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ras_k8s_exclude_self") && e.contains("PRTE_MCA_ras_k8s_exclude_self"),
            "{e}"
        );
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
        let rt = crate::runtime::current_thread().unwrap();
        let e = rt.block_on(async { discover_blocking(&cfg) }).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }
}
