//! The flags of `prrte-k8s-agent` (each also an environment variable). Its port and secret
//! file are the PLM's settings ([`super::mca::AGENT_PORT`], [`super::mca::SECRET_FILE`]) under
//! the agent's flag names.

use super::mca;
use super::setting::{Kind, Setting};

pub const LISTEN: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_LISTEN"],
    flag: "listen",
    value_name: "ADDR",
    default_doc: "$POD_IP:PORT if POD_IP is set, else 0.0.0.0:PORT",
    help: "Address for launch connections",
    ..Setting::NONE
};

/// The agent's side of `plm_k8s_agent_port`.
pub const PORT: Setting = Setting {
    flag: "port",
    help: "TCP port the agent listens on when --listen is not given (the launcher's plm_k8s_agent_port)",
    ..mca::AGENT_PORT
};

pub const PRTED: Setting = Setting {
    env: &["PRRTE_K8S_PRTED"],
    flag: "prted",
    value_name: "PATH",
    default_doc: "the daemon of the MPI --mpi finds",
    help: "Absolute path of the prted executable; the only program this agent starts unless --exec-allow names others",
    kind: Kind::Path,
    ..Setting::NONE
};

pub(crate) const MPI_CHOICES: &[&str] = &["auto", "openmpi", "mpich", "intel"];

pub const MPI: Setting = Setting {
    env: &["PRRTE_K8S_MPI"],
    flag: "mpi",
    value_name: "MPI",
    default_doc: "auto when --prted is not given",
    help: "The image's MPI, found in the pod at start: \"auto\" (Open MPI 5 on PRRTE, Open MPI 4, MPICH or Intel MPI, whichever the image has), \"openmpi\", \"mpich\" or \"intel\". The agent then finds the MPI's daemon itself (no --prted) and gives the batch command and the DVM head what that MPI needs: the k8s components for an Open MPI 5 on the PRRTE they are built for, else prrte-k8s-rsh as its ssh and a hostfile of the job's pods",
    kind: Kind::Choice(MPI_CHOICES),
    ..Setting::NONE
};

pub(crate) const RUNTIME_DIR: Setting = Setting {
    env: &["PRRTE_K8S_RUNTIME_DIR"],
    flag: "runtime-dir",
    value_name: "DIR",
    default_doc: "the parent of the agent's own bin/ directory",
    help: "The injected runtime --mpi uses: bin/prrte-k8s-rsh, lib/prte/ (the k8s components) and etc/prte-mca-params.conf",
    kind: Kind::Path,
    ..Setting::NONE
};

pub(crate) const DETECT_ONLY: Setting = Setting {
    flag: "detect-only",
    help: "Print which MPI --mpi finds in this image and what the agent would give its launcher, then exit (0 when one was found)",
    kind: Kind::Bool,
    ..Setting::NONE
};

/// The agent's side of `plm_k8s_secret_file`.
pub const SECRET_FILE: Setting = Setting {
    help: "File holding the per-job secret shared with the launcher (a mounted Kubernetes Secret; the launcher's plm_k8s_secret_file): at least 32 bytes of a real key, read once at start; a file others could write, or a guessable key, is refused, one others can read is warned about (docs/security.md)",
    ..mca::SECRET_FILE
};

pub(crate) const INSECURE_NO_AUTH: Setting = Setting {
    flag: "insecure-no-auth",
    help: "Serve without authentication when no secret file exists, for tests only (anyone who can reach the port can then start prted; every connection logs a warning)",
    kind: Kind::Bool,
    ..Setting::NONE
};

pub(crate) const HEALTH_LISTEN: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_HEALTH_LISTEN"],
    flag: "health-listen",
    value_name: "ADDR|off",
    default_doc: "$POD_IP:7118 if POD_IP is set, else 0.0.0.0:7118",
    help: "HTTP endpoint for a readinessProbe (GET /healthz answers 200 \"ok\" while serving), or \"off\"",
    ..Setting::NONE
};

pub(crate) const METRICS_LISTEN: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_METRICS_LISTEN"],
    flag: "metrics-listen",
    value_name: "ADDR|PORT|off",
    default: "off",
    help: "HTTP endpoint for Prometheus (GET /metrics only: daemons started, exec requests refused by reason, heartbeats missed), as ADDR:PORT, or a PORT on $POD_IP (else 0.0.0.0), or \"off\". Its port must then be admitted by the job's NetworkPolicy",
    ..Setting::NONE
};

