//! The checked configuration the agent serves with ([`AgentConfig`]), made from the command
//! line ([`super::config::AgentArgs`]) and the agent's environment, and the checks made before
//! serving.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::config::{
    AgentArgs, BatchRole, CgroupMode, DvmHead, DEFAULT_HANDSHAKE_TIMEOUT_SECS, MAX_MAX_FRAME,
    MIN_MAX_FRAME,
};
use super::mpi::prepare::Prepared;
use crate::protocol::{read_secret_file, SecretError, DEFAULT_HEALTH_PORT};
use crate::settings::{agent, mca, SettingError};

/// The checked configuration the agent serves with.
#[derive(Clone)]
pub struct AgentConfig {
    pub listen: SocketAddr,
    pub(crate) health_listen: Option<SocketAddr>,
    /// Where `GET /metrics` is served (`--metrics-listen`); `None`: nowhere.
    pub(crate) metrics_listen: Option<SocketAddr>,
    pub prted: PathBuf,
    /// `None` only with `--insecure-no-auth` and no secret file.
    pub secret: Option<Vec<u8>>,
    pub secret_file: PathBuf,
    pub tmpdir: PathBuf,
    pub kill_grace: Duration,
    /// The pod's termination grace period (`--preempt-grace`); zero: no preemption notice.
    pub(crate) preempt_grace: Duration,
    pub(crate) max_frame: usize,
    /// Names of agent environment variables passed to prted (besides the prefixes).
    pub(crate) pass_env: Vec<String>,
    /// Where the DVM URI is published in this pod.
    pub(crate) dvm_uri_file: PathBuf,
    /// Set when this agent starts the DVM itself.
    pub head: Option<HeadConfig>,
    /// Set in batch mode (`--run`).
    pub batch: Option<BatchConfig>,
    /// Whether launches get a cgroup of their own where possible (`--cgroup auto`).
    pub cgroup: bool,
    /// Caps on unauthenticated connections.
    pub limits: ConnLimits,
    /// How long a client that sends heartbeats (a launcher whose prted runs, the batch
    /// launcher, an exec client) may stay silent (`--heartbeat-timeout`); `None`: forever. See
    /// [`crate::protocol::liveness`].
    pub(crate) heartbeat_timeout: Option<Duration>,
    /// The image's MPI and what its launcher gets (`--mpi`); `None`: `--prted` as given, and
    /// the batch command gets `ras k8s` and `plm k8s`.
    pub mpi: Option<Arc<Prepared>>,
}

/// Caps on connections that have not authenticated yet (see [`super::limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Unauthenticated launch connections at once (the oldest is dropped beyond).
    pub(crate) max_pending: usize,
    /// Unauthenticated launch connections from one IP address at once.
    pub(crate) max_pending_per_peer: usize,
    /// The whole handshake must complete within this time.
    pub(crate) handshake_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_pending: super::limits::DEFAULT_MAX_PENDING,
            max_pending_per_peer: super::limits::DEFAULT_MAX_PENDING_PER_PEER,
            handshake_timeout: Duration::from_secs(DEFAULT_HANDSHAKE_TIMEOUT_SECS),
        }
    }
}

/// Batch mode: what this agent does (see `agent::batch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchConfig {
    /// Run `command` (argv) once the pod is ready; tell the other pods' agents when it ended.
    Launcher {
        command: Vec<String>,
        /// Bound on waiting for the job's pods before running the command anyway.
        pods_timeout: Duration,
        /// Why this agent is the launcher (for the log).
        reason: String,
        /// The workers stay up after the command (`--workers-stay`): not waited for.
        workers_stay: bool,
        /// Each worker pod's log shows its ranks' output (`--rank-output`, not `off`).
        rank_output: bool,
    },
    /// Wait for the launcher's `attach` (at most `launcher_wait`) and `finish`, then exit (or,
    /// with `stay`, `--workers-stay`, go on serving until the pod is told to end).
    Worker { launcher_wait: Duration, stay: bool },
}

/// How the DVM head (prte started by the agent) runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadConfig {
    /// Absolute path of prte.
    pub prte: PathBuf,
    /// The pod's IPv4 address: the PMIx tool listener binds to it.
    pub pod_ip: Ipv4Addr,
    pub(crate) tool_port: u16,
    /// Extra arguments after the built-in ones.
    pub(crate) extra_args: Vec<String>,
    /// Why this agent is the head (for the log).
    pub reason: String,
}

