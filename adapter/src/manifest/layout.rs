//! What every pod of a rendered job shares: the pinned ports (so that the NetworkPolicy can
//! name them), the container's name, and the volumes the agent needs, with their mount paths.
//! Ports and paths the agent has its own settings for come from the registry
//! ([`crate::settings`]).

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

use crate::settings::{agent, mca};

/// The agent's port (`plm_k8s_agent_port`, the agent's `--port`).
pub const AGENT_PORT: u16 = agent::PORT.default_u64() as u16;
/// The agent's health endpoint (readinessProbe).
pub(crate) const HEALTH_PORT: u16 = crate::protocol::DEFAULT_HEALTH_PORT;
/// The DVM head's PMIx tool port (interactive mode; the agent's `--tool-port`).
pub(crate) const TOOL_PORT: u16 = agent::TOOL_PORT.default_u64() as u16;
/// PRRTE's OOB listener in every pod (`PRTE_MCA_oob_tcp_dynamic_ipv4_ports`): one prte or
/// prted per pod, so one port.
///
/// Pinned with the *dynamic* range, not `oob_tcp_static_ipv4_ports`: with static ports a
/// PRRTE 3.0's prted first sends a warm-up message to its parent and, on the parent's node
/// report, calls its PLM's `remote_spawn`; a prted started by an agent has no PLM (none is
/// selected unless `PRTE_MCA_plm` is set), so that call is through a null pointer and every
/// prted dies with SIGSEGV. A one-port dynamic range binds the same single port and keeps the
/// normal report path (each daemon sends its own URI).
pub(crate) const OOB_PORT: u16 = 7121;
/// First port of Open MPI's TCP BTL (`OMPI_MCA_btl_tcp_port_min_v4`).
pub(crate) const BTL_PORT_MIN: u16 = 7200;
/// Number of ports of Open MPI's TCP BTL from [`BTL_PORT_MIN`] (`btl_tcp_port_range_v4`): one
/// per MPI process in a pod.
pub(crate) const BTL_PORT_RANGE: u16 = 100;

/// The name of the container in every pod.
pub const CONTAINER: &str = "mpi";

/// Where the Secret is mounted: the directory of the agent's and the k8s PLM's default secret
/// file (`plm_k8s_secret_file`).
pub(crate) const SECRET_DIR: &str = parent(mca::SECRET_FILE.default);
/// Where the agent publishes the DVM URI: the directory of its default `--dvm-uri-file`.
pub(crate) const RUN_DIR: &str = parent(agent::DVM_URI_FILE.default);
/// PRRTE/PMIx session directories (the pods' `TMPDIR`).
pub(crate) const TMP_DIR: &str = "/tmp";
/// Open MPI's shared memory.
pub(crate) const SHM_DIR: &str = "/dev/shm";
/// Where in-cluster clients (discovery, kube-rs) find the service account's token, the
/// cluster's CA and the namespace.
pub(crate) const API_ACCESS_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The container-level seccomp profile every container of ours runs under.
fn runtime_default() -> Option<SeccompProfile> {
    Some(SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    })
}

/// A container of ours at the restricted pod security level: as `uid` (and `gid`), no root, no
/// privilege escalation, a read-only root file system, no capabilities, the runtime's seccomp
/// profile.
pub(crate) fn restricted_container(uid: u32, gid: Option<u32>) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid.into()),
        run_as_group: gid.map(i64::from),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: runtime_default(),
        ..Default::default()
    }
}

/// A pod of ours at the restricted pod security level: as `uid`, with `uid` as its group and
/// its volumes' group, no root, the runtime's seccomp profile.
pub(crate) fn restricted_pod(uid: u32) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid.into()),
        run_as_group: Some(uid.into()),
        fs_group: Some(uid.into()),
        seccomp_profile: runtime_default(),
        ..Default::default()
    }
}

/// What one of the pod's own volumes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The job's Secret (mounted read-only).
    Secret,
    /// An emptyDir on the node's disk.
    Disk,
    /// An emptyDir in memory.
    Memory,
    /// The service account's token, the cluster's CA and the namespace (a projected volume,
    /// mounted read-only into the agent's container alone).
    ApiAccess,
}

/// One volume every pod gets, and where the agent's container mounts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwnVolume {
    pub name: &'static str,
    pub path: &'static str,
    pub source: Source,
    /// A volume of the pod's own mounted at the same path may take its place (a scratch
    /// directory serves either way); the others are the agent's and cannot be replaced.
    pub(crate) replaceable: bool,
}

/// The volumes of every pod, in the order they are rendered.
pub(crate) const OWN_VOLUMES: [OwnVolume; 5] = [
    OwnVolume {
        name: "secret",
        source: Source::Secret,
        path: SECRET_DIR,
        replaceable: false,
    },
    OwnVolume {
        name: "tmp",
        source: Source::Disk,
        path: TMP_DIR,
        replaceable: true,
    },
    OwnVolume {
        name: "run",
        source: Source::Disk,
        path: RUN_DIR,
        replaceable: false,
    },
    OwnVolume {
        name: "shm",
        source: Source::Memory,
        path: SHM_DIR,
        replaceable: true,
    },
    OwnVolume {
        name: "kube-api-access",
        source: Source::ApiAccess,
        path: API_ACCESS_DIR,
        replaceable: false,
    },
];

/// The directory part of an absolute path (`/a/b/c` → `/a/b`), at compile time.
const fn parent(path: &'static str) -> &'static str {
    let bytes = path.as_bytes();
    let mut end = bytes.len();
    while end > 1 {
        end -= 1;
        if bytes[end] == b'/' {
            break;
        }
    }
    let (dir, _) = bytes.split_at(end);
    match std::str::from_utf8(dir) {
        Ok(s) => s,
        Err(_) => panic!("a registry path is not UTF-8"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_registry_defaults_directories() {
        assert_eq!(SECRET_DIR, "/etc/prrte-k8s/secret");
        assert_eq!(RUN_DIR, "/var/run/prrte-k8s");
        assert_eq!(parent("/a"), "/");
        assert_eq!(AGENT_PORT, 7117);
        assert_eq!(TOOL_PORT, 7120);
    }
}
