//! MCA parameters, registered through PMIx's MCA variable system so that `prte_info --param ras
//! k8s` / `--param plm k8s` list them with their help text, and set like any other parameter
//! (`--prtemca ras_k8s_selector app=x`, `PRTE_MCA_ras_k8s_selector=...`, param files).
//!
//! Each component's parameters are one table ([`RAS_PARAMS`], [`PLM_PARAMS`]): name, help text
//! and the field of the snapshot ([`RasParams`], [`PlmParams`]) it fills. The defaults are
//! defined once, in [`RasParams::default`] and [`PlmParams::default`]; they seed the storage
//! PMIx writes into and are what a snapshot holds before registration.
//!
//! PMIx keeps pointers to the storage, so it lives for the life of the process (leaked once).
use crate::cstr::cstring;
use crate::{ffi, shim};
use prrte_k8s::discovery;
use prrte_k8s::protocol::{DEFAULT_AGENT_PORT, DEFAULT_SECRET_FILE};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// A snapshot of the RAS parameters (main thread).
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl Default for RasParams {
    fn default() -> Self {
        RasParams {
            namespace: None,
            selector: None,
            expected_pods: 0,
            timeout: discovery::DEFAULT_TIMEOUT.as_secs() as i32,
            slots: Some("auto".into()),
            kubeconfig: None,
            self_pod: None,
            priority: 60,
            bind_none: true,
        }
    }
}

/// A snapshot of the PLM parameters (main thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlmParams {
    pub secret_file: Option<String>,
    pub agent_port: i32,
    pub launch_timeout: i32,
    pub connect_timeout: i32,
    pub insecure: bool,
    pub priority: i32,
}

impl Default for PlmParams {
    fn default() -> Self {
        PlmParams {
            secret_file: Some(DEFAULT_SECRET_FILE.into()),
            agent_port: c_int::from(DEFAULT_AGENT_PORT),
            launch_timeout: 60,
            connect_timeout: 10,
            insecure: false,
            priority: 60,
        }
    }
}

/// Where a parameter's value lives in a snapshot.
pub enum Field<P> {
    Str(fn(&mut P) -> &mut Option<String>),
    Int(fn(&mut P) -> &mut i32),
    Bool(fn(&mut P) -> &mut bool),
}

/// One MCA parameter of a component: `<framework>_k8s_<name>`.
pub struct Param<P> {
    pub name: &'static CStr,
    pub help: &'static CStr,
    pub field: Field<P>,
}

/// The `ras_k8s_*` parameters.
pub static RAS_PARAMS: [Param<RasParams>; 9] = [
    Param {
        name: c"namespace",
        help: c"Kubernetes namespace of the job's pods (default: the namespace of the pod prte runs in, from its service-account files, else the kubeconfig context's)",
        field: Field::Str(|p| &mut p.namespace),
    },
    Param {
        name: c"selector",
        help: c"Label selector of the job's pods, e.g. 'batch.kubernetes.io/job-name=mpi' (default: inferred from the labels of the pod prte runs in: Job, JobSet, Kubeflow job or StatefulSet)",
        field: Field::Str(|p| &mut p.selector),
    },
    Param {
        name: c"expected_pods",
        help: c"Number of pods to wait for (0 = from the owning Job's parallelism or StatefulSet's replicas when readable, else the pods found)",
        field: Field::Int(|p| &mut p.expected_pods),
    },
    Param {
        name: c"timeout",
        help: c"Seconds to wait for the expected pods to be Running and Ready before the allocation fails naming the missing pods",
        field: Field::Int(|p| &mut p.timeout),
    },
    Param {
        name: c"slots",
        help: c"How slots per pod are derived: auto (annotation prrte-k8s.io/slots, or the deprecated prrte.k8s.io/slots, else GPUs, else whole CPUs, else 1), annotation, gpu, cpu, one",
        field: Field::Str(|p| &mut p.slots),
    },
    Param {
        name: c"kubeconfig",
        help: c"Kubeconfig file to use instead of the in-cluster service account (default: the files in $KUBECONFIG, else in-cluster, else ~/.kube/config)",
        field: Field::Str(|p| &mut p.kubeconfig),
    },
    Param {
        name: c"self_pod",
        help: c"Name of the pod prte runs in (default: $POD_NAME, else the hostname)",
        field: Field::Str(|p| &mut p.self_pod),
    },
    Param {
        name: c"priority",
        help: c"Selection priority of the k8s RAS component when a Kubernetes environment is detected",
        field: Field::Int(|p| &mut p.priority),
    },
    Param {
        name: c"bind_none",
        help: c"Pods share their node's cores (a CPU request is a share, not a set of cores), so unless a binding policy is given (--bind-to, hwloc_default_binding_policy) ranks are not bound; set false to keep PRRTE's default core binding",
        field: Field::Bool(|p| &mut p.bind_none),
    },
];

