//! The command line of `prrte-k8s-agent` (each flag also an environment variable) and its
//! defaults; [`super::checked_config`] checks it and makes the configuration the agent serves
//! with.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::protocol::{DEFAULT_AGENT_PORT, DEFAULT_MAX_FRAME, DEFAULT_SECRET_FILE};

/// Smallest `--max-frame` accepted (a launch request must fit).
pub const MIN_MAX_FRAME: usize = 4096;
/// Largest `--max-frame` accepted.
pub const MAX_MAX_FRAME: usize = 64 * 1024 * 1024;

/// Default time a connection has to complete the handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT_SECS: u64 = 10;

/// Default location of the file holding the DVM's PMIx tool URI in every pod.
pub const DEFAULT_DVM_URI_FILE: &str = "/var/run/prrte-k8s/dvm.uri";
/// Default TCP port of the DVM head's PMIx tool listener.
pub const DEFAULT_TOOL_PORT: u16 = 7120;

/// Whether this agent starts the DVM (prte) itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DvmHead {
    /// Only in the pod with index 0 (JOB_COMPLETION_INDEX, else POD_INDEX, else a host name
    /// ending in `-0`).
    Auto,
    /// In this pod, whatever its index.
    Always,
    /// Never: a launcher (prte/prterun run by the user) starts the DVM.
    Never,
}

/// The part an agent plays in batch mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BatchRole {
    /// The launcher in the pod with index 0 (as `--dvm-head auto`), a worker elsewhere.
    Auto,
    /// Run the command here.
    Launcher,
    /// Wait for the launcher's word, then exit.
    Worker,
}

/// Whether launches get a cgroup of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CgroupMode {
    Auto,
    Off,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The in-pod agent that starts PRRTE's prted on behalf of `prterun --prtemca plm k8s`.
///
/// It accepts authenticated launch requests over TCP, starts only the configured prted in its
/// own process group, reports its exit, and kills the whole group when the launcher's
/// connection goes away. It can run as the pod's entrypoint (PID 1): it reaps every zombie and
/// forwards SIGTERM/SIGINT to prted before exiting.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "prrte-k8s-agent",
    version,
    max_term_width = 100,
    args_override_self = true
)]
pub struct AgentArgs {
    /// Address for launch connections [default: $POD_IP:PORT if POD_IP is set, else 0.0.0.0:PORT]
    #[arg(long, env = "PRRTE_K8S_AGENT_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Port used when --listen is not given
    #[arg(long, env = "PRRTE_K8S_AGENT_PORT", value_name = "PORT", default_value_t = DEFAULT_AGENT_PORT)]
    pub port: u16,

    /// Absolute path of the prted executable; the only program this agent ever starts
    #[arg(long, env = "PRRTE_K8S_PRTED", value_name = "PATH")]
    pub prted: PathBuf,

    /// File holding the per-job secret shared with the launcher (a mounted Kubernetes Secret)
    #[arg(long, env = "PRRTE_K8S_SECRET_FILE", value_name = "PATH", default_value = DEFAULT_SECRET_FILE)]
    pub secret_file: PathBuf,

    /// Serve without authentication when no secret file exists (anyone who can reach the port
    /// can then start prted; every connection logs a warning)
    #[arg(long)]
    pub insecure_no_auth: bool,

    /// HTTP readiness endpoint (GET /healthz answers 200 "ok" while serving), or "off"
    /// [default: $POD_IP:7118 if POD_IP is set, else 0.0.0.0:7118]
    #[arg(long, env = "PRRTE_K8S_AGENT_HEALTH_LISTEN", value_name = "ADDR|off")]
    pub health_listen: Option<String>,

    /// TMPDIR given to prted [default: the agent's own TMPDIR, else /tmp]
    #[arg(long, env = "PRRTE_K8S_AGENT_TMPDIR", value_name = "DIR")]
    pub tmpdir: Option<PathBuf>,

