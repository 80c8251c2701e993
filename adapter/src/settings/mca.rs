//! The MCA parameters of the `ras k8s` and `plm k8s` components, their snapshots as the
//! components read them ([`RasParams`], [`PlmParams`], filled by PMIx in the `cabi` crate; each
//! declared with its component's table by `mca_table!`, see [`McaParams`](super::McaParams))
//! and the checks of the PLM's values ([`PlmParams::check`]; the RAS's are in
//! [`crate::discovery::DiscoveryConfig::from_params`]).
//!
//! The agent's port and the secret file are one setting on both sides: the launcher reads
//! `plm_k8s_agent_port` / `plm_k8s_secret_file` (flag, `PRTE_MCA_*` variable, parameter file,
//! with `PRRTE_K8S_AGENT_PORT` / `PRRTE_K8S_SECRET_FILE` as their default), and the agents,
//! `prrte-k8s-rsh` and `prrte-k8s doctor` read both variables (which must agree when both are
//! set). An agent passes its own port and secret file on to the prte or mpirun it starts.

use std::path::PathBuf;
use std::time::Duration;

use super::setting::{Kind, Setting, SettingError};

/// Largest slot count accepted from an annotation or `ras_k8s_slots`.
pub(crate) const MAX_SLOTS: u32 = 1 << 20;
/// `ras_k8s_slots`'s words (besides a count of slots, from 1 to [`MAX_SLOTS`]).
pub(crate) const SLOTS_CHOICES: &[&str] = &["auto", "annotation", "gpu", "cpu", "one"];
/// Other spellings `ras_k8s_slots` accepts (as `discovery::SlotsPolicy` parses them).
pub(crate) const SLOTS_ALIASES: &[&str] = &["gpus", "cpus"];

pub const NAMESPACE: Setting = Setting {
    mca: mca_param!("ras", "namespace"),
    flag: "namespace",
    value_name: "NAMESPACE",
    default_doc: "the namespace of the pod prte runs in (its service-account files), else the kubeconfig context's, else default",
    help: "Kubernetes namespace of the job's pods",
    ..Setting::NONE
};

pub const SELECTOR: Setting = Setting {
    mca: mca_param!("ras", "selector"),
    flag: "selector",
    value_name: "SELECTOR",
    default_doc: "inferred from the labels of the pod prte runs in (Job, JobSet, Kubeflow job or StatefulSet)",
    help: "Label selector of the job's pods, e.g. batch.kubernetes.io/job-name=mpi",
    ..Setting::NONE
};

pub const EXPECTED_PODS: Setting = Setting {
    mca: mca_param!("ras", "expected_pods"),
    flag: "expected",
    value_name: "N",
    default: "0",
    default_doc: "0, which takes the count from the owning Job's parallelism, StatefulSet's replicas or JobSet's pods when readable, else the pods found",
    help: "Number of pods to wait for (0 = infer)",
    kind: Kind::Int {
        min: 0,
        max: i32::MAX as i64,
    },
    ..Setting::NONE
};

pub const TIMEOUT: Setting = Setting {
    mca: mca_param!("ras", "timeout"),
    flag: "timeout",
    value_name: "SECS",
    default: "300",
    help: "Seconds to wait for the expected pods to be Running and Ready (it bounds the whole discovery) before the allocation fails naming the missing pods",
    kind: Kind::Seconds,
    ..Setting::NONE
};

pub const SLOTS: Setting = Setting {
    mca: mca_param!("ras", "slots"),
    flag: "slots",
    value_name: "POLICY",
    default: "auto",
    help: "How slots per pod are derived: auto (annotation prrte-k8s.io/slots, or the deprecated prrte.k8s.io/slots, else GPUs, else whole CPUs, else 1), annotation, gpu, cpu, one, or a number N (every pod offers N slots, whatever its annotation and resources)",
    kind: Kind::ChoiceOrCount {
        words: SLOTS_CHOICES,
        max: MAX_SLOTS,
    },
    ..Setting::NONE
};