/// The `plm_k8s_*` parameters.
pub static PLM_PARAMS: [Param<PlmParams>; 6] = [
    Param {
        name: c"secret_file",
        help: c"File holding the per-job secret shared with the pods' agents (mounted from a Kubernetes Secret)",
        field: Field::Str(|p| &mut p.secret_file),
    },
    Param {
        name: c"agent_port",
        help: c"TCP port the prrte-k8s-agent listens on in every pod",
        field: Field::Int(|p| &mut p.agent_port),
    },
    Param {
        name: c"launch_timeout",
        help: c"Seconds to wait for every launched prted to report back before the launch fails naming the pods that did not",
        field: Field::Int(|p| &mut p.launch_timeout),
    },
    Param {
        name: c"connect_timeout",
        help: c"Seconds to wait for a connection to a pod's agent",
        field: Field::Int(|p| &mut p.connect_timeout),
    },
    Param {
        name: c"insecure",
        help: c"Talk to agents without authentication (only for agents started with --insecure-no-auth; never in production)",
        field: Field::Bool(|p| &mut p.insecure),
    },
    Param {
        name: c"priority",
        help: c"Selection priority of the k8s PLM component when a Kubernetes environment is detected",
        field: Field::Int(|p| &mut p.priority),
    },
];

/// The storage PMIx writes one parameter's value into (C types, as PMIx expects them).
#[repr(C)]
union Slot {
    string: *mut c_char,
    int: c_int,
    boolean: bool,
}

/// A component's registered storage: one slot per entry of its table, same order.
struct Storage(&'static mut [Slot]);

// SAFETY: the slots are written by PMIx and read by `snapshot`, both on PRRTE's main thread only;
// the pointer itself is set once (OnceLock) and never changes.
unsafe impl Send for Storage {}
// SAFETY: as above.
unsafe impl Sync for Storage {}

static RAS: OnceLock<Storage> = OnceLock::new();
static PLM: OnceLock<Storage> = OnceLock::new();

/// Registers every parameter of `table` for `component`, seeded with `defaults`; the storage is
/// leaked (PMIx keeps pointers into it).
///
/// # Safety
///
/// `component` points to one of our static component structs; main thread.
unsafe fn register<P>(
    component: *const ffi::pmix_mca_base_component_t,
    table: &[Param<P>],
    mut defaults: P,
) -> Storage {
    let slots: &'static mut [Slot] = Box::leak(
        table
            .iter()
            .map(|param| match &param.field {
                Field::Str(f) => Slot {
                    string: f(&mut defaults)
                        .as_deref()
                        .map_or(std::ptr::null_mut(), |s| cstring(s).into_raw()),
                },
                Field::Int(f) => Slot {
                    int: *f(&mut defaults),
                },
                Field::Bool(f) => Slot {
                    boolean: *f(&mut defaults),
                },
            })
            .collect::<Box<[Slot]>>(),
    );
    for (param, slot) in table.iter().zip(slots.iter_mut()) {
        let ty = match param.field {
            Field::Str(_) => ffi::pmix_mca_base_var_type_t_PMIX_MCA_BASE_VAR_TYPE_STRING,
            Field::Int(_) => ffi::pmix_mca_base_var_type_t_PMIX_MCA_BASE_VAR_TYPE_INT,
            Field::Bool(_) => ffi::pmix_mca_base_var_type_t_PMIX_MCA_BASE_VAR_TYPE_BOOL,
        };
        let storage = slot as *mut Slot as *mut c_void;
        // SAFETY: `component` is one of our static component structs (our caller's promise), the
        // strings are static, and `storage` points to a leaked slot that lives for the whole process and holds the
        // C type PMIx expects for `ty` (a C string pointer, an int or a bool at its start).
        let rc = unsafe {
            ffi::pmix_mca_base_component_var_register(
                component,
                param.name.as_ptr(),
                param.help.as_ptr(),
                ty,
                storage,
            )
        };
        if rc < 0 {
            shim::output(&format!(
                "prrte-k8s: could not register MCA parameter {} (error {rc})",
                param.name.to_string_lossy()
            ));
        }
    }
    Storage(slots)
}