pub const TMPDIR: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_TMPDIR"],
    flag: "tmpdir",
    value_name: "DIR",
    default_doc: "the agent's own TMPDIR, else /tmp",
    help: "TMPDIR given to prted (where PRRTE and PMIx keep their session directories)",
    kind: Kind::Path,
    ..Setting::NONE
};

pub(crate) const KILL_GRACE: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_KILL_GRACE"],
    flag: "kill-grace",
    value_name: "SECS",
    default: "5",
    help: "Seconds between SIGTERM and SIGKILL when stopping prted's process group",
    kind: Kind::Int {
        min: 0,
        max: 86_400,
    },
    ..Setting::NONE
};

pub(crate) const PREEMPT_GRACE: Setting = Setting {
    env: &["PRRTE_K8S_PREEMPT_GRACE"],
    flag: "preempt-grace",
    value_name: "SECS",
    default: "0",
    help: "The pod's terminationGracePeriodSeconds (prrte-k8s manifest sets it): on SIGTERM while a prted runs or a launcher watches, the agent tells its launcher at once (the job's ranks get the preemption notice), keeps prted and its ranks running until they end or the grace period less --kill-grace and 1 s has passed, then stops them; a second SIGTERM stops them at once. 0: stop at once, no notice",
    kind: Kind::Int {
        min: 0,
        max: 86_400,
    },
    ..Setting::NONE
};

pub(crate) const MAX_FRAME: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_MAX_FRAME"],
    flag: "max-frame",
    value_name: "BYTES",
    default: "1048576",
    help: "Largest accepted frame in bytes once a connection is authenticated (before, 16 KiB)",
    kind: Kind::Int {
        min: 4096,
        max: 64 * 1024 * 1024,
    },
    ..Setting::NONE
};

pub(crate) const PASS_ENV: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_PASS_ENV"],
    flag: "pass-env",
    value_name: "NAMES",
    help: "Extra variables of the agent's environment to pass to prted (comma-separated names), besides PATH, HOME, HOSTNAME, LANG, LC_ALL, TZ, USER, LD_LIBRARY_PATH and the agent's own PRTE_*, PMIX_* and OMPI_* variables",
    ..Setting::NONE
};

pub const DVM_URI_FILE: Setting = Setting {
    env: &["PRRTE_K8S_DVM_URI_FILE"],
    flag: "dvm-uri-file",
    value_name: "PATH",
    default: "/var/run/prrte-k8s/dvm.uri",
    help: "File where the DVM's PMIx tool URI is published in the pod (by the agent while a prted launched with a dvm_uri runs, or by the DVM head's prte) and read by prrte-k8s prun, pterm and dvm-uri",
    kind: Kind::Path,
    ..Setting::NONE
};

pub(crate) const DVM_HEAD_CHOICES: &[&str] = &["auto", "always", "never"];

pub(crate) const DVM_HEAD: Setting = Setting {
    env: &["PRRTE_K8S_DVM_HEAD"],
    flag: "dvm-head",
    value_name: "MODE",
    default: "never",
    help: "Start the DVM (prte --prtemca ras k8s --prtemca plm k8s) from this agent: \"auto\" in the pod with index 0 ($JOB_COMPLETION_INDEX, else $POD_INDEX, else a host name ending in \"-0\"), \"always\", or \"never\"",
    kind: Kind::Choice(DVM_HEAD_CHOICES),
    ..Setting::NONE
};

pub(crate) const PRTE: Setting = Setting {
    env: &["PRRTE_K8S_PRTE"],
    flag: "prte",
    value_name: "PATH",
    default_doc: "prte next to --prted",
    help: "Absolute path of prte for the DVM head",
    kind: Kind::Path,
    ..Setting::NONE
};

pub(crate) const TOOL_PORT: Setting = Setting {
    env: &["PRRTE_K8S_TOOL_PORT"],
    flag: "tool-port",
    value_name: "PORT",
    default: "7120",
    help: "TCP port of the DVM head's PMIx tool listener (on the pod IP; ptl_base_ipv4_port)",
    kind: Kind::Port,
    ..Setting::NONE
};

