//! The injected runtime: any image runs the job, with nothing of ours written into it and no
//! sshd. An init container (`prrte-k8s-install`) copies the runtime bundle of the small inject
//! image (static `prrte-k8s`, `prrte-k8s-agent`, `prrte-k8s-rsh`, the k8s components for PRRTE,
//! the site parameter file) into an emptyDir; the application container mounts it read-only
//! at [`RUNTIME_DIR`] and runs the agent from there with `--mpi`, so that the agent finds the
//! image's own MPI (its prted, orted or Hydra proxy) instead of being told `--prted`.
//!
//! The paths and the command are the contract with the inject image and the agent: the image
//! holds the bundle at [`BUNDLE_DIR`] and its `prrte-k8s install-runtime --to DIR` copies it.

use serde_json::{json, Value};

/// The inject image `make image` builds.
pub const INJECT_IMAGE: &str = "localhost/prrte-k8s-inject:latest";
/// Where the inject image holds the bundle.
pub(crate) const BUNDLE_DIR: &str = "/opt/prrte-k8s-bundle";
/// Where the bundle is copied to and mounted in every container of the pod.
pub const RUNTIME_DIR: &str = "/opt/prrte-k8s";
/// The emptyDir the bundle is copied into.
pub(crate) const RUNTIME_VOLUME: &str = "prrte-k8s-runtime";
/// The init container that copies it.
pub(crate) const INSTALL_CONTAINER: &str = "prrte-k8s-install";
/// The agent's option naming the image's MPI (`auto`: the agent looks for one).
pub(crate) const MPI_FLAG: &str = "--mpi";

/// The agent in the copied bundle.
pub fn agent() -> String {
    format!("{RUNTIME_DIR}/bin/prrte-k8s-agent")
}

/// The init container: `prrte-k8s install-runtime --to RUNTIME_DIR` from the inject image, as
/// the application's uid, at the restricted level, with a small fixed share of the node.
pub(crate) fn install_container(
    image: &str,
    pull_policy: Option<&str>,
    uid: u32,
    gid: Option<u32>,
) -> Value {
    let mut security = json!({
        "runAsNonRoot": true,
        "runAsUser": uid,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if let Some(g) = gid {
        security["runAsGroup"] = json!(g);
    }
    // Requests equal to limits, so that the pod keeps a Guaranteed QoS class where the
    // application container has one.
    let share = json!({"cpu": "50m", "memory": "32Mi"});
    let mut c = json!({
        "name": INSTALL_CONTAINER,
        "image": image,
        "command": [format!("{BUNDLE_DIR}/bin/prrte-k8s"), "install-runtime", "--to", RUNTIME_DIR],
        "volumeMounts": [mount(false)],
        "resources": {"requests": share, "limits": share},
        "securityContext": security,
    });
    if let Some(p) = pull_policy {
        c["imagePullPolicy"] = json!(p);
    }
    c
}

/// The runtime's volume.
pub fn volume() -> Value {
    json!({"name": RUNTIME_VOLUME, "emptyDir": {}})
}

/// Its mount (read-only in the application container).
pub fn mount(read_only: bool) -> Value {
    let mut m = json!({"name": RUNTIME_VOLUME, "mountPath": RUNTIME_DIR});
    if read_only {
        m["readOnly"] = json!(true);
    }
    m
}
