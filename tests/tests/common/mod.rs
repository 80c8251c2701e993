//! What the integration tests share: the end-to-end tests' MPI job fixture, which lives in the
//! library (`sandbox::harness::mpijob`, shared with the launch benchmark), and the API tests'
//! clients and helpers (`api`), and the MPIJob controller's sandbox (`controller`). Each test uses only some of it.
#![allow(unused_imports, dead_code)]

pub mod api;
pub mod controller;

pub use sandbox::harness::mpijob::*;
