//! MCA parameters, registered through PMIx's MCA variable system so that `prte_info --param ras
//! k8s` / `--param plm k8s` list them with their help text, and set like any other parameter
//! (`--prtemca ras_k8s_selector app=x`, `PRTE_MCA_ras_k8s_selector=...`, param files).
//!
//! PMIx keeps pointers to the storage, so it lives for the life of the process (leaked once).
use crate::ffi;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicPtr, Ordering};

/// Storage of the `ras_k8s_*` parameters.
#[repr(C)]
pub struct RasStorage {
    pub namespace: *mut c_char,
    pub selector: *mut c_char,
    pub expected_pods: c_int,
    pub timeout: c_int,
    pub slots: *mut c_char,
    pub kubeconfig: *mut c_char,
    pub self_pod: *mut c_char,
    pub priority: c_int,
    pub bind_none: bool,
}

/// Storage of the `plm_k8s_*` parameters.
#[repr(C)]
pub struct PlmStorage {
    pub secret_file: *mut c_char,
    pub agent_port: c_int,
    pub launch_timeout: c_int,
    pub connect_timeout: c_int,
    pub insecure: bool,
    pub priority: c_int,
}

static RAS: AtomicPtr<RasStorage> = AtomicPtr::new(std::ptr::null_mut());
static PLM: AtomicPtr<PlmStorage> = AtomicPtr::new(std::ptr::null_mut());

pub const DEFAULT_SECRET_FILE: &CStr = c"/etc/prrte-k8s/secret/key";
pub const DEFAULT_AGENT_PORT: c_int = 7117;

enum Kind {
    Str,
    Int,
    Bool,
}

fn register(component: *const ffi::pmix_mca_base_component_t, name: &CStr, help: &CStr, kind: Kind, storage: *mut std::ffi::c_void) {
    let ty = match kind {
        Kind::Str => ffi::pmix_mca_base_var_type_t_PMIX_MCA_BASE_VAR_TYPE_STRING,
        Kind::Int => ffi::pmix_mca_base_var_type_t_PMIX_MCA_BASE_VAR_TYPE_INT,
        Kind::Bool => ffi::pmix_mca_base_var_type_t_PMIX_MCA_BASE_VAR_TYPE_BOOL,
    };
    // SAFETY: `component` is one of our static component structs, the strings are static, and
    // `storage` points into leaked storage of the right type that lives for the whole process.
    let rc = unsafe { ffi::pmix_mca_base_component_var_register(component, name.as_ptr(), help.as_ptr(), ty, storage) };
    if rc < 0 {
        crate::shim::output(&format!(
            "prrte-k8s: could not register MCA parameter {} (error {rc})",
            name.to_string_lossy()
        ));
    }
}

/// Register the RAS parameters (called once by PMIx through `register_component_params`).
pub fn register_ras(component: *const ffi::pmix_mca_base_component_t) {
    if !RAS.load(Ordering::Acquire).is_null() {
        return;
    }
    let s = Box::leak(Box::new(RasStorage {
        namespace: std::ptr::null_mut(),
        selector: std::ptr::null_mut(),
        expected_pods: 0,
        timeout: 300,
        slots: c"auto".as_ptr() as *mut c_char,
        kubeconfig: std::ptr::null_mut(),
        self_pod: std::ptr::null_mut(),
        priority: 60,
        bind_none: true,
    }));
    register(component, c"namespace", c"Kubernetes namespace of the job's pods (default: the namespace of the pod prte runs in, from its service-account files, else the kubeconfig context's)", Kind::Str, &mut s.namespace as *mut _ as *mut _);
    register(component, c"selector", c"Label selector of the job's pods, e.g. 'batch.kubernetes.io/job-name=mpi' (default: inferred from the labels of the pod prte runs in: Job, JobSet, Kubeflow job or StatefulSet)", Kind::Str, &mut s.selector as *mut _ as *mut _);
    register(component, c"expected_pods", c"Number of pods to wait for (0 = from the owning Job's parallelism or StatefulSet's replicas when readable, else the pods found)", Kind::Int, &mut s.expected_pods as *mut _ as *mut _);
    register(component, c"timeout", c"Seconds to wait for the expected pods to be Running and Ready before the allocation fails naming the missing pods", Kind::Int, &mut s.timeout as *mut _ as *mut _);
    register(component, c"slots", c"How slots per pod are derived: auto (annotation prrte.k8s.io/slots, else GPUs, else whole CPUs, else 1), annotation, gpu, cpu, one", Kind::Str, &mut s.slots as *mut _ as *mut _);
    register(component, c"kubeconfig", c"Kubeconfig file to use instead of the in-cluster service account (default: in-cluster, else $KUBECONFIG or ~/.kube/config)", Kind::Str, &mut s.kubeconfig as *mut _ as *mut _);
    register(component, c"self_pod", c"Name of the pod prte runs in (default: $POD_NAME, else the hostname)", Kind::Str, &mut s.self_pod as *mut _ as *mut _);
    register(component, c"priority", c"Selection priority of the k8s RAS component when a Kubernetes environment is detected", Kind::Int, &mut s.priority as *mut _ as *mut _);
    register(component, c"bind_none", c"Pods share their node's cores (a CPU request is a share, not a set of cores), so unless a binding policy is given (--bind-to, hwloc_default_binding_policy) ranks are not bound; set false to keep PRRTE's default core binding", Kind::Bool, &mut s.bind_none as *mut _ as *mut _);
    RAS.store(s, Ordering::Release);
}

