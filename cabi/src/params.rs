//! MCA parameters, registered through PMIx's MCA variable system so that `prte_info --param ras
//! k8s` / `--param plm k8s` list them with their help text, and set like any other parameter
//! (`--prtemca ras_k8s_selector app=x`, `PRTE_MCA_ras_k8s_selector=...`, param files).
//!
//! Each component's parameters are one table, declared with its snapshot type in
//! `prrte_k8s::settings::mca` ([`McaParams::PARAMS`] of [`RasParams`] and [`PlmParams`]): the
//! registry entry of each (name, help text, default) and the field of the snapshot it fills.
//! The defaults ([`RasParams::default`], [`PlmParams::default`], from the registry), with the
//! values of a setting's own variables applied (`PRRTE_K8S_AGENT_PORT`,
//! `PRRTE_K8S_SECRET_FILE`), seed the storage PMIx writes into; a snapshot holds the plain
//! defaults before registration.
//!
//! PMIx keeps pointers to the storage, so it lives for the life of the process (leaked once).
use crate::cstr::cstring;
use crate::{ffi, shim};
use prrte_k8s::settings::{Field, McaParams, Param};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

pub(crate) use prrte_k8s::settings::mca::{PlmParams, RasParams};

/// A string PMIx may keep for the life of the process.
fn leaked(s: &str) -> &'static CStr {
    Box::leak(cstring(s).into_boxed_c_str())
}

/// The parameter's name within its component (`timeout`) and its help for `prte_info`.
fn name_and_help<P>(param: &Param<P>) -> (&'static CStr, &'static CStr) {
    let name = param.setting.mca.map_or("", |m| m.name);
    (leaked(name), leaked(&param.setting.help_with_default()))
}

/// The defaults with the values of the setting's own variables (`PRRTE_K8S_AGENT_PORT`, ...)
/// applied: they are the default under PMIx's `--prtemca`, `PRTE_MCA_*` and parameter files.
fn seeded<P: McaParams>(env: &dyn Fn(&str) -> Option<String>) -> P {
    let mut defaults = P::default();
    for param in P::PARAMS {
        let s = param.setting;
        let Some((var, value)) = s.env.iter().find_map(|v| env(v).map(|x| (*v, x))) else {
            continue;
        };
        let applied = match &param.field {
            Field::Str(f) => s
                .parse(&value)
                .map(|_| *f(&mut defaults) = Some(value.clone())),
            Field::Int(f) => s.mca_int(&value).map(|n| *f(&mut defaults) = n),
            Field::Bool(f) => s.mca_bool(&value).map(|b| *f(&mut defaults) = b),
        };
        if let Err(e) = applied {
            shim::output(&format!("prrte-k8s: ${var} ignored: {e}"));
        }
    }
    defaults
}

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

/// Registers every parameter of `P` for `component`, seeded with its defaults; the storage is
/// leaked (PMIx keeps pointers into it).
///
/// # Safety
///
/// `component` points to one of our static component structs; main thread.
unsafe fn register<P: McaParams>(component: *const ffi::pmix_mca_base_component_t) -> Storage {
    let table = P::PARAMS;
    let mut defaults: P = seeded(&|k| std::env::var(k).ok());
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
        let storage: *mut c_void = std::ptr::from_mut(slot).cast();
        let (name, help) = name_and_help(param);
        // SAFETY: `component` is one of our static component structs (our caller's promise), the
        // strings are static, and `storage` points to a leaked slot that lives for the whole process and holds the
        // C type PMIx expects for `ty` (a C string pointer, an int or a bool at its start).
        let rc = unsafe {
            ffi::pmix_mca_base_component_var_register(
                component,
                name.as_ptr(),
                help.as_ptr(),
                ty,
                storage,
            )
        };
        if rc < 0 {
            shim::output(&format!(
                "prrte-k8s: could not register MCA parameter {} (error {rc})",
                param.setting.name()
            ));
        }
    }
    Storage(slots)
}

/// The values in `storage` (or the defaults if nothing was registered) as a snapshot.
fn snapshot<P: McaParams>(storage: Option<&Storage>) -> P {
    let mut out = P::default();
    let Some(storage) = storage else {
        return out;
    };
    for (param, slot) in P::PARAMS.iter().zip(storage.0.iter()) {
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
pub(crate) unsafe fn register_ras(component: *const ffi::pmix_mca_base_component_t) {
    // SAFETY: as promised by our caller.
    RAS.get_or_init(|| unsafe { register::<RasParams>(component) });
}

/// Register the PLM parameters.
///
/// # Safety
///
/// `component` points to the PLM component struct; main thread.
pub(crate) unsafe fn register_plm(component: *const ffi::pmix_mca_base_component_t) {
    // SAFETY: as promised by our caller.
    PLM.get_or_init(|| unsafe { register::<PlmParams>(component) });
}

/// The RAS parameters as set now (the defaults before registration).
pub(crate) fn ras() -> RasParams {
    snapshot(RAS.get())
}

/// The PLM parameters as set now (the defaults before registration).
pub(crate) fn plm() -> PlmParams {
    snapshot(PLM.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unregistered_snapshots_are_the_defaults() {
        assert_eq!(ras(), RasParams::default());
        assert_eq!(plm(), PlmParams::default());
        assert_eq!(
            plm().secret_file.as_deref(),
            Some(prrte_k8s::protocol::DEFAULT_SECRET_FILE)
        );
        assert_eq!(plm().agent_port, 7117);
        assert_eq!(ras().timeout, 300);
    }

    #[test]
    fn names_and_help_come_from_the_registry() {
        let (name, help) = name_and_help(&RasParams::PARAMS[6]);
        assert_eq!(name, c"self_pod");
        assert!(
            help.to_str().unwrap().contains("[default: $POD_NAME"),
            "{help:?}"
        );
    }

    #[test]
    fn own_variables_seed_the_defaults() {
        let env = |k: &str| (k == "PRRTE_K8S_AGENT_PORT").then(|| "9007".to_string());
        let p: PlmParams = seeded(&env);
        assert_eq!(p.agent_port, 9007);
        assert_eq!(p.secret_file, PlmParams::default().secret_file);
        let bad = |k: &str| (k == "PRRTE_K8S_AGENT_PORT").then(|| "x".to_string());
        assert_eq!(seeded::<PlmParams>(&bad), PlmParams::default());
    }
}
