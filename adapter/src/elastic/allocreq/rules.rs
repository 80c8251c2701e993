//! The rules: what a request asks, the nodes a release may take, and each refusal's PMIx status
//! and reason (who is served when: [`super::gate`]).

use crate::discovery::PodNode;
use crate::elastic::grow::GrowError;

/// `pmix_alloc_directive_t` (PMIx 5.0.5's numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    New,
    Extend,
    Release,
    Reacquire,
    Cancel,
    Unknown(u8),
}

impl Directive {
    pub fn from_pmix(v: u8) -> Directive {
        match v {
            1 => Directive::New,
            2 => Directive::Extend,
            3 => Directive::Release,
            4 => Directive::Reacquire,
            5 => Directive::Cancel,
            other => Directive::Unknown(other),
        }
    }
}

/// A request's attributes, as `cabi` reads them from its `pmix_info_t` array.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub directive: Option<Directive>,
    /// `PMIX_ALLOC_NUM_NODES`.
    pub num_nodes: Option<u64>,
    /// `PMIX_ALLOC_NUM_CPUS`.
    pub num_cpus: Option<u64>,
    /// `PMIX_ALLOC_NODE_LIST`.
    pub node_list: Option<String>,
    /// `PMIX_ALLOC_REQ_ID`.
    pub req_id: Option<String>,
    /// Keys of attributes given that `ras k8s` cannot honour (`PMIX_ALLOC_TIME`, ...).
    pub unhonoured: Vec<String>,
    /// `PMIX_TIMEOUT` (seconds): how long an `EXTEND` waits for its pods at most (never longer
    /// than `ras k8s`'s own pod timeout; 0: that timeout).
    pub timeout_s: Option<u64>,
}

/// The PMIx status of a refusal (cabi turns it into PMIx's number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    NotSupported,
    BadParam,
    OutOfResource,
    ResourceBusy,
    NotFound,
    Timeout,
    Canceled,
    /// A cancel of another process's request.
    NoPermissions,
    /// Past the requester's budget of requests per minute.
    RateLimited,
    Error,
}

/// A request answered with an error: nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    pub status: Status,
    pub reason: String,
}

pub(crate) fn refuse(status: Status, reason: impl Into<String>) -> Refusal {
    Refusal {
        status,
        reason: reason.into(),
    }
}

/// What an accepted request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// This many more pods.
    Extend(u32),
    /// The highest this many nodes.
    ReleaseCount(u32),
    /// These nodes, by host name.
    ReleaseNamed(Vec<String>),
    /// The `EXTEND` whose `PMIX_ALLOC_REQ_ID` this is.
    Cancel(String),
}

/// The node of a DVM as a release sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolNode {
    pub hostname: String,
    /// A job that still has processes there, if any.
    pub busy_with: Option<String>,
}

/// What `request` asks, or why it is refused. `slots_per_pod` turns `PMIX_ALLOC_NUM_CPUS` into
/// pods (rounded up).
pub fn ask(request: &Request, slots_per_pod: u32) -> Result<Ask, Refusal> {
    let Some(directive) = request.directive else {
        return Err(refuse(
            Status::BadParam,
            "the request has no directive: give PMIX_ALLOC_EXTEND, PMIX_ALLOC_RELEASE or PMIX_ALLOC_REQ_CANCEL",
        ));
    };
    if let Some(key) = request.unhonoured.first() {
        return Err(refuse(
            Status::BadParam,
            format!("ras k8s cannot honour {key}: a Kubernetes job grows and shrinks by pods (give PMIX_ALLOC_NUM_NODES, PMIX_ALLOC_NUM_CPUS or PMIX_ALLOC_NODE_LIST)"),
        ));
    }
    match directive {
        Directive::New => Err(refuse(
            Status::NotSupported,
            "a DVM runs in one Kubernetes workload: PMIX_ALLOC_NEW is not served; extend this one (PMIX_ALLOC_EXTEND) or submit another job",
        )),
        Directive::Reacquire => Err(refuse(
            Status::NotSupported,
            "nothing is lent back to Kubernetes: PMIX_ALLOC_REAQUIRE is not served; use PMIX_ALLOC_EXTEND",
        )),
        Directive::Unknown(v) => Err(refuse(
            Status::BadParam,
            format!("unknown allocation directive {v}"),
        )),
        Directive::Extend => extend(request, slots_per_pod).map(Ask::Extend),
        Directive::Release => release(request),
        Directive::Cancel => match &request.req_id {
            Some(id) if !id.trim().is_empty() => Ok(Ask::Cancel(id.trim().to_string())),
            _ => Err(refuse(
                Status::BadParam,
                "PMIX_ALLOC_REQ_CANCEL needs the PMIX_ALLOC_REQ_ID of the request to cancel",
            )),
        },
    }
}