/// Register the PLM parameters.
pub fn register_plm(component: *const ffi::pmix_mca_base_component_t) {
    if !PLM.load(Ordering::Acquire).is_null() {
        return;
    }
    let s = Box::leak(Box::new(PlmStorage {
        secret_file: DEFAULT_SECRET_FILE.as_ptr() as *mut c_char,
        agent_port: DEFAULT_AGENT_PORT,
        launch_timeout: 60,
        connect_timeout: 10,
        insecure: false,
        priority: 60,
    }));
    register(component, c"secret_file", c"File holding the per-job secret shared with the pods' agents (mounted from a Kubernetes Secret)", Kind::Str, &mut s.secret_file as *mut _ as *mut _);
    register(component, c"agent_port", c"TCP port the prrte-k8s-agent listens on in every pod", Kind::Int, &mut s.agent_port as *mut _ as *mut _);
    register(component, c"launch_timeout", c"Seconds to wait for every launched prted to report back before the launch fails naming the pods that did not", Kind::Int, &mut s.launch_timeout as *mut _ as *mut _);
    register(component, c"connect_timeout", c"Seconds to wait for a connection to a pod's agent", Kind::Int, &mut s.connect_timeout as *mut _ as *mut _);
    register(component, c"insecure", c"Talk to agents without authentication (only for agents started with --insecure-no-auth; never in production)", Kind::Bool, &mut s.insecure as *mut _ as *mut _);
    register(component, c"priority", c"Selection priority of the k8s PLM component when a Kubernetes environment is detected", Kind::Int, &mut s.priority as *mut _ as *mut _);
    PLM.store(s, Ordering::Release);
}

fn opt_string(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: PMIx stores NUL-terminated strings (or NULL) in string parameter storage.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().trim().to_string();
    if s.is_empty() { None } else { Some(s) }
}

/// A snapshot of the RAS parameters (main thread).
#[derive(Debug, Clone, Default)]
pub struct RasParams {
    pub namespace: Option<String>,
    pub selector: Option<String>,
    pub expected_pods: i32,
    pub timeout: i32,
    pub slots: Option<String>,
    pub kubeconfig: Option<String>,
    pub self_pod: Option<String>,
    pub priority: i32,
    pub bind_none: bool,
}

/// A snapshot of the PLM parameters (main thread).
#[derive(Debug, Clone, Default)]
pub struct PlmParams {
    pub secret_file: Option<String>,
    pub agent_port: i32,
    pub launch_timeout: i32,
    pub connect_timeout: i32,
    pub insecure: bool,
    pub priority: i32,
}

pub fn ras() -> RasParams {
    let p = RAS.load(Ordering::Acquire);
    if p.is_null() {
        return RasParams { timeout: 300, priority: 60, bind_none: true, ..Default::default() };
    }
    // SAFETY: the storage was leaked at registration and is only written by PMIx on the main
    // thread during parameter processing; we read it on the main thread too.
    let s = unsafe { &*p };
    RasParams {
        namespace: opt_string(s.namespace),
        selector: opt_string(s.selector),
        expected_pods: s.expected_pods,
        timeout: s.timeout,
        slots: opt_string(s.slots),
        kubeconfig: opt_string(s.kubeconfig),
        self_pod: opt_string(s.self_pod),
        priority: s.priority,
        bind_none: s.bind_none,
    }
}

pub fn plm() -> PlmParams {
    let p = PLM.load(Ordering::Acquire);
    if p.is_null() {
        return PlmParams {
            secret_file: Some(DEFAULT_SECRET_FILE.to_string_lossy().into_owned()),
            agent_port: DEFAULT_AGENT_PORT,
            launch_timeout: 60,
            connect_timeout: 10,
            insecure: false,
            priority: 60,
        };
    }
    // SAFETY: as in `ras()`.
    let s = unsafe { &*p };
    PlmParams {
        secret_file: opt_string(s.secret_file),
        agent_port: s.agent_port,
        launch_timeout: s.launch_timeout,
        connect_timeout: s.connect_timeout,
        insecure: s.insecure,
        priority: s.priority,
    }
}