pub(crate) const PRTE_ARG: Setting = Setting {
    flag: "prte-arg",
    value_name: "ARG",
    help: "Extra argument for the DVM head's prte (repeatable, e.g. --prte-arg=--prtemca --prte-arg=oob_tcp_dynamic_ipv4_ports --prte-arg=7121)",
    ..Setting::NONE
};

pub(crate) const RUN: Setting = Setting {
    flag: "run",
    help: "Batch mode: the agent of the pod with index 0 runs COMMAND (given after `--`, else $PRRTE_K8S_RUN) once it is ready, its output is the pod's log and its exit status the agent's; every other pod's agent exits when it ends (0 if it succeeded)",
    kind: Kind::Bool,
    ..Setting::NONE
};

/// The batch command as a shell command line, when none is given after `--`.
pub(crate) const RUN_SHELL: Setting = Setting {
    env: &["PRRTE_K8S_RUN"],
    help: "The batch command as a shell command line (run with /bin/sh -c) when none is given after `--`",
    ..Setting::NONE
};

pub(crate) const BATCH_ROLE_CHOICES: &[&str] = &["auto", "launcher", "worker"];

pub(crate) const BATCH_ROLE: Setting = Setting {
    env: &["PRRTE_K8S_BATCH_ROLE"],
    flag: "batch-role",
    value_name: "ROLE",
    default: "auto",
    help: "Which part this agent plays in batch mode: \"auto\" (the launcher in the pod with index 0, a worker elsewhere), \"launcher\" or \"worker\"",
    kind: Kind::Choice(BATCH_ROLE_CHOICES),
    ..Setting::NONE
};

pub(crate) const LAUNCHER_WAIT: Setting = Setting {
    env: &["PRRTE_K8S_LAUNCHER_WAIT"],
    flag: "launcher-wait",
    value_name: "SECS",
    default: "600",
    help: "Batch workers: seconds to wait for the launcher (the agent running the command) to attach before giving up and exiting with status 1",
    kind: KILL_GRACE.kind,
    ..Setting::NONE
};

pub(crate) const WORKERS_STAY: Setting = Setting {
    flag: "workers-stay",
    help: "Batch mode: the workers' agents stay up when the command ends, until their pods are deleted, and the launcher does not wait for them to end (an MPIJob's cleanPodPolicy None)",
    kind: Kind::Bool,
    ..Setting::NONE
};

pub(crate) const RANK_OUTPUT: Setting = Setting {
    env: &["PRRTE_K8S_RANK_OUTPUT"],
    flag: "rank-output",
    value_name: "on|off",
    default: "on",
    help: "Batch mode: each worker pod's log shows the output of the ranks that ran in it, each line prefixed `[rank N] ` (`off`: only pod 0's log has it). The launcher adds `--output tag` to a command whose program is PRRTE's `mpirun`, `mpiexec`, `prterun` or `oshrun` and that sets no `--output` of its own, takes the tags off for its own log and sends each rank's lines to the agent of the pod the rank ran in",
    ..Setting::NONE
};

pub(crate) const PODS_TIMEOUT: Setting = Setting {
    env: &["PRRTE_K8S_BATCH_PODS_TIMEOUT"],
    flag: "pods-timeout",
    value_name: "SECS",
    default: "300",
    help: "Batch launcher: seconds to wait for the job's pods to be Ready before running the command anyway (as ras_k8s_timeout)",
    kind: KILL_GRACE.kind,
    ..Setting::NONE
};

pub(crate) const CGROUP_CHOICES: &[&str] = &["auto", "off"];

pub(crate) const CGROUP: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_CGROUP"],
    flag: "cgroup",
    value_name: "MODE",
    default: "auto",
    help: "Track every process of a launch in a cgroup of its own (\"auto\": where a writable cgroup hierarchy is mounted, else by a process-tree sweep) or only by the sweep (\"off\"). Launch cgroups are named prrte-k8s-<16 hex digits>, below the agent's own; at start the agent removes those that are empty and older than 10 s (left by an agent killed with SIGKILL)",
    kind: Kind::Choice(CGROUP_CHOICES),
    ..Setting::NONE
};

const COUNT: Kind = Kind::Int {
    min: 0,
    max: 1 << 20,
};