pub const KUBECONFIG: Setting = Setting {
    mca: mca_param!("ras", "kubeconfig"),
    flag: "kubeconfig",
    value_name: "PATH",
    default_doc: "the files in $KUBECONFIG, else in-cluster, else ~/.kube/config",
    help: "Kubeconfig file to use instead of the in-cluster service account",
    kind: Kind::Path,
    ..Setting::NONE
};

pub const SELF_POD: Setting = Setting {
    mca: mca_param!("ras", "self_pod"),
    flag: "self-pod",
    value_name: "POD",
    default_doc: "$POD_NAME, else the hostname",
    help: "Name of the pod prte runs in",
    ..Setting::NONE
};

pub(crate) const BIND_NONE: Setting = Setting {
    mca: mca_param!("ras", "bind_none"),
    default: "true",
    help: "Pods share their node's cores (a CPU request is a share, not a set of cores), so ranks are not bound unless a binding policy is given (--bind-to, hwloc_default_binding_policy); set false to keep PRRTE's default core binding",
    kind: Kind::Bool,
    ..Setting::NONE
};

pub const EXCLUDE_SELF: Setting = Setting {
    mca: mca_param!("ras", "exclude_self"),
    flag: "exclude-self",
    default: "false",
    help: "Leave the pod prte runs in out of the allocation, so that it runs mpirun and no ranks (an mpi-operator launcher); the expected pod count still counts it",
    kind: Kind::Bool,
    ..Setting::NONE
};

pub(crate) const RAS_PRIORITY: Setting = Setting {
    mca: mca_param!("ras", "priority"),
    default: "60",
    help: "Selection priority of ras k8s when a Kubernetes environment is detected (KUBERNETES_SERVICE_HOST, ras_k8s_kubeconfig or ras_k8s_selector set); --prtemca ras k8s selects it regardless",
    kind: Kind::Int {
        min: i32::MIN as i64,
        max: i32::MAX as i64,
    },
    ..Setting::NONE
};

pub const ALLOC_REQUESTS_PER_MINUTE: Setting = Setting {
    mca: mca_param!("ras", "alloc_requests_per_minute"),
    value_name: "N",
    default: "6",
    help: "PMIx allocation requests (EXTEND, RELEASE) one job or tool may have served per minute: N at once, then one every 60/N s; more are answered PMIX_ERR_WOULD_BLOCK",
    kind: Kind::Int { min: 1, max: 600 },
    ..Setting::NONE
};

pub const SECRET_FILE: Setting = Setting {
    mca: mca_param!("plm", "secret_file"),
    env: &["PRRTE_K8S_SECRET_FILE"],
    flag: "secret-file",
    value_name: "PATH",
    default: "/etc/prrte-k8s/secret/key",
    help: "File holding the per-job secret shared by the launcher and the pods' agents (a mounted Kubernetes Secret)",
    kind: Kind::Path,
    ..Setting::NONE
};

pub const AGENT_PORT: Setting = Setting {
    mca: mca_param!("plm", "agent_port"),
    env: &["PRRTE_K8S_AGENT_PORT"],
    flag: "agent-port",
    value_name: "PORT",
    default: "7117",
    help: "TCP port the prrte-k8s-agent listens on in every pod",
    kind: Kind::Port,
    ..Setting::NONE
};

pub(crate) const LAUNCH_TIMEOUT: Setting = Setting {
    mca: mca_param!("plm", "launch_timeout"),
    value_name: "SECS",
    default: "60",
    help: "Seconds to wait for every launched prted to report back before the launch fails naming the pods that did not",
    kind: Kind::Seconds,
    ..Setting::NONE
};

pub(crate) const CONNECT_TIMEOUT: Setting = Setting {
    mca: mca_param!("plm", "connect_timeout"),
    value_name: "SECS",
    default: "10",
    help: "Seconds to wait for a connection to a pod's agent",
    kind: Kind::Seconds,
    ..Setting::NONE
};

