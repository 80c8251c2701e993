//! RAS `k8s`: PRRTE's allocation comes from the job's pods.
//!
//! [`component`] registers the `ras_k8s_*` parameters and answers PRRTE's selection query;
//! [`module`] holds the module functions PRRTE calls once the component is selected, in the
//! module layout ([`layout`]) of the PRRTE it is loaded into.
pub(crate) mod component;
pub(crate) mod layout;
#[cfg(prrte_ras_modify)]
pub(crate) mod modify;
pub(crate) mod module;