fn count(what: &str, n: u64) -> Result<u32, Refusal> {
    if n == 0 {
        return Err(refuse(
            Status::BadParam,
            format!("{what} is 0: ask for at least one"),
        ));
    }
    u32::try_from(n).map_err(|_| {
        refuse(
            Status::OutOfResource,
            format!("{what} {n} is more pods than any job may have"),
        )
    })
}

fn extend(request: &Request, slots_per_pod: u32) -> Result<u32, Refusal> {
    if request.node_list.is_some() {
        return Err(refuse(
            Status::BadParam,
            "an extension cannot name its nodes: Kubernetes names the new pods; give PMIX_ALLOC_NUM_NODES or PMIX_ALLOC_NUM_CPUS",
        ));
    }
    match (request.num_nodes, request.num_cpus) {
        (Some(n), _) => count("PMIX_ALLOC_NUM_NODES", n),
        (None, Some(c)) => {
            let per = u64::from(slots_per_pod.max(1));
            count("PMIX_ALLOC_NUM_CPUS", c)
                .and_then(|_| count("the pods for PMIX_ALLOC_NUM_CPUS", c.div_ceil(per)))
        }
        (None, None) => Err(refuse(
            Status::BadParam,
            "PMIX_ALLOC_EXTEND needs PMIX_ALLOC_NUM_NODES or PMIX_ALLOC_NUM_CPUS",
        )),
    }
}

fn release(request: &Request) -> Result<Ask, Refusal> {
    match (&request.node_list, request.num_nodes) {
        (Some(_), Some(_)) => Err(refuse(
            Status::BadParam,
            "give PMIX_ALLOC_NODE_LIST or PMIX_ALLOC_NUM_NODES to release, not both",
        )),
        (Some(list), None) => {
            if list.contains('[') {
                return Err(refuse(
                    Status::BadParam,
                    format!("the node list {list:?} is a regular expression: name the nodes, comma-separated"),
                ));
            }
            let names: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if names.is_empty() {
                return Err(refuse(
                    Status::BadParam,
                    "PMIX_ALLOC_NODE_LIST names no node",
                ));
            }
            Ok(Ask::ReleaseNamed(names))
        }
        (None, Some(n)) => count("PMIX_ALLOC_NUM_NODES", n).map(Ask::ReleaseCount),
        (None, None) => Err(refuse(
            Status::BadParam,
            "PMIX_ALLOC_RELEASE needs PMIX_ALLOC_NODE_LIST or PMIX_ALLOC_NUM_NODES",
        )),
    }
}

/// The nodes a release gives back, highest first, from `pool` in allocation order (prte's
/// node first). Kubernetes removes a workload's highest indexes, so only those can go: a list
/// naming any other node is refused (not remapped: another node may be in use by the
/// requester), as is prte's own node and a node where a job still has processes.
pub fn release_targets(ask: &Ask, pool: &[PoolNode]) -> Result<Vec<String>, Refusal> {
    let n = match ask {
        Ask::ReleaseCount(n) => *n as usize,
        Ask::ReleaseNamed(names) => names.len(),
        _ => return Ok(vec![]),
    };
    let releasable = pool.len().saturating_sub(1);
    if n > releasable {
        return Err(refuse(
            Status::OutOfResource,
            format!(
                "the DVM has {} nodes: at most {releasable} can be released (never prte's own)",
                pool.len()
            ),
        ));
    }
    let highest: Vec<&PoolNode> = pool.iter().rev().take(n).collect();
    if let Ask::ReleaseNamed(names) = ask {
        let wrong: Vec<&str> = names
            .iter()
            .filter(|name| !highest.iter().any(|p| &p.hostname == *name))
            .map(String::as_str)
            .collect();
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        if !wrong.is_empty() || distinct.len() != names.len() {
            let can: Vec<&str> = highest.iter().map(|p| p.hostname.as_str()).collect();
            return Err(refuse(
                Status::BadParam,
                format!(
                    "Kubernetes removes the job's highest pods only: {} cannot be released alone; releasing {n} node(s) means {}",
                    if wrong.is_empty() { "a node named twice".to_string() } else { wrong.join(",") },
                    can.join(",")
                ),
            ));
        }
    }
    if let Some(p) = highest.iter().find(|p| p.busy_with.is_some()) {
        return Err(refuse(
            Status::ResourceBusy,
            format!(
                "node {} still runs processes of job {}: release it when that job has ended",
                p.hostname,
                p.busy_with.as_deref().unwrap_or("?")
            ),
        ));
    }
    Ok(highest.iter().map(|p| p.hostname.clone()).collect())
}

