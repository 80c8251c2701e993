//! The shared library PRRTE loads as `prte_mca_ras_k8s.so` and `prte_mca_plm_k8s.so`.
//!
//! Only glue lives here: the MCA component structs, PRRTE's callbacks, and moving results onto
//! PRRTE's event thread. Kubernetes discovery and the agent protocol are in the `prrte-k8s`
//! crate. All `unsafe` of the project is in this crate, each block with its justification.
#![allow(clippy::missing_safety_doc)]
pub mod abi;
pub mod component;
pub mod ffi;
pub mod mainloop;
pub mod params;
pub mod plm;
pub mod pods;
pub mod prrte;
pub mod prted_args;
pub mod ras;
pub mod shim;
pub mod version_guard;
