//! The `ras k8s` module functions.
//!
//! `allocate` returns `PRTE_ERR_ALLOCATION_PENDING` at once; discovery (Kubernetes API calls and
//! the readiness watch) runs on our own thread, and its result is applied on PRRTE's event
//! thread: nodes inserted, `ALLOCATION_COMPLETE` activated, or the allocation failed with our
//! message.
use super::layout::{self, Module4, Module5};
use crate::boundary::{self, boundary, WorkerError};
use crate::cstr::cstring;
use crate::prrte::JobRef;
use crate::shim::{self, Framework};
use crate::{ffi, mainloop, params, pods, prrte};
use prrte_k8s::discovery::{self, Allocation, DiscoveryConfig, DiscoveryError};
use std::os::raw::c_int;

static mut MODULE: Module4 = Module4 {
    init: Some(init),
    allocate: Some(allocate),
    deallocate: None,
    finalize: Some(finalize),
};

/// The module for a PRRTE with patch 0003: allocation requests are served by [`super::modify`]
/// (built against headers that have the patch; otherwise PRRTE answers every request
/// `PMIX_ERR_NOT_SUPPORTED`, as for a module without `modify`).
static mut MODULE_WITH_MODIFY: Module5 = Module5 {
    init: Some(init),
    allocate: Some(allocate),
    deallocate: None,
    #[cfg(prrte_ras_modify)]
    modify: Some(super::modify::modify),
    #[cfg(not(prrte_ras_modify))]
    modify: None,
    finalize: Some(finalize),
};

/// The module PRRTE gets from `query`, in the layout of the PRRTE this process runs
/// ([`layout`]).
pub(crate) fn module_ptr() -> *const ffi::prte_ras_base_module_t {
    if layout::prrte_has_modify() {
        std::ptr::addr_of!(MODULE_WITH_MODIFY).cast()
    } else {
        std::ptr::addr_of!(MODULE).cast()
    }
}

unsafe extern "C" fn init() -> c_int {
    boundary("ras k8s init", prrte::ERROR, || prrte::SUCCESS)
}

unsafe extern "C" fn finalize() -> c_int {
    boundary("ras k8s finalize", prrte::ERROR, || {
        #[cfg(prrte_ras_modify)]
        super::modify::finalize();
        prrte::SUCCESS
    })
}

/// The discovery configuration from our MCA parameters; a clear message for bad values.
pub(crate) fn config_from(p: &params::RasParams) -> Result<DiscoveryConfig, DiscoveryError> {
    DiscoveryConfig::from_params(p)
}

/// Why the pods could not be handed to PRRTE as nodes.
#[derive(Debug, thiserror::Error)]
enum InsertError {
    #[error("discovery returned no pods")]
    NoPods,
    #[error("out of memory")]
    OutOfMemory,
    #[error("prte_ras_base_node_insert failed with PRRTE error {0}")]
    Prrte(c_int),
}

/// The module's `allocate`: starts discovery on our own thread and returns at once.
///
/// # Safety
///
/// `jdata` is the live job object PRRTE allocates for; main thread.
unsafe extern "C" fn allocate(jdata: *mut ffi::prte_job_t, _nodes: *mut ffi::pmix_list_t) -> c_int {
    boundary("ras k8s allocate", prrte::ERROR, || {
        // SAFETY: `jdata` is NULL or the live job object PRRTE allocates for (our caller's
        // promise), on the main thread.
        let Some(job) = (unsafe { JobRef::new(jdata) }) else {
            return prrte::ERROR;
        };
        let cfg = match config_from(&params::ras()) {
            Ok(c) => c,
            Err(e) => {
                let msg = e.to_string();
                prrte::error_box("The k8s RAS component has a bad MCA parameter value.", &msg);
                return ffi::PRTE_ERR_BAD_PARAM;
            }
        };
        if let Err(e) = mainloop::ensure() {
            prrte::error_box(
                "The k8s RAS component could not set up its event.",
                &e.to_string(),
            );
            return prrte::ERROR;
        }
        crate::logging::route(Framework::Ras);
        // prte starts local processes on its main thread unless the site chose otherwise (the
        // short-job hang of PRRTE's launch threads); jobs of departed tools end.
        crate::dvm::launch_on_main_thread(Framework::Ras);
        crate::dvm::watch_tools(Framework::Ras);
        // Kept alive until our completion runs.
        job.retain();
        let carried = job.carry();
        shim::verbose(
            Framework::Ras,
            1,
            "ras:k8s: discovering the job's pods on a background thread",
        );
        let spawned = boundary::spawn_worker(
            "prrte-k8s-ras",
            move |rt| rt.block_on(discovery::discover(&cfg)),
            move |outcome| {
                let result = discovery_result(outcome);
                mainloop::post(move || {
                    // SAFETY: the job object was retained above and is released only by
                    // `complete`; the mailbox runs this on the main thread.
                    complete(unsafe { JobRef::arrived(carried) }, result);
                })
            },
        );
        if let Err(e) = spawned {
            // SAFETY: undoes the retain above; `job` is not used after.
            unsafe { job.release() };
            prrte::error_box(
                "The k8s RAS component could not start its discovery thread.",
                &e.to_string(),
            );
            return prrte::ERROR;
        }
        ffi::PRTE_ERR_ALLOCATION_PENDING
    })
}

