//! The RAS module's `modify` (patch 0003): PMIx allocation requests (`PMIx_Allocation_request`
//! from a rank through its prted, or PMIx's `palloc`) answered by the job's workload.
//!
//! On prte's event loop: the request is read, checked against the DVM's nodes and decided by
//! [`prrte_k8s::elastic::allocreq`] (a refusal is answered at once, with its reason); the slow part runs on
//! a thread of its own: an `EXTEND` raises the workload, awaits the new pods and hands them to
//! the DVM through PRRTE's add-host path; a `RELEASE` sends the daemons of the highest pods the
//! exit command (`prte_ras_base_release_node`, on the loop), waits for them to be gone, then
//! lowers the workload. Every request is answered exactly once through
//! `prte_ras_base_modify_complete`, which PRRTE makes safe to call from any thread. One request
//! at a time; a `REQ_CANCEL` stops an `EXTEND` while its pods are awaited.
//!
//! `prte_ras_base_modify_complete` and `prte_ras_base_release_node` exist only in a PRRTE with
//! patch 0003, so they are looked up in the process (a PRRTE without them never calls `modify`:
//! the module it gets has none, see [`super::layout`]).
use crate::boundary::boundary;
use crate::cstr::cstring;
use crate::shim::{self, Framework};
use crate::{ffi, mainloop, params, prrte};
use prrte_k8s::discovery::{DiscoveryConfig, Environment};
use prrte_k8s::elastic::allocreq::{
    self, extend, info, release, Ask, Gate, PoolNode, Refusal, Status,
};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// `prte_ras_base_modify_complete(req, status, info, ninfo)`.
type CompleteFn =
    unsafe extern "C" fn(req: *mut c_void, status: c_int, info: *mut c_void, n: usize);
/// `prte_ras_base_release_node(node, &busy)`.
type ReleaseFn =
    unsafe extern "C" fn(node: *mut ffi::prte_node_t, busy: *mut *const c_char) -> c_int;

fn symbol(name: &CStr) -> usize {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the name up among the
    // objects already loaded.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

fn complete_fn() -> Option<CompleteFn> {
    static F: OnceLock<usize> = OnceLock::new();
    let f = *F.get_or_init(|| symbol(super::layout::MODIFY_SYMBOL));
    // SAFETY: the symbol patch 0003 exports with exactly this signature (its base.h).
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, CompleteFn>(f) })
}

fn release_fn() -> Option<ReleaseFn> {
    static F: OnceLock<usize> = OnceLock::new();
    let f = *F.get_or_init(|| symbol(c"prte_ras_base_release_node"));
    // SAFETY: as above: patch 0003's `int prte_ras_base_release_node(prte_node_t *, const char **)`.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, ReleaseFn>(f) })
}

/// A request PRRTE handed `modify`, kept until it is answered (PRRTE keeps it alive until then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Req(usize);

/// The request being served.
struct Inflight {
    seq: u64,
    req: Req,
    /// Fires the cancellation of an `EXTEND` while its pods are awaited; taken (None) once the
    /// request is past that point.
    cancel: Option<extend::Canceller>,
}

#[derive(Default)]
struct State {
    gate: Gate,
    inflight: Option<Inflight>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(State::default))
}

/// PMIx's number for a status.
fn pmix_status(s: Status) -> c_int {
    (match s {
        Status::NotSupported => ffi::PMIX_ERR_NOT_SUPPORTED,
        Status::BadParam => ffi::PMIX_ERR_BAD_PARAM,
        Status::OutOfResource => ffi::PMIX_ERR_OUT_OF_RESOURCE,
        Status::ResourceBusy => ffi::PMIX_ERR_RESOURCE_BUSY,
        Status::NotFound => ffi::PMIX_ERR_NOT_FOUND,
        Status::Timeout => ffi::PMIX_ERR_TIMEOUT,
        Status::Canceled => ffi::PMIX_ERR_JOB_CANCELED,
        Status::Error => ffi::PMIX_ERROR,
    }) as c_int
}

