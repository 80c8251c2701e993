//! The sandbox cluster: a Kubernetes API server (real Kubernetes JSON over TLS with bearer
//! tokens) and pods that are Linux network, UTS, mount and PID namespaces on a bridge.
//!
//! `api` is the API server; `cluster` a whole cluster around it, with its controllers and a
//! kubelet; `runtime` the container runtime the kubelet drives (the pod network `podnet`, image
//! containers); `netpol` NetworkPolicy enforcement on that network; `images` and `app_images`
//! the local images; `cli` the `prrte-k8s-sandbox` command. `harness` is what the end-to-end
//! tests need besides the cluster, `bench` what the benchmarks measure prrte-k8s against, `forge`
//! a hostile peer on a PRRTE DVM's out-of-band network.
#![forbid(unsafe_code)]

pub mod api;
pub mod app_images;
pub mod bench;
pub mod cli;
pub mod cluster;
pub mod cutoff;
pub mod forge;
pub mod harness;
pub mod images;
pub mod netpol;
pub mod runtime;
