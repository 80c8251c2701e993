//! `RELEASE`: the highest pods given back, on a thread of its own: what Kubernetes would remove
//! checked against the DVM's highest nodes, their daemons sent PRRTE's exit command
//! (`prte_ras_base_release_node`, on prte's loop) and awaited until gone, then the workload
//! lowered.
//!
//! `prte_ras_base_release_node` exists only in a PRRTE with patch 0003, so it is looked up in the
//! process.
use super::inflight::{alloc_id, conclude, say, Items};
use super::pool::{busy_with, node_named, on_loop};
use crate::{boundary, ffi, pointers, prrte};
use prrte_k8s::discovery::{DiscoveryConfig, Environment};
use prrte_k8s::elastic::allocreq::{info, release, Refusal, Status};
use std::os::raw::{c_char, c_int};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// `prte_ras_base_release_node(node, &busy)`.
type ReleaseFn =
    unsafe extern "C" fn(node: *mut ffi::prte_node_t, busy: *mut *const c_char) -> c_int;

/// `prte_ras_base_release_node`, if this PRRTE has it.
fn release_fn() -> Option<ReleaseFn> {
    static F: OnceLock<Option<ReleaseFn>> = OnceLock::new();
    // SAFETY: the function patch 0003 exports with exactly this signature (its base.h:
    // `int prte_ras_base_release_node(prte_node_t *, const char **)`).
    *F.get_or_init(|| unsafe { pointers::function(c"prte_ras_base_release_node") })
}

/// How long released daemons may take to exit.
const GONE_LIMIT: Duration = Duration::from_secs(30);

/// Starts the thread that gives back `hosts` (the DVM's highest nodes) for request `seq`.
pub(crate) fn start(seq: u64, cfg: DiscoveryConfig, hosts: Vec<String>) -> std::io::Result<()> {
    let what = format!("releasing {}", hosts.join(","));
    boundary::spawn_worker(
        "prrte-k8s-release",
        move |rt| run(rt, seq, cfg, hosts),
        move |outcome| conclude(seq, &what, outcome),
    )
}

/// On the loop: the daemons of `hosts` get the exit command; their nodes go down. All or none:
/// the first refusal stops before any daemon is told (each node is checked first).
fn release_on_loop(hosts: Vec<String>) -> Result<(), String> {
    let Some(release) = release_fn() else {
        return Err(
            "this PRRTE cannot release nodes (prte_ras_base_release_node is missing)".into(),
        );
    };
    let mut nodes = Vec::new();
    for h in &hosts {
        let Some(node) = node_named(h, true) else {
            return Err(format!("node {h} is no longer up in the DVM"));
        };
        // SAFETY: a live node on the loop.
        if let Some(job) = unsafe { busy_with((*node).procs) } {
            return Err(format!("node {h} still runs processes of job {job}"));
        }
        nodes.push((h, node));
    }
    for (h, node) in nodes {
        let mut busy: *const c_char = std::ptr::null();
        // SAFETY: a live node of the pool, on prte's loop, as the function requires.
        let rc = unsafe { release(node, &mut busy) };
        if rc != prrte::SUCCESS {
            // SAFETY: NULL or a job's nspace, valid now.
            let job = unsafe { crate::cstr::string(busy) };
            return Err(format!(
                "PRRTE refused to release node {h} (PRRTE error {rc}{})",
                job.map(|j| format!(", job {j} runs there"))
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// On the loop: whether the daemons of `hosts` are gone.
fn daemons_gone(hosts: &[String]) -> bool {
    let unterminated = crate::version_guard::components().proc_states.unterminated;
    hosts.iter().all(|h| match node_named(h, false) {
        None => true,
        // SAFETY: a live node and its daemon, on the loop.
        Some(node) => unsafe {
            let d = (*node).daemon;
            d.is_null() || (*d).state >= unterminated
        },
    })
}

/// The release, on its thread: the answer's items, or why it failed (and what was changed).
fn run(rt: &Runtime, seq: u64, cfg: DiscoveryConfig, hosts: Vec<String>) -> Result<Items, Refusal> {
    let env = Environment::from_process();
    let by = hosts.len() as u32;
    // What Kubernetes will remove must be what PRRTE gives back, checked before anything
    // changes (and the job's right to lower its workload, by a dry run).
    let plan = rt.block_on(release::plan(&cfg, &env, by))?;
    let going = plan.removed.clone();
    let mut want = hosts.clone();
    want.sort();
    let mut have = going.clone();
    have.sort();
    if want != have {
        return Err(Refusal {
                status: Status::BadParam,
                reason: format!(
                    "Kubernetes would remove {} but the DVM's highest nodes are {}: nothing was changed",
                    going.join(","),
                    hosts.join(",")
                ),
            },
        );
    }
    let h = hosts.clone();
    match on_loop(move || release_on_loop(h)) {
        Some(Ok(())) => {}
        Some(Err(reason)) => {
            return Err(Refusal {
                status: Status::ResourceBusy,
                reason: format!("{reason}: nothing was changed"),
            })
        }
        None => {
            return Err(Refusal {
                status: Status::Error,
                reason: "prte's event loop did not run the release".into(),
            })
        }
    }
    let start = Instant::now();
    loop {
        let h = hosts.clone();
        if on_loop(move || daemons_gone(&h)) == Some(true) {
            break;
        }
        if start.elapsed() > GONE_LIMIT {
            return Err(Refusal {
                    status: Status::Timeout,
                    reason: format!(
                        "the daemons of {} were told to exit but did not within {} s; their nodes are out of the DVM, the workload was not lowered",
                        hosts.join(","),
                        GONE_LIMIT.as_secs()
                    ),
                },
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Err(r) = rt.block_on(release::apply(&cfg, &plan)) {
        return Err(Refusal {
                status: Status::Error,
                reason: format!(
                    "the daemons of {} ended and their nodes left the DVM, but lowering the workload failed: {}",
                    hosts.join(","),
                    r.reason
                ),
            },
        );
    }
    // Answered in the DVM's order (the highest last), as the extension named them.
    let hosts: Vec<String> = hosts.into_iter().rev().collect();
    say(format!(
        "ras:k8s: allocation released: {} (the workload lowered by {by})",
        hosts.join(",")
    ));
    Ok(vec![
        (info::ALLOC_ID, alloc_id(&plan.workload, seq)),
        (info::NODE_LIST, hosts.join(",")),
    ])
}