/// The pod's index in its workload and where it came from: `JOB_COMPLETION_INDEX` (Indexed Job),
/// else `POD_INDEX` (set from a label such as `apps.kubernetes.io/pod-index` through the downward
/// API), else the number after the last `-` of the host name (`HOSTNAME`, else the kernel's).
pub fn pod_index(env: &impl Fn(&str) -> Option<String>) -> Option<(u64, String)> {
    for var in ["JOB_COMPLETION_INDEX", "POD_INDEX"] {
        if let Some(v) = env(var)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
        {
            if let Ok(i) = v.parse::<u64>() {
                return Some((i, format!("{var}={v}")));
            }
        }
    }
    let host = env("HOSTNAME")
        .filter(|h| !h.is_empty())
        .or_else(|| nix::unistd::gethostname().ok()?.into_string().ok())?;
    let (_, digits) = host.rsplit_once('-')?;
    let i = digits
        .parse::<u64>()
        .ok()
        .filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))?;
    Some((i, format!("host name {host}")))
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("listen", &self.listen)
            .field("health_listen", &self.health_listen)
            .field("metrics_listen", &self.metrics_listen)
            .field("prted", &self.prted)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_file", &self.secret_file)
            .field("tmpdir", &self.tmpdir)
            .field("kill_grace", &self.kill_grace)
            .field("preempt_grace", &self.preempt_grace)
            .field("max_frame", &self.max_frame)
            .field("pass_env", &self.pass_env)
            .field("dvm_uri_file", &self.dvm_uri_file)
            .field("head", &self.head)
            .field("batch", &self.batch)
            .field("cgroup", &self.cgroup)
            .field("limits", &self.limits)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("mpi", &self.mpi.as_ref().map(|m| m.plan.launch))
            .finish()
    }
}

/// Why the agent refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no --prted: give the absolute path of prted with --prted (or {}), or let the agent find the image's MPI with --mpi auto", agent::PRTED.var())]
    NoPrted,
    #[error("--prted {0}: must be an absolute path (the agent never searches PATH)")]
    PrtedNotAbsolute(PathBuf),
    #[error("--prted {path}: {why}")]
    PrtedUnusable { path: PathBuf, why: String },
    #[error("{0}; or start the agent with --insecure-no-auth to serve without authentication (not recommended)")]
    NoSecret(SecretError),
    #[error("{0}")]
    Secret(SecretError),
    #[error("--tmpdir {path}: {why}")]
    Tmpdir { path: PathBuf, why: String },
    #[error("--max-frame {0}: must be between {MIN_MAX_FRAME} and {MAX_MAX_FRAME} bytes")]
    MaxFrame(usize),
    #[error("--health-listen {0:?}: expected ADDR:PORT or \"off\"")]
    HealthListen(String),
    #[error("--metrics-listen {0:?}: expected ADDR:PORT, a PORT (on $POD_IP) or \"off\"")]
    MetricsListen(String),
    #[error("--rank-output {0:?}: expected \"on\" or \"off\"")]
    RankOutput(String),
    #[error("POD_IP {0:?} is not an IP address; set --listen explicitly")]
    PodIp(String),
    #[error("--prte {path}: {why} (the DVM head runs prte; give its absolute path with --prte or {})", agent::PRTE.var())]
    Prte { path: PathBuf, why: String },
    #[error("--run: no command; give it after `--` (--run -- mpirun -n 8 ./app) or as a shell command in {}", agent::RUN_SHELL.var())]
    RunWithoutCommand,
    #[error("--run and --dvm-head {0} exclude each other: a batch job runs its command (e.g. mpirun) in pod 0, an interactive one a DVM head; the manifest chooses one")]
    RunAndHead(String),
    #[error("{0}")]
    Setting(#[from] SettingError),
    #[error("--dvm-head: the DVM head binds prte's tool listener to the pod's IPv4 address, but {0}; set POD_IP from the downward API (fieldPath: status.podIP)")]
    HeadAddress(String),
}

/// `--metrics-listen`: `off` (or empty), `ADDR:PORT`, or a port on `default_ip`.
fn metrics_listen(value: &str, default_ip: IpAddr) -> Result<Option<SocketAddr>, ConfigError> {
    let bad = || ConfigError::MetricsListen(value.to_owned());
    match value.trim() {
        "off" | "" => Ok(None),
        s if s.bytes().all(|b| b.is_ascii_digit()) => match s.parse::<u16>() {
            Ok(port) if port > 0 => Ok(Some(SocketAddr::new(default_ip, port))),
            _ => Err(bad()),
        },
        s => s.parse().map(Some).map_err(|_| bad()),
    }
}