pub(crate) const HEARTBEAT_INTERVAL: Setting = Setting {
    mca: mca_param!("plm", "heartbeat_interval"),
    value_name: "SECS",
    default: "2",
    help: "Seconds between the launcher's heartbeats to each running daemon's agent (0 = none, then only TCP keepalive notices a cut-off pod, after about 35 s)",
    kind: Kind::Int { min: 0, max: 60 },
    ..Setting::NONE
};

pub(crate) const HEARTBEAT_MISSES: Setting = Setting {
    mca: mca_param!("plm", "heartbeat_misses"),
    value_name: "N",
    default: "4",
    help: "Heartbeat intervals an agent may stay silent before its pod's daemon is reported lost (the default notices a cut-off pod within 10 s)",
    kind: Kind::Int { min: 1, max: 100 },
    ..Setting::NONE
};

pub const INSECURE: Setting = Setting {
    mca: mca_param!("plm", "insecure"),
    default: "false",
    help: "Talk to agents without authentication (only for agents started with --insecure-no-auth; never in production)",
    kind: Kind::Bool,
    ..Setting::NONE
};

/// `plm_k8s_preempt_signal`'s words: no signal, or a signal a program can catch.
pub(crate) const PREEMPT_SIGNALS: &[&str] = &[
    "none", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGCONT",
    "SIGWINCH", "SIGURG", "SIGPWR", "SIGXCPU",
];

pub(crate) const PREEMPT_SIGNAL: Setting = Setting {
    mca: mca_param!("plm", "preempt_signal"),
    flag: "preempt-signal",
    value_name: "SIG",
    default: "none",
    help: "Signal sent to every rank of the DVM's jobs, in every pod, when a pod of the job is told to end (its termination grace period running), besides the PMIx event PMIX_JCTRL_PREEMPT_ALERT; for programs without PMIx (prrte-k8s manifest --preempt-signal sets it)",
    kind: Kind::Choice(PREEMPT_SIGNALS),
    ..Setting::NONE
};

pub(crate) const PLM_PRIORITY: Setting = Setting {
    mca: mca_param!("plm", "priority"),
    default: "60",
    help: "Selection priority of plm k8s in a pod (KUBERNETES_SERVICE_HOST set) with the agent secret mounted; --prtemca plm k8s selects it regardless",
    kind: RAS_PRIORITY.kind,
    ..Setting::NONE
};

mca_table! {
    /// The RAS parameters as PMIx holds them (C types: strings, ints, bools).
    pub struct RasParams;
    /// The `ras_k8s_*` parameters, in the order `prte_info` and the administrator's guide list them.
    pub const RAS;
    {
        namespace: Str = NAMESPACE,
        selector: Str = SELECTOR,
        expected_pods: Int = EXPECTED_PODS,
        timeout: Int = TIMEOUT,
        slots: Str = SLOTS,
        kubeconfig: Str = KUBECONFIG,
        self_pod: Str = SELF_POD,
        exclude_self: Bool = EXCLUDE_SELF,
        priority: Int = RAS_PRIORITY,
        bind_none: Bool = BIND_NONE,
        alloc_requests_per_minute: Int = ALLOC_REQUESTS_PER_MINUTE,
    }
}

mca_table! {
    /// The PLM parameters as PMIx holds them (checked by [`PlmParams::check`]).
    pub struct PlmParams;
    /// The `plm_k8s_*` parameters.
    pub const PLM;
    {
        secret_file: Str = SECRET_FILE,
        agent_port: Int = AGENT_PORT,
        launch_timeout: Int = LAUNCH_TIMEOUT,
        connect_timeout: Int = CONNECT_TIMEOUT,
        heartbeat_interval: Int = HEARTBEAT_INTERVAL,
        heartbeat_misses: Int = HEARTBEAT_MISSES,
        insecure: Bool = INSECURE,
        preempt_signal: Str = PREEMPT_SIGNAL,
        priority: Int = PLM_PRIORITY,
    }
}

/// The PLM's checked settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlmSettings {
    /// `None` with `plm_k8s_insecure`.
    pub secret_file: Option<PathBuf>,
    pub agent_port: u16,
    pub(crate) launch_timeout: Duration,
    pub connect_timeout: Duration,
    /// Zero: no heartbeats.
    pub(crate) heartbeat_interval: Duration,
    pub(crate) heartbeat_misses: u32,
    /// The signal number ranks get on a preemption notice, if any.
    pub preempt_signal: Option<i32>,
}

