//! The command line of `prrte-k8s-agent` (each flag also an environment variable) and its
//! defaults; `checked_config` checks it and makes the configuration the agent serves
//! with.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, ValueEnum};

use crate::settings::{agent, ArgExt, Kind};

/// The range of `--max-frame` (a launch request must fit).
const MAX_FRAME_RANGE: (i64, i64) = match agent::MAX_FRAME.kind {
    Kind::Int { min, max } => (min, max),
    _ => panic!("--max-frame is a count"),
};
/// Smallest `--max-frame` accepted (a launch request must fit).
pub(crate) const MIN_MAX_FRAME: usize = MAX_FRAME_RANGE.0 as usize;
/// Largest `--max-frame` accepted.
pub(crate) const MAX_MAX_FRAME: usize = MAX_FRAME_RANGE.1 as usize;

/// Default time a connection has to complete the handshake.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT_SECS: u64 = agent::HANDSHAKE_TIMEOUT.default_u64();

/// Default location of the file holding the DVM's PMIx tool URI in every pod.
#[cfg(test)]
pub(crate) const DEFAULT_DVM_URI_FILE: &str = agent::DVM_URI_FILE.default;
/// Default TCP port of the DVM head's PMIx tool listener.
#[cfg(test)]
pub(crate) const DEFAULT_TOOL_PORT: u16 = agent::TOOL_PORT.default_u64() as u16;

/// Whether this agent starts the DVM (prte) itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DvmHead {
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
pub(crate) enum BatchRole {
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
    #[arg(long, setting = &agent::LISTEN)]
    pub listen: Option<SocketAddr>,

    #[arg(long, setting = &agent::PORT, value_parser = |t: &str| agent::PORT.port(t))]
    pub port: u16,

    #[arg(long, setting = &agent::PRTED)]
    pub prted: Option<PathBuf>,

    #[arg(long, setting = &agent::MPI, value_enum)]
    pub mpi: Option<MpiChoice>,

    #[arg(long, setting = &agent::RUNTIME_DIR)]
    pub(crate) runtime_dir: Option<PathBuf>,

    #[arg(long, setting = &agent::DETECT_ONLY)]
    pub detect_only: bool,

    #[arg(long, setting = &agent::SECRET_FILE)]
    pub secret_file: PathBuf,

    #[arg(long, setting = &agent::INSECURE_NO_AUTH)]
    pub(crate) insecure_no_auth: bool,

    #[arg(long, setting = &agent::HEALTH_LISTEN)]
    pub(crate) health_listen: Option<String>,

    #[arg(long, setting = &agent::METRICS_LISTEN)]
    pub(crate) metrics_listen: String,

    #[arg(long, setting = &agent::TMPDIR)]
    pub tmpdir: Option<PathBuf>,

    #[arg(long, setting = &agent::KILL_GRACE)]
    pub kill_grace: u64,

    #[arg(long, setting = &agent::PREEMPT_GRACE)]
    pub(crate) preempt_grace: u64,

    #[arg(long, setting = &agent::MAX_FRAME)]
    pub(crate) max_frame: usize,

    #[arg(long, setting = &agent::PASS_ENV, value_delimiter = ',')]
    pub(crate) pass_env: Vec<String>,

    #[arg(long, setting = &agent::DVM_URI_FILE)]
    pub(crate) dvm_uri_file: PathBuf,

    #[arg(long, setting = &agent::DVM_HEAD, value_enum)]
    pub(crate) dvm_head: DvmHead,

    #[arg(long, setting = &agent::PRTE)]
    pub prte: Option<PathBuf>,

    #[arg(long, setting = &agent::TOOL_PORT, value_parser = |t: &str| agent::TOOL_PORT.port(t))]
    pub(crate) tool_port: u16,

    #[arg(long, setting = &agent::PRTE_ARG, allow_hyphen_values = true)]
    pub prte_args: Vec<String>,

    #[arg(long, setting = &agent::RUN)]
    pub run: bool,

    #[arg(long, setting = &agent::BATCH_ROLE, value_enum)]
    pub(crate) batch_role: BatchRole,

    #[arg(long, setting = &agent::LAUNCHER_WAIT)]
    pub(crate) launcher_wait: u64,

    #[arg(long, setting = &agent::WORKERS_STAY)]
    pub(crate) workers_stay: bool,

    #[arg(long, setting = &agent::RANK_OUTPUT)]
    pub(crate) rank_output: Option<String>,

    #[arg(long, setting = &agent::PODS_TIMEOUT)]
    pub(crate) pods_timeout: u64,

    /// The batch command (after `--`)
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,

    #[arg(long, setting = &agent::CGROUP, value_enum)]
    pub cgroup: CgroupMode,

    #[arg(long, setting = &agent::MAX_PENDING)]
    pub(crate) max_pending: usize,

    #[arg(long, setting = &agent::MAX_PENDING_PER_PEER)]
    pub(crate) max_pending_per_peer: usize,

    #[arg(long, setting = &agent::HANDSHAKE_TIMEOUT)]
    pub(crate) handshake_timeout: u64,

    #[arg(long, setting = &agent::HEARTBEAT_TIMEOUT)]
    pub(crate) heartbeat_timeout: u64,

    #[command(flatten)]
    pub exec: ExecArgs,

    #[arg(long, setting = &agent::LOG_FORMAT, value_enum)]
    pub log_format: LogFormat,
}

/// `--mpi`: which MPI of the image the agent serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MpiChoice {
    /// Whichever of the others the image has.
    Auto,
    /// Open MPI 5 (PRRTE) or Open MPI 3/4 (ORTE).
    Openmpi,
    /// MPICH (Hydra), also its derivatives that keep Hydra (MVAPICH).
    Mpich,
    /// Intel MPI (its Hydra, with hydra_bstrap_proxy).
    Intel,
}

/// The agent's exec settings (`prrte-k8s-agent --exec-allow ...`).
#[derive(Debug, Clone, Default, Args)]
pub struct ExecArgs {
    #[arg(long, setting = &agent::EXEC_ALLOW, value_delimiter = ',')]
    pub allow: Vec<String>,

    #[arg(long, setting = &agent::EXEC_DIR)]
    pub dir: Option<PathBuf>,

    #[arg(long, setting = &agent::MAX_EXEC)]
    pub max: usize,
}
