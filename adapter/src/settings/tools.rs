//! Settings of `prrte-k8s` and `prrte-k8s-rsh` that are no MCA parameter (those read the
//! [`super::mca`] settings: the `ras_k8s_*` ones to find the job's pods, the agent port and the
//! secret file to reach the agents).

use super::setting::{Kind, Setting};

pub const PREFIX: Setting = Setting {
    env: &["PRRTE_K8S_PREFIX"],
    value_name: "DIR",
    default_doc:
        "the directory above the one holding $PRRTE_K8S_PRTED, else found from prte on PATH",
    help: "The PRRTE install prefix (holding bin/prte, bin/prun...) whose tools prrte-k8s runs",
    kind: Kind::Path,
    ..Setting::NONE
};

pub const LOG: Setting = Setting {
    env: &["PRRTE_K8S_LOG"],
    value_name: "FILTER",
    default_doc: "warn (the agent: info)",
    help: "Log filter of prrte-k8s and the agent on stderr (e.g. debug, or prrte_k8s=debug)",
    ..Setting::NONE
};

pub const DOCTOR_TIMEOUT: Setting = Setting {
    flag: "timeout",
    value_name: "SECS",
    default: "15",
    help: "Seconds to wait for the job's pods to be ready. Shorter than ras_k8s_timeout (and not read from it): doctor checks the job as it is now rather than waiting for pods to start",
    kind: Kind::Seconds,
    ..Setting::NONE
};

pub const DOCTOR_AGENT_TIMEOUT: Setting = Setting {
    flag: "agent-timeout",
    value_name: "SECS",
    default: "5",
    help: "Seconds allowed for each agent's connection and each answer",
    kind: Kind::Seconds,
    ..Setting::NONE
};

pub const PRUN_TIMEOUT: Setting = Setting {
    flag: "timeout",
    env: &["PRRTE_K8S_PRUN_TIMEOUT"],
    value_name: "SECS",
    default_doc: "none",
    help: "Seconds the job may run; then it is killed in the DVM (its slots freed) and prrte-k8s prun exits with 124",
    kind: Kind::Seconds,
    ..Setting::NONE
};

pub(crate) const RSH_CONNECT_TIMEOUT: Setting = Setting {
    env: &["PRRTE_K8S_RSH_CONNECT_TIMEOUT"],
    value_name: "SECS",
    default: "10",
    help: "prrte-k8s-rsh: seconds to wait for a connection to the pod's agent",
    kind: Kind::Seconds,
    ..Setting::NONE
};

/// Every one of them.
pub const ALL: &[&Setting] = &[
    &PREFIX,
    &LOG,
    &DOCTOR_TIMEOUT,
    &DOCTOR_AGENT_TIMEOUT,
    &PRUN_TIMEOUT,
    &RSH_CONNECT_TIMEOUT,
];
