//! Kubeflow Trainer's TrainJobs (trainer.kubeflow.org/v1alpha1, v2.3.0) on a runtime of
//! prrte-k8s: `types` the API read (pure), `ssh` the key pair of the job's ssh-auth Secret,
//! `render` the objects Trainer's controller makes for a TrainJob on an MPI runtime (pure),
//! `status` the status it writes (pure). `prrte-k8s controller --trainjobs` applies them.
//!
//! A runtime is prrte-k8s's when its name starts with [`OURS_PREFIX`] (`prrte-k8s-openmpi`,
//! `prrte-k8s-mpich`, ...): the TrainJob's `runtimeRef.name` says so without reading it.

pub mod render;
pub mod ssh;
pub mod status;
pub mod types;

pub use render::{render, Rendered};
pub use types::{Runtime, TrainJob};

/// The name prefix of prrte-k8s's runtimes.
pub const OURS_PREFIX: &str = "prrte-k8s-";

/// Whether `job` runs on a runtime of prrte-k8s.
pub fn is_ours(job: &TrainJob) -> bool {
    job.spec.runtime_ref.name.starts_with(OURS_PREFIX)
        && job
            .spec
            .runtime_ref
            .api_group
            .as_deref()
            .is_none_or(|g| g == types::GROUP)
}