impl PlmParams {
    /// Checks the values (ports and timeouts in range) and that the launcher's environment does
    /// not name the agent port or the secret file twice with different values.
    pub fn check(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<PlmSettings, SettingError> {
        AGENT_PORT.lookup(env)?;
        SECRET_FILE.lookup(env)?;
        let secret_file = if self.insecure {
            None
        } else {
            Some(PathBuf::from(self.secret_file.clone().unwrap_or_default()))
        };
        Ok(PlmSettings {
            secret_file,
            agent_port: AGENT_PORT.port(&self.agent_port.to_string())?,
            launch_timeout: LAUNCH_TIMEOUT.seconds(&self.launch_timeout.to_string())?,
            connect_timeout: CONNECT_TIMEOUT.seconds(&self.connect_timeout.to_string())?,
            heartbeat_interval: Duration::from_secs(
                HEARTBEAT_INTERVAL.int(&self.heartbeat_interval.to_string())? as u64,
            ),
            heartbeat_misses: HEARTBEAT_MISSES.int(&self.heartbeat_misses.to_string())? as u32,
            preempt_signal: preempt_signal(self.preempt_signal.as_deref().unwrap_or("none"))?,
        })
    }
}

/// `plm_k8s_preempt_signal`'s value as a signal number (`None` for "none"); a name not in
/// `PREEMPT_SIGNALS` is refused naming the ones it takes.
pub fn preempt_signal(text: &str) -> Result<Option<i32>, SettingError> {
    let word = match PREEMPT_SIGNAL.parse(text)? {
        super::setting::Value::Text(w) => w,
        _ => return Err(PREEMPT_SIGNAL.invalid(format!("{text:?}"))),
    };
    if word == "none" {
        return Ok(None);
    }
    word.parse::<nix::sys::signal::Signal>()
        .map(|s| Some(s as i32))
        .map_err(|_| PREEMPT_SIGNAL.invalid(format!("{text:?}")))
}

/// What is wrong with the k8s parameters set in an environment (`vars`): a `PRTE_MCA_ras_k8s_*`
/// or `PRTE_MCA_plm_k8s_*` variable that names no parameter (PRRTE ignores it silently), a bad
/// value, two names of one setting that disagree. Each message names the cause and the remedy.
pub fn env_problems(vars: &[(String, String)]) -> Vec<String> {
    let env = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut out = Vec::new();
    for (name, _) in vars {
        let ours = ["PRTE_MCA_ras_k8s_", "PRTE_MCA_plm_k8s_"]
            .iter()
            .any(|p| name.starts_with(p));
        if ours
            && !RAS
                .iter()
                .chain(PLM)
                .any(|s| s.var() == name || s.env_names().any(|v| v == name))
        {
            let known: Vec<&str> = RAS
                .iter()
                .chain(PLM)
                .filter_map(|s| s.mca.map(|m| m.full))
                .collect();
            out.push(format!(
                "{name} names no parameter of the k8s components (PRRTE ignores it); the parameters are {}; rename or remove it",
                known.join(", ")
            ));
        }
    }
    for s in RAS.iter().chain(PLM) {
        match s.lookup(&env) {
            Err(e) => out.push(e.to_string()),
            Ok(Some((var, value))) => {
                let checked = match s.kind {
                    Kind::Int { .. } | Kind::Port | Kind::Seconds => s.mca_int(&value).map(drop),
                    Kind::Bool => s.mca_bool(&value).map(drop),
                    _ if s.mca == SLOTS.mca
                        && SLOTS_ALIASES.contains(&value.trim().to_ascii_lowercase().as_str()) =>
                    {
                        Ok(())
                    }
                    _ => s.parse(&value).map(drop),
                };
                if let Err(e) = checked {
                    out.push(format!("${var}: {e}"));
                }
            }
            Ok(None) => {}
        }
    }
    out
}