/// PRRTE 3.0.8 adds hosts to a managed allocation only while every node of its pool has the
/// same slots (`prte_ras_base_add_hosts`); a job run with `--host NODE` without a count leaves
/// that node with 1. Checked before the workload is raised, so such a DVM is refused with the
/// reason instead of growing pods it cannot use. `nodes`: every node of the pool (any state),
/// name and slots.
pub fn uniform_slots(nodes: &[(String, i32)]) -> Result<(), Refusal> {
    let Some((first, slots)) = nodes.first() else {
        return Ok(());
    };
    match nodes.iter().find(|(_, s)| s != slots) {
        None => Ok(()),
        Some((name, s)) => Err(refuse(
            Status::Error,
            format!(
                "PRRTE adds nodes only while all of its nodes have the same slots, but node {first} has {slots} and node {name} has {s} (a job given `--host {name}` without a count sets its slots to 1): run jobs with `--host {name}:{slots}`, or restart the DVM"
            ),
        )),
    }
}

/// A refused growth as the requester is answered.
pub fn from_grow(e: &GrowError) -> Refusal {
    let status = match e {
        GrowError::Zero => Status::BadParam,
        GrowError::NotElastic { .. } | GrowError::Fixed { .. } | GrowError::Refused { .. } => {
            Status::NotSupported
        }
        GrowError::NoWorkload => Status::NotSupported,
        GrowError::BeyondMax { .. } => Status::OutOfResource,
        GrowError::BadMax { .. } => Status::BadParam,
        GrowError::Discovery(d) if d.kind() == crate::discovery::ErrorKind::Timeout => {
            Status::Timeout
        }
        GrowError::Discovery(_) | GrowError::Api { .. } => Status::Error,
    };
    refuse(status, e.to_string())
}

/// The host names the next `by` pods of a workload of `pods` pods get, told from its pods now
/// (`nodes`): Kubernetes adds an Indexed Job's and a StatefulSet's lowest missing indexes, and
/// names the pods of both `<name>-<index>`. `None` when the pods' host names do not all read
/// `<one prefix>-<their index>`.
pub fn next_hostnames(nodes: &[PodNode], pods: u32, by: u32) -> Option<Vec<String>> {
    let mut prefix: Option<&str> = None;
    for n in nodes {
        let p = n.hostname.strip_suffix(&format!("-{}", n.index?))?;
        if prefix.is_some_and(|q| q != p) {
            return None;
        }
        prefix = Some(p);
    }
    let prefix = prefix?;
    Some(
        (u64::from(pods)..u64::from(pods) + u64::from(by))
            .map(|i| format!("{prefix}-{i}"))
            .collect(),
    )
}

/// Refuses, before anything changes, an extension by `by` of a workload of `pods` pods (`nodes`)
/// whose new pods would take the names of nodes the DVM gave back before (`given_back`):
/// Kubernetes reuses a released pod's index and name, and PRRTE 3.0.8 cannot take such a node
/// back into a running DVM. When the new names cannot be told and the DVM gave nodes back, it is
/// refused too: no pod is made that would have to be deleted again.
pub fn check_given_back(
    nodes: &[PodNode],
    pods: u32,
    by: u32,
    given_back: &[String],
) -> Result<(), Refusal> {
    if given_back.is_empty() {
        return Ok(());
    }
    const REMEDY: &str = "this PRRTE cannot take a released node back into a running DVM: start a new DVM (pterm, then the job's pod 0 starts one) to use more pods than it has now; nothing was changed";
    let Some(next) = next_hostnames(nodes, pods, by) else {
        return Err(refuse(
            Status::NotSupported,
            format!(
                "this DVM gave back {} before, and the names of the {by} new pod(s) cannot be told from the job's pods' names: they may take those nodes' places, and {REMEDY}",
                given_back.join(",")
            ),
        ));
    };
    let back: Vec<&str> = next
        .iter()
        .filter(|h| given_back.contains(h))
        .map(String::as_str)
        .collect();
    if back.is_empty() {
        return Ok(());
    }
    Err(refuse(
        Status::NotSupported,
        format!(
            "the new pod(s) {} would take the place of nodes this DVM gave back before, and {REMEDY}",
            back.join(",")
        ),
    ))
}
