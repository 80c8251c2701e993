//! What the integration tests share: the end-to-end tests' MPI job fixture, which lives in the
//! library (`sandbox::harness::mpijob`, shared with the launch benchmark), the API tests'
//! clients and helpers (`api`), the MPIJob controller's sandbox (`controller`), a sandbox
//! cluster for JobSets run with the inject image (`jobset`), and one with Kubeflow Trainer's
//! CRDs, a runtime and `controller --trainjobs` for TrainJobs (`trainer`). Each test uses only
//! some of it.
#![allow(unused_imports, dead_code)]

pub mod api;
pub mod controller;
pub mod jobset;
pub mod trainer;

pub use sandbox::harness::mpijob::*;