/// What the discovery thread delivers: discovery's result, or an internal error when it gave
/// none (its runtime could not start, or it panicked), so that the allocation fails with a
/// message instead of leaving PRRTE waiting for a result that never comes.
fn discovery_result(
    outcome: Result<Result<Allocation, DiscoveryError>, WorkerError>,
) -> Result<Allocation, DiscoveryError> {
    outcome.unwrap_or_else(|e| {
        Err(DiscoveryError::Internal {
            detail: match e {
                WorkerError::Panicked(text) => {
                    format!("the discovery thread panicked ({text}); please report this as a bug")
                }
                runtime => runtime.to_string(),
            },
        })
    })
}

/// On PRRTE's event thread: apply the discovery result, then release the reference to the job
/// object that `allocate` took.
fn complete(job: JobRef, result: Result<Allocation, DiscoveryError>) {
    match result {
        Ok(alloc) => {
            if let Err(e) = insert(job, &alloc) {
                prrte::error_box(
                    "The k8s RAS component could not hand the pods to PRRTE.",
                    &e.to_string(),
                );
                job.activate(ffi::PRTE_JOB_STATE_ALLOC_FAILED);
            }
        }
        Err(e) => {
            prrte::error_box(
                "The k8s RAS component could not build an allocation from the job's pods.",
                &e.to_string(),
            );
            shim::update_exit_status(1);
            job.activate(ffi::PRTE_JOB_STATE_ALLOC_FAILED);
        }
    }
    // SAFETY: releases the reference taken in `allocate` (the `JobRef` is not used after this).
    unsafe { job.release() };
}

