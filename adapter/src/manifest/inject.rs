//! The injected runtime: any image runs the job, with nothing of ours written into it and no
//! sshd. An init container (`prrte-k8s-install`) copies the runtime bundle of the small inject
//! image (static `prrte-k8s`, `prrte-k8s-agent`, `prrte-k8s-rsh`, the k8s components for PRRTE,
//! the site parameter file) into an emptyDir; the application container mounts it read-only
//! at [`RUNTIME_DIR`] and runs the agent from there with `--mpi`, so that the agent finds the
//! image's own MPI (its prted, orted or Hydra proxy) instead of being told `--prted`.
//!
//! The paths and the command are the contract with the inject image and the agent: the image
//! holds the bundle at [`BUNDLE_DIR`] and its `prrte-k8s install-runtime --to DIR` copies it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::layout::restricted_container;

/// The inject image `make image` builds.
pub const INJECT_IMAGE: &str = "localhost/prrte-k8s-inject:latest";
/// Where the inject image holds the bundle.
pub(crate) const BUNDLE_DIR: &str = "/opt/prrte-k8s-bundle";
/// Where the bundle is copied to and mounted in every container of the pod.
pub(crate) const RUNTIME_DIR: &str = "/opt/prrte-k8s";
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
) -> Container {
    // Requests equal to limits, so that the pod keeps a Guaranteed QoS class where the
    // application container has one.
    let share = BTreeMap::from([
        ("cpu".to_string(), Quantity("50m".into())),
        ("memory".to_string(), Quantity("32Mi".into())),
    ]);
    Container {
        name: INSTALL_CONTAINER.into(),
        image: Some(image.into()),
        image_pull_policy: pull_policy.map(String::from),
        command: Some(vec![
            format!("{BUNDLE_DIR}/bin/prrte-k8s"),
            "install-runtime".into(),
            "--to".into(),
            RUNTIME_DIR.into(),
        ]),
        volume_mounts: Some(vec![mount(false)]),
        resources: Some(ResourceRequirements {
            requests: Some(share.clone()),
            limits: Some(share),
            claims: None,
        }),
        security_context: Some(restricted_container(uid, gid)),
        ..Default::default()
    }
}

/// The runtime's volume.
pub fn volume() -> Volume {
    Volume {
        name: RUNTIME_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// Its mount (read-only in the application container).
pub fn mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: RUNTIME_VOLUME.into(),
        mount_path: RUNTIME_DIR.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}
