//! The sandbox cluster: a Kubernetes API server (real Kubernetes JSON over TLS with bearer
//! tokens) and pods that are Linux network, UTS, mount and PID namespaces on a bridge.
#![forbid(unsafe_code)]

pub mod api;
pub mod app_images;
pub mod batch_job;
pub mod channel_cost;
pub mod cli;
pub mod cluster;
pub mod cutoff;
pub mod harness;
pub mod images;
pub mod kubectl;
pub mod mpijob;
pub mod netpol;
pub mod nsexec;
pub mod runtime;
pub mod sshd;