/// Answers `req` with `status` and `items` (key, string value). Any thread.
fn answer(req: Req, status: c_int, items: &[(&str, String)]) {
    let Some(complete) = complete_fn() else {
        return;
    };
    let n = items.len();
    let array = if n == 0 {
        std::ptr::null_mut()
    } else {
        // SAFETY: PMIX_INFO_CREATE through the shim (n > 0 entries, or NULL).
        unsafe { ffi::prrte_k8s_shim_info_create(n) }
    };
    if !array.is_null() {
        for (i, (k, v)) in items.iter().enumerate() {
            let (k, v) = (cstring(k), cstring(v));
            // SAFETY: `array` has n entries, i < n; PMIx copies both strings.
            unsafe { ffi::prrte_k8s_shim_info_load_string(array, i, k.as_ptr(), v.as_ptr()) };
        }
    }
    let n = if array.is_null() { 0 } else { n };
    // SAFETY: `req` is the request PRRTE handed `modify`, not answered before (every answer
    // goes through `finish` or is given before the request is recorded); the request takes
    // ownership of `array`.
    unsafe { complete(req.0 as *mut c_void, status, array, n) };
}

/// Answers the request in flight `seq` (if it still is: finalize may have answered it) and
/// admits the next one.
fn finish(seq: u64, status: c_int, items: &[(&str, String)]) {
    let req = with_state(|s| {
        s.gate.finish(seq);
        match s.inflight.take() {
            Some(i) if i.seq == seq => Some(i.req),
            other => {
                s.inflight = other;
                None
            }
        }
    });
    if let Some(req) = req {
        answer(req, status, items);
    }
}

fn refusal_items(r: &Refusal) -> Vec<(&'static str, String)> {
    vec![(info::TEXT_MESSAGE, r.reason.clone())]
}

/// A line on prte's error output, from any thread (printed on prte's loop).
fn say(msg: String) {
    mainloop::post(move || shim::output(&msg));
}

fn verbose(msg: String) {
    mainloop::post(move || shim::verbose(Framework::Ras, 1, &msg));
}

/// The module's `modify` (patch 0003's contract: return `PMIX_SUCCESS` and answer through
/// `prte_ras_base_modify_complete`, exactly once).
///
/// # Safety
///
/// `req` is the request PRRTE hands over (a `pmix_server_req_t`), live until answered; called on
/// prte's event loop.
pub unsafe extern "C" fn modify(req: *mut c_void) -> c_int {
    boundary("ras k8s modify", ffi::PMIX_ERROR as c_int, || {
        if req.is_null() || complete_fn().is_none() {
            return ffi::PMIX_ERR_NOT_SUPPORTED as c_int;
        }
        serve(Req(req as usize));
        ffi::PMIX_SUCCESS as c_int
    })
}