/// The values in `storage` (or the defaults if nothing was registered) as a snapshot.
fn snapshot<P: Default>(storage: Option<&Storage>, table: &[Param<P>]) -> P {
    let mut out = P::default();
    let Some(storage) = storage else {
        return out;
    };
    for (param, slot) in table.iter().zip(storage.0.iter()) {
        match &param.field {
            // SAFETY: string slots hold NULL or a NUL-terminated string (ours, or PMIx's copy of
            // a value that was set), written on the main thread we read on.
            Field::Str(f) => *f(&mut out) = opt_string(unsafe { slot.string }),
            // SAFETY: an int slot was initialised as an int and PMIx writes an int.
            Field::Int(f) => *f(&mut out) = unsafe { slot.int },
            // SAFETY: a bool slot was initialised as a bool and PMIx writes a bool.
            Field::Bool(f) => *f(&mut out) = unsafe { slot.boolean },
        }
    }
    out
}

fn opt_string(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: PMIx stores NUL-terminated strings (or NULL) in string parameter storage.
    let s = unsafe { CStr::from_ptr(p) }
        .to_string_lossy()
        .trim()
        .to_string();
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

/// Register the RAS parameters (called once by PMIx through `register_component_params`).
///
/// # Safety
///
/// `component` points to the RAS component struct; main thread.
pub unsafe fn register_ras(component: *const ffi::pmix_mca_base_component_t) {
    // SAFETY: as promised by our caller.
    RAS.get_or_init(|| unsafe { register(component, &RAS_PARAMS, RasParams::default()) });
}

/// Register the PLM parameters.
///
/// # Safety
///
/// `component` points to the PLM component struct; main thread.
pub unsafe fn register_plm(component: *const ffi::pmix_mca_base_component_t) {
    // SAFETY: as promised by our caller.
    PLM.get_or_init(|| unsafe { register(component, &PLM_PARAMS, PlmParams::default()) });
}

/// The RAS parameters as set now (the defaults before registration).
pub fn ras() -> RasParams {
    snapshot(RAS.get(), &RAS_PARAMS)
}

/// The PLM parameters as set now (the defaults before registration).
pub fn plm() -> PlmParams {
    snapshot(PLM.get(), &PLM_PARAMS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unregistered_snapshots_are_the_defaults() {
        assert_eq!(ras(), RasParams::default());
        assert_eq!(plm(), PlmParams::default());
        assert_eq!(plm().secret_file.as_deref(), Some(DEFAULT_SECRET_FILE));
        assert_eq!(plm().agent_port, 7117);
        assert_eq!(ras().timeout, 300);
    }

    #[test]
    fn tables_name_each_parameter_once() {
        let mut ras: Vec<_> = RAS_PARAMS.iter().map(|p| p.name).collect();
        ras.sort();
        ras.dedup();
        assert_eq!(ras.len(), RAS_PARAMS.len());
        let mut plm: Vec<_> = PLM_PARAMS.iter().map(|p| p.name).collect();
        plm.sort();
        plm.dedup();
        assert_eq!(plm.len(), PLM_PARAMS.len());
    }
}
