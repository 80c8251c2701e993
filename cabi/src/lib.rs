//! The shared library PRRTE loads as `prte_mca_ras_k8s.so` and `prte_mca_plm_k8s.so`.
//!
//! Only glue lives here: the MCA component structs, PRRTE's callbacks, and moving results onto
//! PRRTE's event thread. Kubernetes discovery and the agent protocol are in the `prrte-k8s`
//! crate. All `unsafe` of the project is in this crate, each block with its justification.
//!
//! Layout, as PRRTE lays out its own components: `ras/` and `plm/` each hold the component
//! (registration of its MCA parameters and the selection query, `component.rs`) apart from the
//! module functions PRRTE calls once the component is selected (`module.rs`); the RAS module's
//! `modify` has a file per verb under `ras/modify/`. Around them: `component` (the component
//! struct and the query both components answer the same way), `params` (the MCA parameter
//! tables), [`ffi`] (bindgen's view of PRRTE and of our C shim), `shim` (safe wrappers of the
//! shim), `prrte` (typed access to PRRTE objects), `mainloop` (waking PRRTE's event loop from our
//! threads), `boundary` (the panic boundary, and the worker threads' top), `pointers` (the
//! pointer conversions, named) and `cstr` (C string helpers). `dvm` keeps a DVM usable with a
//! site's defaults (launches on the daemons' main threads, jobs of departed tools ended). `abi`
//! holds the functions exported to C besides the component structs.
//!
//! Everything is internal to the crate but what PRRTE and C see: the exported symbols (the two
//! component structs, `prrte_k8s_ras_module`, `prrte_k8s_plm_module`) and [`ffi`].
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
mod abi;
mod boundary;
mod component;
mod cstr;
mod dvm;
pub mod ffi;
mod logging;
mod mainloop;
mod params;
mod plm;
mod pods;
mod pointers;
mod prrte;
mod ras;
mod shim;
mod version_guard;