/// The request's directive and attributes, and who asked.
fn read(req: Req) -> (allocreq::Request, String) {
    let p = req.0 as *const c_void;
    // SAFETY: `p` is the live request (`modify`'s contract); the shim reads its fields.
    let directive = unsafe { ffi::prrte_k8s_shim_req_directive(p) };
    let mut n = 0usize;
    // SAFETY: as above; the info array (n entries) lives as long as the request.
    let array = unsafe { ffi::prrte_k8s_shim_req_info(p, &mut n) };
    let mut attrs = Vec::new();
    for i in 0..if array.is_null() { 0 } else { n } {
        // SAFETY: i < n entries of the request's info array; the strings are PMIx's, copied.
        let key = unsafe { crate::cstr::string(ffi::prrte_k8s_shim_info_key(array, i)) };
        let mut number = 0u64;
        // SAFETY: as above.
        let value = unsafe {
            if let Some(s) = crate::cstr::string(ffi::prrte_k8s_shim_info_string(array, i)) {
                info::Value::Text(s)
            } else if ffi::prrte_k8s_shim_info_number(array, i, &mut number)
                == ffi::PMIX_SUCCESS as c_int
            {
                info::Value::Number(number)
            } else {
                info::Value::Other
            }
        };
        attrs.push((key.unwrap_or_default(), value));
    }
    let mut nspace = [0 as c_char; ffi::PMIX_MAX_NSLEN as usize + 1];
    let mut rank = 0u32;
    // SAFETY: `nspace` has PMIX_MAX_NSLEN + 1 bytes, as the shim requires.
    unsafe { ffi::prrte_k8s_shim_req_requester(p, nspace.as_mut_ptr(), &mut rank) };
    // SAFETY: the shim NUL-terminated it.
    let ns = unsafe { crate::cstr::string(nspace.as_ptr()) }.unwrap_or_default();
    let who = if rank == u32::MAX - 1 {
        format!("{ns}:*")
    } else {
        format!("{ns}:{rank}")
    };
    (info::request(directive as u8, attrs), who)
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
fn pool() -> (Vec<PoolNode>, u32) {
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
fn restore_slots_of_down_nodes() {
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
fn all_slots() -> Vec<(String, i32)> {
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
unsafe fn busy_with(procs: *mut ffi::pmix_pointer_array_t) -> Option<String> {
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

/// Serves one request, on prte's loop.
fn serve(req: Req) {
    let (request, who) = read(req);
    let (pool, slots) = pool();
    verbose(format!(
        "ras:k8s: allocation request from {who}: {request:?} (the DVM has {} nodes up)",
        pool.len()
    ));
    let refuse = |r: Refusal| {
        shim::output(&format!(
            "ras:k8s: allocation request from {who} refused: {}",
            r.reason
        ));
        answer(req, pmix_status(r.status), &refusal_items(&r));
    };
    let ask = match allocreq::ask(&request, slots) {
        Ok(a) => a,
        Err(r) => return refuse(r),
    };
    if let Ask::Cancel(id) = &ask {
        return cancel(req, id, &who);
    }
    let cfg = match DiscoveryConfig::from_params(&params::ras()) {
        Ok(c) => c,
        Err(e) => {
            return refuse(Refusal {
                status: Status::BadParam,
                reason: e.to_string(),
            })
        }
    };
    if matches!(ask, Ask::Extend(_)) {
        restore_slots_of_down_nodes();
        if let Err(r) = allocreq::uniform_slots(&all_slots()) {
            return refuse(r);
        }
    }
    let targets = match allocreq::release_targets(&ask, &pool) {
        Ok(t) => t,
        Err(r) => return refuse(r),
    };
    let (tx, rx) = extend::cancellation();
    let seq = match with_state(|s| {
        let seq = s.gate.begin(request.req_id.as_deref())?;
        s.inflight = Some(Inflight {
            seq,
            req,
            cancel: matches!(ask, Ask::Extend(_)).then_some(tx),
        });
        Ok(seq)
    }) {
        Ok(seq) => seq,
        Err(r) => return refuse(r),
    };
    let timeout = request.timeout_s.map(Duration::from_secs);
    let spawned = match ask {
        Ask::Extend(n) => {
            let uri = shim::server_uri();
            let prun = std::env::current_exe()
                .map(|e| e.with_file_name("prun"))
                .unwrap_or_else(|_| "prun".into());
            std::thread::Builder::new()
                .name("prrte-k8s-extend".into())
                .spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        extend_thread(seq, cfg, n, timeout, rx, uri, prun)
                    }));
                    if r.is_err() {
                        finish(seq, ffi::PMIX_ERROR as c_int, &[]);
                    }
                })
        }
        _ => std::thread::Builder::new()
            .name("prrte-k8s-release".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    release_thread(seq, cfg, targets)
                }));
                if r.is_err() {
                    finish(seq, ffi::PMIX_ERROR as c_int, &[]);
                }
            }),
    };
    if let Err(e) = spawned {
        let r = Refusal {
            status: Status::Error,
            reason: format!("cannot start a thread: {e}"),
        };
        finish(seq, pmix_status(r.status), &refusal_items(&r));
    }
}

