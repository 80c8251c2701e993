//! What end-to-end tests (and the launch benchmark) need besides the cluster: the PRRTE
//! install, the built components and binaries, MPI test programs (`install`), a private
//! directory (and TMPDIR) per test (`test_dir`), processes that are killed when a test ends,
//! however it ends (`process`); kubectl against a sandbox cluster (`kubectl`), an MPI job of
//! agent pods (`mpijob`), a batch job applied from `prrte-k8s manifest` (`batch_job`) and
//! `prrte-k8s controller` as a process against a sandbox API server (`controller`), and
//! Kubeflow Trainer's CRDs, downloaded by pinned URL and checksum into a cache (`trainer`).

pub mod batch_job;
pub mod controller;
mod install;
pub mod kubectl;
pub mod mpijob;
mod process;
mod test_dir;
pub mod trainer;

pub use install::{
    component_dir, mpi_pmix_program, mpi_program, pmix_program, prefix, require_prrte, target_dir,
    venv, workspace_bin,
};
pub use process::{pids_named, run_with_timeout, Guarded, StopOnDrop};
pub use test_dir::{unique, wait_file, TestDir};