pub(crate) const MAX_PENDING: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_MAX_PENDING"],
    flag: "max-pending",
    value_name: "N",
    default: "64",
    help: "Unauthenticated connections accepted at once; beyond, the oldest is dropped",
    kind: COUNT,
    ..Setting::NONE
};

pub(crate) const MAX_PENDING_PER_PEER: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_MAX_PENDING_PER_PEER"],
    flag: "max-pending-per-peer",
    value_name: "N",
    default: "8",
    help: "Unauthenticated connections accepted at once from one IP address; beyond, that address's oldest is dropped",
    kind: COUNT,
    ..Setting::NONE
};

pub(crate) const HANDSHAKE_TIMEOUT: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_HANDSHAKE_TIMEOUT"],
    flag: "handshake-timeout",
    value_name: "SECS",
    default: "10",
    help: "Seconds a connection has to complete the whole handshake",
    kind: KILL_GRACE.kind,
    ..Setting::NONE
};

pub(crate) const HEARTBEAT_TIMEOUT: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_HEARTBEAT_TIMEOUT"],
    flag: "heartbeat-timeout",
    value_name: "SECS",
    default: "10",
    help: "Seconds a launcher that sends heartbeats may stay silent before the agent stops the prted it launched (0 = never; launchers without heartbeats are not watched)",
    kind: Kind::Int { min: 0, max: 3600 },
    ..Setting::NONE
};

pub(crate) const EXEC_ALLOW: Setting = Setting {
    env: &["PRRTE_K8S_EXEC_ALLOW"],
    flag: "exec-allow",
    value_name: "PATH|NAME",
    default_doc: "only --prted",
    help: "Programs that exec requests (prrte-k8s-rsh) may run besides --prted: absolute paths, or names looked up in --exec-dir (repeatable or comma-separated), e.g. hydra_pmi_proxy. Never a shell or env; nothing else is ever run",
    ..Setting::NONE
};

pub(crate) const EXEC_DIR: Setting = Setting {
    env: &["PRRTE_K8S_EXEC_DIR"],
    flag: "exec-dir",
    value_name: "DIR",
    default_doc: "the directory of --prted",
    help: "Directory where bare names given to --exec-allow are found",
    kind: Kind::Path,
    ..Setting::NONE
};

pub(crate) const MAX_EXEC: Setting = Setting {
    env: &["PRRTE_K8S_MAX_EXEC"],
    flag: "max-exec",
    value_name: "N",
    default: "16",
    help: "Programs run through exec requests at once; beyond, requests are refused",
    kind: COUNT,
    ..Setting::NONE
};

pub(crate) const LOG_FORMAT_CHOICES: &[&str] = &["text", "json"];

pub(crate) const LOG_FORMAT: Setting = Setting {
    env: &["PRRTE_K8S_AGENT_LOG_FORMAT"],
    flag: "log-format",
    value_name: "FORMAT",
    default: "text",
    help: "Log format: \"text\" (human-readable lines) or \"json\" (one object per line); filter with PRRTE_K8S_LOG, e.g. \"debug\"",
    kind: Kind::Choice(LOG_FORMAT_CHOICES),
    ..Setting::NONE
};

/// Every agent setting.
pub const ALL: &[&Setting] = &[
    &LISTEN,
    &PORT,
    &PRTED,
    &MPI,
    &RUNTIME_DIR,
    &DETECT_ONLY,
    &SECRET_FILE,
    &INSECURE_NO_AUTH,
    &HEALTH_LISTEN,
    &METRICS_LISTEN,
    &TMPDIR,
    &KILL_GRACE,
    &PREEMPT_GRACE,
    &MAX_FRAME,
    &PASS_ENV,
    &DVM_URI_FILE,
    &DVM_HEAD,
    &PRTE,
    &TOOL_PORT,
    &PRTE_ARG,
    &RUN,
    &RUN_SHELL,
    &BATCH_ROLE,
    &LAUNCHER_WAIT,
    &WORKERS_STAY,
    &RANK_OUTPUT,
    &PODS_TIMEOUT,
    &CGROUP,
    &MAX_PENDING,
    &MAX_PENDING_PER_PEER,
    &HANDSHAKE_TIMEOUT,
    &HEARTBEAT_TIMEOUT,
    &EXEC_ALLOW,
    &EXEC_DIR,
    &MAX_EXEC,
    &LOG_FORMAT,
];
