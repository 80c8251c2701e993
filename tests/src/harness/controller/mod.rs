//! `prrte-k8s controller` as a process against a sandbox API server (no kubelet, no network:
//! what the controller does to the API is all there is), with a user of its own so that its
//! requests can be told from the test's, and what it costs (`/proc`): CPU seconds, RSS and peak
//! RSS (`process`). `scale` runs MPIJobs in bulk through it.

pub mod process;
pub mod scale;

pub use process::{
    controller_kubeconfig, controller_requests, create_mpijob, get, mpijob, register_crd, usage,
    verb, ControllerProcess, Usage, CONTROLLER_USER, MANAGED_BY,
};