    /// Seconds between SIGTERM and SIGKILL when stopping prted's process group
    #[arg(
        long,
        env = "PRRTE_K8S_AGENT_KILL_GRACE",
        value_name = "SECS",
        default_value_t = 5
    )]
    pub kill_grace: u64,

    /// Largest accepted frame in bytes
    #[arg(long, env = "PRRTE_K8S_AGENT_MAX_FRAME", value_name = "BYTES", default_value_t = DEFAULT_MAX_FRAME)]
    pub max_frame: usize,

    /// Extra variables of the agent's environment to pass to prted (comma-separated names),
    /// besides PATH, HOME, HOSTNAME, LANG, LC_ALL, TZ, USER, LD_LIBRARY_PATH and the agent's
    /// own PRTE_*, PMIX_* and OMPI_* variables
    #[arg(
        long,
        env = "PRRTE_K8S_AGENT_PASS_ENV",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pub pass_env: Vec<String>,

    /// File where the DVM's PMIx tool URI is published in this pod, for `prrte-k8s prun`
    /// (written while a prted launched with a `dvm_uri` runs, or by the DVM head's prte)
    #[arg(long, env = "PRRTE_K8S_DVM_URI_FILE", value_name = "PATH", default_value = DEFAULT_DVM_URI_FILE)]
    pub dvm_uri_file: PathBuf,

    /// Start the DVM (prte --prtemca ras k8s --prtemca plm k8s) from this agent: "auto" in the
    /// pod with index 0 ($JOB_COMPLETION_INDEX, else $POD_INDEX, else a host name ending in
    /// "-0"), "always", or "never"
    #[arg(long, env = "PRRTE_K8S_DVM_HEAD", value_enum, default_value = "never")]
    pub dvm_head: DvmHead,

    /// Absolute path of prte for the DVM head [default: prte next to --prted]
    #[arg(long, env = "PRRTE_K8S_PRTE", value_name = "PATH")]
    pub prte: Option<PathBuf>,

    /// TCP port of the DVM head's PMIx tool listener (on the pod IP)
    #[arg(long, env = "PRRTE_K8S_TOOL_PORT", value_name = "PORT", default_value_t = DEFAULT_TOOL_PORT)]
    pub tool_port: u16,

    /// Extra argument for the DVM head's prte (repeatable, e.g. --prte-arg=--prtemca
    /// --prte-arg=oob_tcp_dynamic_ipv4_ports --prte-arg=7121)
    #[arg(long = "prte-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub prte_args: Vec<String>,

    /// Batch mode: the agent of the pod with index 0 runs COMMAND (given after `--`) once it is
    /// ready, its output is the pod's log and its exit status the agent's; every other pod's
    /// agent exits when it ends (0 if it succeeded). Without a command after `--`, the shell
    /// command in PRRTE_K8S_RUN is run with /bin/sh -c
    #[arg(long)]
    pub run: bool,

    /// Which part this agent plays in batch mode: "auto" (the launcher in the pod with index 0,
    /// a worker elsewhere), "launcher" or "worker"
    #[arg(long, env = "PRRTE_K8S_BATCH_ROLE", value_enum, default_value = "auto")]
    pub batch_role: BatchRole,

    /// Batch workers: seconds to wait for the launcher (the agent running the command) to
    /// attach before giving up and exiting with status 1
    #[arg(
        long,
        env = "PRRTE_K8S_LAUNCHER_WAIT",
        value_name = "SECS",
        default_value_t = 600
    )]
    pub launcher_wait: u64,

    /// Batch launcher: seconds to wait for the job's pods to be Ready before running the
    /// command anyway (as ras_k8s_timeout)
    #[arg(
        long,
        env = "PRRTE_K8S_BATCH_PODS_TIMEOUT",
        value_name = "SECS",
        default_value_t = 300
    )]
    pub pods_timeout: u64,

    /// The batch command (after `--`)
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,

    /// Track every process of a launch in a cgroup of its own ("auto": where a writable cgroup
    /// hierarchy is mounted, else by a process-tree sweep) or only by the sweep ("off")
    #[arg(
        long,
        env = "PRRTE_K8S_AGENT_CGROUP",
        value_enum,
        default_value = "auto"
    )]
    pub cgroup: CgroupMode,

    /// Unauthenticated connections accepted at once; beyond, the oldest is dropped
    #[arg(long, env = "PRRTE_K8S_AGENT_MAX_PENDING", value_name = "N", default_value_t = super::limits::DEFAULT_MAX_PENDING)]
    pub max_pending: usize,

    /// Unauthenticated connections accepted at once from one IP address; beyond, that
    /// address's oldest is dropped
    #[arg(long, env = "PRRTE_K8S_AGENT_MAX_PENDING_PER_PEER", value_name = "N", default_value_t = super::limits::DEFAULT_MAX_PENDING_PER_PEER)]
    pub max_pending_per_peer: usize,

    /// Seconds a connection has to complete the whole handshake
    #[arg(long, env = "PRRTE_K8S_AGENT_HANDSHAKE_TIMEOUT", value_name = "SECS", default_value_t = DEFAULT_HANDSHAKE_TIMEOUT_SECS)]
    pub handshake_timeout: u64,

    #[command(flatten)]
    pub exec: super::exec::ExecArgs,

    /// Log format (filter with PRRTE_K8S_LOG, e.g. "debug")
    #[arg(
        long,
        env = "PRRTE_K8S_AGENT_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}
