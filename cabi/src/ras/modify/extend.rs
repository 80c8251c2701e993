//! `EXTEND`: the workload raised by the pods asked for, on a thread of its own: the new pods
//! awaited (a `REQ_CANCEL` may stop the wait), recorded for the PLM and handed to the DVM through
//! PRRTE's add-host path; on any failure after the raise, the workload lowered back. New pods
//! that would take the names of nodes the DVM gave back before are refused before the raise
//! ([`prrte_k8s::elastic::allocreq::check_given_back`], with [`super::pool::given_back`]).
use super::inflight::{alloc_id, conclude, say, verbose, with_state, Items};
use crate::boundary;
use prrte_k8s::discovery::{DiscoveryConfig, Environment};
use prrte_k8s::elastic::allocreq::{extend, info, Refusal, Status};
use std::path::PathBuf;
use std::time::Duration;
use tokio::runtime::Runtime;

/// The bound on adding ready pods to the DVM (their daemons start through the agents).
const ADD_LIMIT: Duration = Duration::from_secs(120);

/// What an extension's thread is given.
struct Extension {
    seq: u64,
    cfg: DiscoveryConfig,
    by: u32,
    timeout: Option<Duration>,
    /// The nodes the DVM gave back before (the new pods may not take their names).
    given_back: Vec<String>,
    cancelled: extend::Cancelled,
    /// prte's PMIx server URI, through which the new pods are added.
    uri: Option<String>,
    /// The `prun` that adds them.
    prun: PathBuf,
}

/// Starts the thread that extends the job by `by` pods for request `seq`.
pub(crate) fn start(
    seq: u64,
    cfg: DiscoveryConfig,
    by: u32,
    timeout: Option<Duration>,
    given_back: Vec<String>,
    cancelled: extend::Cancelled,
) -> std::io::Result<()> {
    let x = Extension {
        seq,
        cfg,
        by,
        timeout,
        given_back,
        cancelled,
        uri: crate::shim::server_uri(),
        prun: std::env::current_exe()
            .map(|e| e.with_file_name("prun"))
            .unwrap_or_else(|_| "prun".into()),
    };
    let what = format!("extending the job by {by} pod(s)");
    boundary::spawn_worker(
        "prrte-k8s-extend",
        move |rt| run(rt, x),
        move |outcome| conclude(seq, &what, outcome),
    )
}

fn hostnames(grown: &prrte_k8s::elastic::grow::Grown) -> String {
    grown
        .new
        .iter()
        .map(|n| n.hostname.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The extension, on its thread: the answer's items, or why it failed (the workload lowered back
/// if it was raised).
fn run(rt: &Runtime, x: Extension) -> Result<Items, Refusal> {
    let Extension {
        seq,
        cfg,
        by,
        timeout,
        given_back,
        cancelled,
        uri,
        prun,
    } = x;
    let env = Environment::from_process();
    let grown = rt.block_on(extend::grow_for_request(
        &cfg,
        &env,
        by,
        timeout,
        &given_back,
        cancelled,
    ))?;
    // Past the wait: a cancel that came meanwhile still wins, else none is taken any more.
    let cancelled_meanwhile = with_state(|s| match s.inflight.as_mut() {
        Some(i) if i.seq == seq => i.cancel.take().is_none(),
        _ => true,
    });
    let w = &grown.workload;
    let undo = |r: Refusal| {
        let back = rt.block_on(extend::roll_back(&cfg, &env, &grown));
        let r = Refusal {
            status: r.status,
            reason: match back {
                None => format!(
                    "{}; {} was lowered back to {} pods",
                    r.reason, w.name, w.pods
                ),
                Some(e) => format!(
                    "{}; lowering {} back to {} pods failed too ({e}): lower it by hand",
                    r.reason, w.name, w.pods
                ),
            },
        };
        Err(r)
    };
    if cancelled_meanwhile {
        return undo(Refusal {
            status: Status::Canceled,
            reason: "the request was cancelled".into(),
        });
    }
    if grown.new.is_empty() {
        return undo(Refusal {
            status: Status::Error,
            reason: format!(
                "{} {} has {} pods but none is new: it was raised by someone else at the same time",
                w.kind, w.name, grown.pods
            ),
        });
    }
    let Some(uri) = uri else {
        return undo(Refusal {
            status: Status::Error,
            reason: "prte's PMIx server URI is unknown: the new pods cannot be added".into(),
        });
    };
    // The PLM finds each new node's agent by its pod: a pod that comes again under a name
    // given back before is another pod, at another address.
    for n in &grown.new {
        crate::pods::record(
            &n.hostname,
            crate::pods::PodAddr {
                pod: n.pod.clone(),
                namespace: n.namespace.clone(),
                ip: n.ip,
            },
        );
    }
    verbose(format!(
        "ras:k8s: {} {} raised from {} to {} pods; adding {} to the DVM",
        w.kind,
        w.name,
        w.pods,
        grown.pods,
        hostnames(&grown)
    ));
    if let Err(e) = extend::add_to_dvm(&prun, &uri, &grown.new, ADD_LIMIT) {
        return undo(Refusal {
            status: Status::Error,
            reason: format!("the new pods are Ready, but adding them to the DVM failed: {e}"),
        });
    }
    for n in &grown.new {
        crate::pods::record_slots(&n.hostname, n.slots);
    }
    let nodes = hostnames(&grown);
    say(format!(
        "ras:k8s: allocation extended by {} pod(s): {nodes}",
        grown.new.len()
    ));
    Ok(vec![
        (info::ALLOC_ID, alloc_id(&w.name, seq)),
        (info::NODE_LIST, nodes),
    ])
}
