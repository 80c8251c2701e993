//! prte's node pool as the requests see it (on prte's loop): its nodes up, the jobs still
//! running on each, their slots; and a way for the requests' threads to ask it, bounded.
use crate::{ffi, mainloop, prrte};
use prrte_k8s::elastic::allocreq::PoolNode;
use std::sync::mpsc;
use std::time::Duration;

/// How long a request's thread waits for prte's loop to answer it.
const LOOP_ANSWERS_WITHIN: Duration = Duration::from_secs(30);

/// Runs `f` on prte's loop and waits for its result (bounded).
pub(crate) fn on_loop<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    mainloop::post(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LOOP_ANSWERS_WITHIN).ok()
}

/// The nodes of prte's pool, in pool order (main thread).
fn pool_nodes() -> Vec<*mut ffi::prte_node_t> {
    // SAFETY: main thread; prte_node_pool is PRRTE's live node array (or NULL before init).
    let array = unsafe { ffi::prte_node_pool };
    if array.is_null() {
        return Vec::new();
    }
    // SAFETY: a live pointer array (not NULL), main thread.
    let size = unsafe { (*array).size };
    (0..size)
        // SAFETY: the pool holds prte_node_t; the shim bounds-checks the index.
        .map(|i| unsafe { prrte::array_get::<ffi::prte_node_t>(array, i) })
        .filter(|n| !n.is_null())
        .collect()
}

/// The nodes of prte's pool that are up, in pool order (prte's first), with the job still
/// running processes on each; and the slots of a pod.
pub(crate) fn pool() -> (Vec<PoolNode>, u32) {
    let mut out = Vec::new();
    let mut slots = 1u32;
    for node in pool_nodes() {
        // SAFETY: a live node of the pool, main thread.
        let (state, name, procs, n_slots) =
            unsafe { ((*node).state, (*node).name, (*node).procs, (*node).slots) };
        if state as u32 != ffi::PRTE_NODE_STATE_UP {
            continue;
        }
        if n_slots > 0 {
            slots = n_slots as u32;
        }
        // SAFETY: the node's name is a C string PRRTE owns.
        let hostname = unsafe { crate::cstr::string(name) }.unwrap_or_default();
        out.push(PoolNode {
            hostname,
            // SAFETY: the node's procs array, main thread.
            busy_with: unsafe { busy_with(procs) },
        });
    }
    (out, slots)
}

/// A node out of the DVM (released, or never launched) keeps whatever slots a job's `--host`
/// left on it; PRRTE still counts it when it checks that all nodes have the same slots before
/// it adds hosts. It gets its pod's own slots back (main thread).
pub(crate) fn restore_slots_of_down_nodes() {
    for node in pool_nodes() {
        // SAFETY: a live node of the pool; its name is PRRTE's C string; its slots a plain
        // field no job maps by while the node is down.
        unsafe {
            if (*node).state as u32 != ffi::PRTE_NODE_STATE_DOWN {
                continue;
            }
            let name = crate::cstr::string((*node).name).unwrap_or_default();
            if let Some(s) = crate::pods::slots_of(&name) {
                (*node).slots = s as i32;
            }
        }
    }
}

/// Every node of prte's pool, whatever its state, with its slots.
pub(crate) fn all_slots() -> Vec<(String, i32)> {
    pool_nodes()
        .into_iter()
        // SAFETY: a live node of the pool; its name is PRRTE's C string.
        .map(|n| unsafe {
            (
                crate::cstr::string((*n).name).unwrap_or_default(),
                (*n).slots,
            )
        })
        .collect()
}

/// A job (other than the daemons) with a process on the node that has not ended.
///
/// # Safety
///
/// `procs` is NULL or a live node's procs array; main thread.
pub(crate) unsafe fn busy_with(procs: *mut ffi::pmix_pointer_array_t) -> Option<String> {
    // SAFETY: prte_process_info is set at init.
    let me = unsafe {
        crate::cstr::string(
            (*std::ptr::addr_of!(ffi::prte_process_info))
                .myproc
                .nspace
                .as_ptr(),
        )
    };
    let size = if procs.is_null() {
        0
    } else {
        // SAFETY: a live procs array (the caller's promise), not NULL.
        unsafe { (*procs).size }
    };
    let unterminated = crate::version_guard::components().proc_states.unterminated;
    for i in 0..size {
        // SAFETY: the node's procs array holds prte_proc_t.
        let p: *mut ffi::prte_proc_t = unsafe { prrte::array_get(procs, i) };
        if p.is_null() {
            continue;
        }
        // SAFETY: a live proc, main thread.
        let (ns, state) = unsafe { (crate::cstr::string((*p).name.nspace.as_ptr()), (*p).state) };
        if ns != me && state < unterminated {
            return ns;
        }
    }
    None
}

/// The node of the pool named `host` (only if up, with `up_only`). Main thread.
pub(crate) fn node_named(host: &str, up_only: bool) -> Option<*mut ffi::prte_node_t> {
    pool_nodes()
        .into_iter()
        // SAFETY: a live node of the pool.
        .filter(|n| !up_only || unsafe { (**n).state } as u32 == ffi::PRTE_NODE_STATE_UP)
        // SAFETY: a live node.
        .find(|n| unsafe { crate::cstr::string((**n).name) }.as_deref() == Some(host))
}

/// The nodes this DVM gave back before (down, their daemon ended), on the loop. A pod that comes
/// again after a release has its old name (Kubernetes reuses the index or ordinal), and PRRTE
/// 3.0.8 cannot take such a node back: it keeps the node with its ended daemon, and a DVM that
/// lost daemons does not launch on daemons that join after them.
pub(crate) fn given_back() -> Vec<String> {
    let ended = crate::version_guard::components().proc_states.unterminated;
    pool_nodes()
        .into_iter()
        .filter(|&node| {
            // SAFETY: a live node of the pool and its daemon proc, on prte's loop.
            unsafe {
                let d = (*node).daemon;
                (*node).state as u32 == ffi::PRTE_NODE_STATE_DOWN
                    && (d.is_null() || (*d).state >= ended)
            }
        })
        // SAFETY: a live node; its name is PRRTE's C string.
        .filter_map(|node| unsafe { crate::cstr::string((*node).name) })
        .collect()
}
