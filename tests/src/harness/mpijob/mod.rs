//! An MPI job in the sandbox: pods running the prrte-k8s agent, the launcher's RBAC from
//! prrte-config/k8s/rbac.yaml, and helpers to run PRRTE with the k8s components. Used by the
//! end-to-end tests and the launch benchmark.

mod elastic;
mod job;
mod output;
mod pod;
mod setup;
mod workflow;

pub use elastic::ElasticJob;
pub use job::{DvmCycle, Job};
pub use output::{allreduce_lines, script, text, wait_for_text};
pub use pod::JobSpec;
pub use setup::{k8s_args, rbac_yaml, repo, K8S, NS, ROLEBINDING, SERVICE_ACCOUNT};
pub use workflow::{python_wheel, results_by_index};
