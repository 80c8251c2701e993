//! The container runtime the kubelet drives, as a node's runtime and its network plugin are:
//! pods as Linux namespaces on a bridge, their containers' processes and the cleanup of what
//! they leave (`podnet`), and containers in an image's root filesystem (`container`, with
//! `prrte-k8s-sandbox-init`, PID 1 of such a container).

pub mod container;
pub mod podnet;