/// `REQ_CANCEL`: the `EXTEND` named stops while its pods are awaited (its own answer is
/// `PMIX_ERR_JOB_CANCELED`, once the workload is lowered back); the cancel itself is answered
/// now.
fn cancel(req: Req, id: &str, who: &str) {
    let outcome = with_state(|s| {
        let seq = s.gate.find(id)?;
        match s.inflight.as_mut().filter(|i| i.seq == seq).and_then(|i| i.cancel.take()) {
            Some(tx) => {
                tx.cancel();
                Ok(())
            }
            None => Err(Refusal {
                status: Status::NotFound,
                reason: format!(
                    "allocation request {id:?} can no longer be cancelled: its pods are being added to the DVM, or it is a release"
                ),
            }),
        }
    });
    match outcome {
        Ok(()) => {
            verbose(format!(
                "ras:k8s: {who} cancelled allocation request {id:?}"
            ));
            answer(req, ffi::PMIX_SUCCESS as c_int, &[]);
        }
        Err(r) => {
            shim::output(&format!("ras:k8s: cancel from {who} refused: {}", r.reason));
            answer(req, pmix_status(r.status), &refusal_items(&r));
        }
    }
}

/// The bound on adding ready pods to the DVM (their daemons start through the agents).
const ADD_LIMIT: Duration = Duration::from_secs(120);

fn alloc_id(name: &str, seq: u64) -> String {
    format!("{name}#{seq}")
}

fn hostnames(grown: &prrte_k8s::elastic::grow::Grown) -> String {
    grown
        .new
        .iter()
        .map(|n| n.hostname.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

fn fail(seq: u64, what: &str, r: Refusal) {
    say(format!("ras:k8s: {what} failed: {}", r.reason));
    finish(seq, pmix_status(r.status), &refusal_items(&r));
}

fn extend_thread(
    seq: u64,
    cfg: DiscoveryConfig,
    by: u32,
    timeout: Option<Duration>,
    cancelled: extend::Cancelled,
    uri: Option<String>,
    prun: std::path::PathBuf,
) {
    let what = format!("extending the job by {by} pod(s)");
    let rt = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                seq,
                &what,
                Refusal {
                    status: Status::Error,
                    reason: format!("cannot start the async runtime: {e}"),
                },
            )
        }
    };
    let env = Environment::from_process();
    let grown = match rt.block_on(extend::grow_for_request(&cfg, &env, by, timeout, cancelled)) {
        Ok(g) => g,
        Err(r) => return fail(seq, &what, r),
    };
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
        fail(seq, &what, r)
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
    let names: Vec<String> = grown.new.iter().map(|n| n.hostname.clone()).collect();
    match on_loop(move || given_back_before(&names)) {
        Some(back) if back.is_empty() => {}
        Some(back) => {
            return undo(Refusal {
                status: Status::NotSupported,
                reason: format!(
                    "the new pod(s) {} take the place of nodes this DVM gave back before, and this PRRTE cannot take a released node back into a running DVM: start a new DVM (pterm, then the job's pod 0 starts one) to use more pods than it has now",
                    back.join(",")
                ),
            });
        }
        None => {
            return undo(Refusal {
                status: Status::Error,
                reason: "prte's event loop did not answer".into(),
            })
        }
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
    finish(
        seq,
        ffi::PMIX_SUCCESS as c_int,
        &[
            (info::ALLOC_ID, alloc_id(&w.name, seq)),
            (info::NODE_LIST, nodes),
        ],
    );
}

/// Runs `f` on prte's loop and waits for its result (bounded).
fn on_loop<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    mainloop::post(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30)).ok()
}

