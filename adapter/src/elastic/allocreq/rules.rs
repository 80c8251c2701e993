//! The rules: what a request asks, the nodes a release may take, one request at a time, and
//! each refusal's PMIx status and reason.

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

/// One request at a time: while one is served, others are refused `PMIX_ERR_RESOURCE_BUSY`
/// (nothing half-changed stays simple); a cancel names the request it cancels.
#[derive(Debug, Default)]
pub struct Gate {
    next: u64,
    current: Option<(u64, Option<String>)>,
}

impl Gate {
    /// Admits a request with its `PMIX_ALLOC_REQ_ID`: its sequence number.
    pub fn begin(&mut self, req_id: Option<&str>) -> Result<u64, Refusal> {
        if let Some((seq, id)) = &self.current {
            return Err(refuse(
                Status::ResourceBusy,
                format!(
                    "allocation request {} is being served: one at a time; ask again when it is answered",
                    id.clone().unwrap_or_else(|| format!("#{seq}"))
                ),
            ));
        }
        self.next += 1;
        self.current = Some((self.next, req_id.map(String::from)));
        Ok(self.next)
    }

    /// The request `seq` is answered.
    pub fn finish(&mut self, seq: u64) {
        if matches!(self.current, Some((s, _)) if s == seq) {
            self.current = None;
        }
    }

    /// The sequence number of the request in flight whose id is `req_id`.
    pub fn find(&self, req_id: &str) -> Result<u64, Refusal> {
        match &self.current {
            Some((seq, Some(id))) if id == req_id => Ok(*seq),
            _ => Err(refuse(
                Status::NotFound,
                format!("no allocation request {req_id:?} is waiting: it was answered already, or never made"),
            )),
        }
    }
}