impl AgentConfig {
    /// Checks the arguments; `env` looks up the agent's environment (POD_IP, TMPDIR).
    pub fn from_args(
        args: &AgentArgs,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<AgentConfig, ConfigError> {
        // The port and the secret file are the launcher's settings too, under two names each.
        agent::PORT.lookup(&env)?;
        agent::SECRET_FILE.lookup(&env)?;
        let pod_ip = match env("POD_IP").filter(|s| !s.is_empty()) {
            Some(s) => Some(
                s.parse::<IpAddr>()
                    .map_err(|_| ConfigError::PodIp(s.clone()))?,
            ),
            None => None,
        };
        let default_ip = pod_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let listen = args
            .listen
            .unwrap_or(SocketAddr::new(default_ip, args.port));
        let health_listen = match args.health_listen.as_deref().map(str::trim) {
            None => Some(SocketAddr::new(default_ip, DEFAULT_HEALTH_PORT)),
            Some("off") | Some("") => None,
            Some(s) => Some(
                s.parse()
                    .map_err(|_| ConfigError::HealthListen(s.to_owned()))?,
            ),
        };
        let metrics_listen = metrics_listen(&args.metrics_listen, default_ip)?;
        let prted = args.prted.clone().ok_or(ConfigError::NoPrted)?;
        check_prted(&prted)?;

        let secret = match read_secret_file(&args.secret_file) {
            Ok(s) => Some(s),
            Err(e @ SecretError::Missing { .. }) => {
                if args.insecure_no_auth {
                    None
                } else {
                    return Err(ConfigError::NoSecret(e));
                }
            }
            Err(e) => return Err(ConfigError::Secret(e)),
        };

        let tmpdir = check_tmpdir(args, &env)?;

        if !(MIN_MAX_FRAME..=MAX_MAX_FRAME).contains(&args.max_frame) {
            return Err(ConfigError::MaxFrame(args.max_frame));
        }
        let head = head_config(args, &env, pod_ip, listen)?;
        let batch = batch_config(args, &env, head.is_some())?;
        Ok(AgentConfig {
            listen,
            health_listen,
            metrics_listen,
            prted,
            secret,
            secret_file: args.secret_file.clone(),
            tmpdir,
            kill_grace: Duration::from_secs(args.kill_grace),
            preempt_grace: Duration::from_secs(args.preempt_grace),
            max_frame: args.max_frame,
            pass_env: args
                .pass_env
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect(),
            dvm_uri_file: args.dvm_uri_file.clone(),
            head,
            batch,
            cgroup: args.cgroup == CgroupMode::Auto,
            limits: ConnLimits {
                max_pending: args.max_pending.max(1),
                max_pending_per_peer: args.max_pending_per_peer.max(1),
                handshake_timeout: Duration::from_secs(args.handshake_timeout.max(1)),
            },
            heartbeat_timeout: (args.heartbeat_timeout > 0)
                .then(|| Duration::from_secs(args.heartbeat_timeout)),
            mpi: None,
        })
    }
}

/// `--tmpdir`, else `$TMPDIR`, else `/tmp`; it must be a directory.
fn check_tmpdir(
    args: &AgentArgs,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<PathBuf, ConfigError> {
    let tmpdir = args
        .tmpdir
        .clone()
        .or_else(|| env("TMPDIR").filter(|s| !s.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    match std::fs::metadata(&tmpdir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(ConfigError::Tmpdir {
                path: tmpdir,
                why: "not a directory".into(),
            })
        }
        Err(e) => {
            return Err(ConfigError::Tmpdir {
                path: tmpdir,
                why: e.to_string(),
            })
        }
    }
    Ok(tmpdir)
}

/// The DVM head part of the configuration: `--dvm-head always`, or `auto` in the pod with index
/// 0, makes this agent start prte, which must be usable, bound to the pod's IPv4 address.
fn head_config(
    args: &AgentArgs,
    env: &impl Fn(&str) -> Option<String>,
    pod_ip: Option<IpAddr>,
    listen: SocketAddr,
) -> Result<Option<HeadConfig>, ConfigError> {
    let head_reason = match args.dvm_head {
        DvmHead::Never => None,
        DvmHead::Always => Some("--dvm-head always".to_owned()),
        DvmHead::Auto => match pod_index(env) {
            Some((0, source)) => Some(format!("--dvm-head auto, pod index 0 ({source})")),
            _ => None,
        },
    };
    let head = match head_reason {
        None => None,
        Some(reason) => {
            let prte = match &args.prte {
                Some(p) => p.clone(),
                None => args
                    .prted
                    .as_deref()
                    .ok_or(ConfigError::NoPrted)?
                    .with_file_name("prte"),
            };
            check_prted(&prte).map_err(|e| match e {
                ConfigError::PrtedNotAbsolute(path) => ConfigError::Prte {
                    path,
                    why: "must be an absolute path".into(),
                },
                ConfigError::PrtedUnusable { path, why } => ConfigError::Prte { path, why },
                other => other,
            })?;
            let pod_ip = match (pod_ip, listen.ip()) {
                (Some(IpAddr::V4(ip)), _) => ip,
                (Some(IpAddr::V6(ip)), _) => {
                    return Err(ConfigError::HeadAddress(format!(
                        "POD_IP {ip} is an IPv6 address (PRRTE's tool URI is tcp4)"
                    )))
                }
                (None, IpAddr::V4(ip)) if !ip.is_unspecified() => ip,
                (None, _) => {
                    return Err(ConfigError::HeadAddress(
                        "POD_IP is not set and --listen gives no IPv4 address".into(),
                    ))
                }
            };
            Some(HeadConfig {
                prte,
                pod_ip,
                tool_port: args.tool_port,
                extra_args: args.prte_args.clone(),
                reason,
            })
        }
    };
    Ok(head)
}

impl AgentConfig {
    /// The launcher's side of this agent's settings, for a prte or mpirun it starts (the DVM
    /// head, the batch command): `PRTE_MCA_plm_k8s_secret_file` (when it serves with a secret)
    /// and `PRTE_MCA_plm_k8s_agent_port`, each unless `is_set` says the variable is already
    /// set in the agent's environment (which the child inherits).
    pub(crate) fn launcher_env(
        &self,
        is_set: impl Fn(&str) -> bool,
    ) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let secret = mca::SECRET_FILE.mca.map(|m| m.env);
        if let Some(var) = secret.filter(|v| self.secret.is_some() && !is_set(v)) {
            out.push((var, self.secret_file.display().to_string()));
        }
        if let Some(var) = mca::AGENT_PORT.mca.map(|m| m.env).filter(|v| !is_set(v)) {
            out.push((var, self.listen.port().to_string()));
        }
        out
    }
}

/// The batch part of the configuration: `--run` (or a command after `--`, or PRRTE_K8S_RUN)
/// turns batch mode on; `--batch-role` (default: by pod index) picks launcher or worker.
fn batch_config(
    args: &AgentArgs,
    env: &impl Fn(&str) -> Option<String>,
    head: bool,
) -> Result<Option<BatchConfig>, ConfigError> {
    let rank_output = match args.rank_output.as_deref().map(str::trim) {
        None | Some("") => true,
        Some(v) if v.eq_ignore_ascii_case("on") => true,
        Some(v) if v.eq_ignore_ascii_case("off") => false,
        Some(v) => return Err(ConfigError::RankOutput(v.to_owned())),
    };
    let shell = env(agent::RUN_SHELL.var()).filter(|s| !s.trim().is_empty());
    let command: Vec<String> = if !args.command.is_empty() {
        args.command.clone()
    } else if let Some(line) = shell {
        vec!["/bin/sh".into(), "-c".into(), line]
    } else {
        Vec::new()
    };
    let explicit_role = args.batch_role != BatchRole::Auto;
    if !args.run && command.is_empty() && !explicit_role {
        return Ok(None);
    }
    if head || args.dvm_head != DvmHead::Never {
        let which = format!("{:?}", args.dvm_head).to_lowercase();
        return Err(ConfigError::RunAndHead(which));
    }
    let (launcher, reason) = match args.batch_role {
        BatchRole::Launcher => (true, "--batch-role launcher".to_owned()),
        BatchRole::Worker => (false, "--batch-role worker".to_owned()),
        BatchRole::Auto => match pod_index(env) {
            Some((0, source)) => (true, format!("pod index 0 ({source})")),
            Some((i, source)) => (false, format!("pod index {i} ({source})")),
            None => (false, "no pod index found".to_owned()),
        },
    };
    if launcher {
        if command.is_empty() {
            return Err(ConfigError::RunWithoutCommand);
        }
        Ok(Some(BatchConfig::Launcher {
            command,
            pods_timeout: Duration::from_secs(args.pods_timeout),
            reason,
            workers_stay: args.workers_stay,
            rank_output,
        }))
    } else {
        Ok(Some(BatchConfig::Worker {
            launcher_wait: Duration::from_secs(args.launcher_wait),
            stay: args.workers_stay,
        }))
    }
}

/// Checks that `path` is absolute, a regular file and executable by this process.
pub(crate) fn check_prted(path: &Path) -> Result<(), ConfigError> {
    if !path.is_absolute() {
        return Err(ConfigError::PrtedNotAbsolute(path.to_owned()));
    }
    let unusable = |why: String| ConfigError::PrtedUnusable {
        path: path.to_owned(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| unusable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unusable("not a regular file".into()));
    }
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK)
        .map_err(|e| unusable(format!("not executable by this user ({})", e.desc())))?;
    Ok(())
}

#[cfg(test)]
mod tests;