/// The node of the pool named `host` (only if up, with `up_only`). Main thread.
fn node_named(host: &str, up_only: bool) -> Option<*mut ffi::prte_node_t> {
    pool_nodes()
        .into_iter()
        // SAFETY: a live node of the pool.
        .filter(|n| !up_only || unsafe { (**n).state } as u32 == ffi::PRTE_NODE_STATE_UP)
        // SAFETY: a live node.
        .find(|n| unsafe { crate::cstr::string((**n).name) }.as_deref() == Some(host))
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

/// On the loop: the nodes among `hosts` that this DVM gave back before (down, their daemon
/// ended). A pod that comes again after a release has its old name (Kubernetes reuses the
/// index or ordinal), and PRRTE 3.0.8 cannot take such a node back: it keeps the node with its
/// ended daemon, and a DVM that lost daemons does not launch on daemons that join after them.
fn given_back_before(hosts: &[String]) -> Vec<String> {
    let ended = crate::version_guard::components().proc_states.unterminated;
    hosts
        .iter()
        .filter(|h| {
            node_named(h, false).is_some_and(|node| {
                // SAFETY: a live node of the pool and its daemon proc, on prte's loop.
                unsafe {
                    let d = (*node).daemon;
                    (*node).state as u32 == ffi::PRTE_NODE_STATE_DOWN
                        && (d.is_null() || (*d).state >= ended)
                }
            })
        })
        .cloned()
        .collect()
}

/// How long released daemons may take to exit.
const GONE_LIMIT: Duration = Duration::from_secs(30);

fn release_thread(seq: u64, cfg: DiscoveryConfig, hosts: Vec<String>) {
    let what = format!("releasing {}", hosts.join(","));
    let rt = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                seq,
                &what,
                Refusal {
                    status: Status::Error,
                    reason: format!("cannot start the async runtime: {e}"),
                },
            )
        }
    };
    let env = Environment::from_process();
    let by = hosts.len() as u32;
    // What Kubernetes will remove must be what PRRTE gives back, checked before anything
    // changes (and the job's right to lower its workload, by a dry run).
    let plan = match rt.block_on(release::plan(&cfg, &env, by)) {
        Ok(p) => p,
        Err(r) => return fail(seq, &what, r),
    };
    let going = plan.removed.clone();
    let mut want = hosts.clone();
    want.sort();
    let mut have = going.clone();
    have.sort();
    if want != have {
        return fail(
            seq,
            &what,
            Refusal {
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
            return fail(
                seq,
                &what,
                Refusal {
                    status: Status::ResourceBusy,
                    reason: format!("{reason}: nothing was changed"),
                },
            )
        }
        None => {
            return fail(
                seq,
                &what,
                Refusal {
                    status: Status::Error,
                    reason: "prte's event loop did not run the release".into(),
                },
            )
        }
    }
    let start = Instant::now();
    loop {
        let h = hosts.clone();
        if on_loop(move || daemons_gone(&h)) == Some(true) {
            break;
        }
        if start.elapsed() > GONE_LIMIT {
            return fail(
                seq,
                &what,
                Refusal {
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
        return fail(
            seq,
            &what,
            Refusal {
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
    finish(
        seq,
        ffi::PMIX_SUCCESS as c_int,
        &[
            (info::ALLOC_ID, alloc_id(&plan.workload, seq)),
            (info::NODE_LIST, hosts.join(",")),
        ],
    );
}

/// At finalize: a request still in flight is answered `PMIX_ERR_JOB_CANCELED` now (its thread's
/// later answer is dropped) and an awaited extension is cancelled.
pub fn finalize() {
    let left = with_state(|s| s.inflight.take());
    if let Some(mut i) = left {
        if let Some(tx) = i.cancel.take() {
            tx.cancel();
        }
        with_state(|s| s.gate.finish(i.seq));
        answer(
            i.req,
            ffi::PMIX_ERR_JOB_CANCELED as c_int,
            &[(info::TEXT_MESSAGE, "the DVM is shutting down".to_string())],
        );
    }
}