/// Inserts the pods as PRRTE nodes and completes the allocation.
fn insert(job: JobRef, alloc: &Allocation) -> Result<(), InsertError> {
    let jdata = job.as_ptr();
    if alloc.nodes.is_empty() {
        return Err(InsertError::NoPods);
    }
    // SAFETY: shim allocation of a PMIx list.
    let list = unsafe { ffi::prrte_k8s_shim_list_new() };
    if list.is_null() {
        return Err(InsertError::OutOfMemory);
    }
    for n in &alloc.nodes {
        let name = cstring(&n.hostname);
        let ip = cstring(&n.ip.to_string());
        // SAFETY: the shim strdup's both strings.
        let node: *mut ffi::prte_node_t =
            unsafe { ffi::prrte_k8s_shim_node_new(name.as_ptr(), ip.as_ptr()) }.cast();
        if node.is_null() {
            // SAFETY: release the list and what is on it.
            unsafe { ffi::prrte_k8s_shim_list_release(list) };
            return Err(InsertError::OutOfMemory);
        }
        // SAFETY: `node` is a fresh prte_node_t we own until it is appended to the list.
        unsafe {
            (*node).state = ffi::PRTE_NODE_STATE_UP as ffi::prte_node_state_t;
            (*node).slots = n.slots as i32;
            (*node).slots_max = 0;
            (*node).flags |= ffi::PRTE_NODE_FLAG_SLOTS_GIVEN as ffi::prte_node_flags_t;
            ffi::prrte_k8s_shim_list_append(list, node.cast());
        }
        pods::record_slots(&n.hostname, n.slots);
        pods::record(
            &n.hostname,
            pods::PodAddr {
                pod: n.pod.clone(),
                namespace: n.namespace.clone(),
                ip: n.ip,
            },
        );
        shim::verbose(
            Framework::Ras,
            1,
            &format!(
                "ras:k8s: pod {} (index {}) as node {} at {} with {} slots{}",
                n.pod,
                n.index.map(|i| i.to_string()).unwrap_or_else(|| "-".into()),
                n.hostname,
                n.ip,
                n.slots,
                if n.is_self { " (this pod)" } else { "" }
            ),
        );
    }
    // SAFETY: main thread and `jdata` live (`JobRef`); PRRTE globals and the job object are
    // ours to update here, exactly as PRRTE's own allocation step does after a module
    // returns nodes.
    unsafe {
        ffi::prte_managed_allocation = true;
        ffi::prte_do_not_resolve = true;
        let rc = ffi::prte_ras_base_node_insert(list.cast(), jdata);
        ffi::prrte_k8s_shim_list_release(list);
        if rc != prrte::SUCCESS {
            return Err(InsertError::Prrte(rc));
        }
        let display =
            ffi::prte_get_attribute(
                &mut (*jdata).attributes,
                ffi::PRTE_JOB_DISPLAY_ALLOC as u16,
                std::ptr::null_mut(),
                ffi::PMIX_BOOL as ffi::pmix_data_type_t,
            ) || ffi::pmix_output_get_verbosity(ffi::prte_ras_base_framework.framework_output) > 4;
        if display {
            ffi::prte_ras_base_display_alloc(jdata);
        }
        (*jdata).total_slots_alloc = ffi::prte_ras_base.total_slots_alloc;
        if params::ras().bind_none && ffi::prrte_k8s_shim_default_binding_is_set() == 0 {
            ffi::prrte_k8s_shim_set_default_binding_none();
            shim::verbose(
                Framework::Ras,
                1,
                "ras:k8s: pods share their node's cores: ranks are not bound unless a binding policy is given",
            );
        }
    }
    job.activate(ffi::PRTE_JOB_STATE_ALLOCATION_COMPLETE);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prrte_k8s::discovery::ErrorKind;

    fn delivered(
        discover: impl FnOnce() -> Result<Allocation, DiscoveryError> + Send + 'static,
    ) -> Vec<Result<Allocation, DiscoveryError>> {
        let (tx, rx) = std::sync::mpsc::channel();
        // On a worker thread, as in `allocate`.
        boundary::spawn_worker(
            "prrte-k8s-ras-test",
            |_| discover(),
            move |o| tx.send(discovery_result(o)).unwrap(),
        )
        .unwrap();
        let first = rx.recv_timeout(std::time::Duration::from_secs(10));
        first.into_iter().chain(rx.iter()).collect()
    }

    #[test]
    fn a_panic_in_discovery_is_delivered_as_an_internal_error() {
        let got = delivered(|| panic!("index out of range in a test"));
        assert_eq!(got.len(), 1, "exactly one result is delivered");
        let err = got[0].as_ref().expect_err("a panic is a failure");
        assert_eq!(err.kind(), ErrorKind::Internal);
        let msg = err.to_string();
        assert!(
            msg.contains("panicked") && msg.contains("index out of range in a test"),
            "{msg}"
        );
    }

    #[test]
    fn an_error_or_an_allocation_is_delivered_as_it_is() {
        let got = delivered(|| Err(DiscoveryError::Internal { detail: "x".into() }));
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].as_ref().unwrap_err().to_string(),
            "Internal error during pod discovery: x."
        );
        let alloc = Allocation {
            namespace: "ns".into(),
            selector: "a=b".into(),
            nodes: vec![],
        };
        let want = alloc.clone();
        let got = delivered(move || Ok(alloc));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap(), &want);
    }
}
