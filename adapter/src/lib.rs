//! prrte-k8s: Kubernetes as a resource manager for PRRTE.
//!
//! Everything here is plain safe Rust and testable without PRRTE: pod discovery for the RAS
//! component, the in-pod agent and its wire protocol, and the launcher side the PLM component
//! drives. The `cabi` crate wraps this for PRRTE.
#![forbid(unsafe_code)]

pub mod agent;
pub mod bundle;
pub mod discovery;
pub mod hostfile;
pub mod launch;
pub mod manifest;
pub mod protocol;
pub mod rsh;
pub mod runtime;
pub mod settings;
pub mod text;
