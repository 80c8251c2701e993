//! The end-to-end tests' MPI job fixture lives in the library (`sandbox::harness::mpijob`), shared with
//! the launch benchmark.
#![allow(unused_imports)]
pub use sandbox::harness::mpijob::*;
