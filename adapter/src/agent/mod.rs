//! `prrte-k8s-agent`: runs in every pod and starts PRRTE's prted when an authenticated launcher
//! asks it to (see [`crate::protocol`] for the wire protocol).
//!
//! * Only the configured prted executable is ever started, with the request's arguments and
//!   MCA variables as [`launch_policy`] admits them (what PRRTE's k8s PLM sends, the HNP pinned
//!   to the launcher's address), plus `--leave-session-attached` (prted stays the agent's
//!   child) and `--set-sid` (prted leads a session and process group of its own, as through
//!   ssh; see `prted_cmd::SET_SID`), with stdin from `/dev/null` and stdout/stderr shared with the
//!   agent (raw, unprefixed).
//! * prted's environment is a minimal base, not the agent's whole environment: `PATH` (the
//!   agent's, or a standard default), `HOME` (the agent's, or `/`), `HOSTNAME` (the agent's, or
//!   the host name), `TMPDIR` (`--tmpdir`), `LANG`, `LC_ALL`, `TZ`, `USER` and
//!   `LD_LIBRARY_PATH` when the agent has them, the variables named by `--pass-env`, and the
//!   agent's own `PRTE_*`, `PMIX_*` and `OMPI_*` variables (so a pod spec can set site defaults
//!   such as `PRTE_MCA_*`). The request's variables come last and override. The agent's own
//!   `PRRTE_K8S_*` settings (secret location and so on) are never passed on.
//! * One prted at a time. The connection that launched it controls it: `kill`, or the end of
//!   that connection, stops prted's whole process group (SIGTERM, SIGKILL after the grace period)
//!   and reaps it. When prted ends by itself, anything left in its group is stopped the same way
//!   before `exited` is reported.
//! * The agent reaps every child (it may be PID 1) and makes itself a child subreaper, so
//!   descendants of prted that left its process group are reparented to it; they are stopped
//!   with the launch too (found by its cgroup or by following prted's process tree and session,
//!   see `tracking`). No process outlives its job.
//! * SIGTERM/SIGINT: stop accepting, report 503 on the health endpoint, stop the running prted
//!   as above (reporting `exited` to its launcher), and exit 0, or 128 + the signal when the
//!   pod's DVM was up (a prted ran, or the DVM head's prte): a pod deleted or evicted under a
//!   running DVM ends `Failed`, so its Job's pod failure policy fails the Job. With `--preempt-grace` a SIGTERM
//!   while a prted runs or a launcher watches first tells those launchers (`preempt`) and holds
//!   prted until it ends, the grace period is nearly over or a second signal comes (see
//!   `preempt`).

pub(crate) mod batch;
pub(crate) mod cgroup;
pub(crate) mod checked_config;
pub(crate) mod child_env;
pub(crate) mod config;
pub(crate) mod conn;
pub(crate) mod dvm_uri;
pub mod exec;
pub(crate) mod exit_status;
pub(crate) mod handshake;
pub(crate) mod health;
pub mod launch_policy;
pub(crate) mod launches;
pub mod limits;
pub(crate) mod metrics;
pub mod mpi;
pub(crate) mod preempt;
pub mod proc_stat;
pub(crate) mod process;
pub(crate) mod prted_cmd;
pub(crate) mod rank_output;
pub(crate) mod tracking;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use checked_config::{AgentConfig, BatchConfig, ConfigError};
pub use config::{AgentArgs, LogFormat};
use conn::{handle_connection, Shared};
pub use dvm_uri::write_dvm_uri_file;
pub use launches::Launches;
use limits::Pending;
use process::Reaper;
use tracking::Tracking;

/// Caps of the health port (requests in progress at once, overall and from one address).
const HEALTH_MAX_PENDING: usize = 32;
const HEALTH_MAX_PENDING_PER_PEER: usize = 8;
/// Caps of the metrics port (a Prometheus scrapes one request at a time).
const METRICS_MAX_PENDING: usize = 8;
const METRICS_MAX_PENDING_PER_PEER: usize = 4;
/// Extra time, beyond the kill grace period, that shutdown waits for connections to finish.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(15);

/// Why the agent could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot set up signal handling: {0}")]
    Signals(std::io::Error),
}

/// A bound, not yet serving agent.
pub struct Agent {
    shared: Arc<Shared>,
    listener: TcpListener,
    health: Option<TcpListener>,
    metrics: Option<TcpListener>,
    launches: Launches,
}

impl Agent {
    /// Binds the launch and health listeners. Must run inside a tokio runtime. `exec`
    /// requests may run only the configured prted; `launches` are what the agent starts
    /// itself when its configuration asks (the DVM head, batch mode's launcher).
    pub async fn bind(config: AgentConfig, launches: Launches) -> Result<Agent, ServeError> {
        let policy = exec::ExecPolicy::only(&config.prted);
        Agent::bind_with_exec(config, policy, launches).await
    }

    /// As [`bind`](Agent::bind), with the programs `exec` requests may run.
    pub(crate) async fn bind_with_exec(
        config: AgentConfig,
        exec_policy: exec::ExecPolicy,
        launches: Launches,
    ) -> Result<Agent, ServeError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let health = bind_opt(config.health_listen).await?;
        let metrics = bind_opt(config.metrics_listen).await?;
        let child_env = child_env::base_env(&config, |k| std::env::var_os(k), std::env::vars_os());
        let tracking = Tracking::detect(config.cgroup);
        let pending = Pending::new(
            "launch",
            config.limits.max_pending,
            config.limits.max_pending_per_peer,
        );
        Ok(Agent {
            shared: Arc::new(Shared {
                config,
                reaper: Reaper::new(),
                slot: Mutex::new(None),
                child_env,
                batch: Arc::new(batch::BatchState::default()),
                tracking,
                pending,
                failures: handshake::FailureLog::new(handshake::FAILURE_LOG_INTERVAL),
                exec: exec::ExecState::new(exec_policy),
                preemption: preempt::Preemption::new(),
                head_up: Arc::new(AtomicBool::new(false)),
                metrics: Arc::new(metrics::AgentMetrics::new()),
            }),
            listener,
            health,
            metrics,
            launches,
        })
    }

    /// The address launch connections reach.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// The address of the health endpoint, if enabled.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The address of the metrics endpoint, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes (or, in batch mode, the job has ended), then stops the
    /// running prted and returns the agent's exit code (0, or batch mode's status).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<u8, ServeError> {
        let Agent {
            shared,
            listener,
            health,
            metrics,
            launches,
        } = self;
        let sigchld = signal(SignalKind::child()).map_err(ServeError::Signals)?;
        let reaper_task = tokio::spawn(shared.reaper.clone().run(sigchld));
        if std::process::id() != 1 {
            if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
                warn!(error = %e, "cannot become a child subreaper; orphaned descendants of prted will be reaped by init instead");
            }
        }
        let serving = Arc::new(AtomicBool::new(true));
        let health_addr = health.as_ref().and_then(|l| l.local_addr().ok());
        let health_task = health.map(|l| {
            let pending = Pending::new("health", HEALTH_MAX_PENDING, HEALTH_MAX_PENDING_PER_PEER);
            tokio::spawn(health::serve(
                l,
                health::Endpoint::Health(serving.clone()),
                pending,
            ))
        });
        let metrics_addr = metrics.as_ref().and_then(|l| l.local_addr().ok());
        let metrics_task = metrics.map(|l| {
            let pending =
                Pending::new("metrics", METRICS_MAX_PENDING, METRICS_MAX_PENDING_PER_PEER);
            let endpoint = health::Endpoint::Metrics(shared.metrics.clone());
            tokio::spawn(health::serve(l, endpoint, pending))
        });
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: shared.config.listen,
            source,
        })?;
        log_listening(&shared.config, addr, health_addr, metrics_addr);

        let stop = CancellationToken::new();
        let roles = Roles::spawn(&shared, launches, health_addr, &stop);
        let mut conns = accept_until(&shared, &listener, &stop, shutdown).await;

        serving.store(false, Ordering::SeqCst);
        drop(listener);
        info!(
            connections = conns.len(),
            "shutting down: stopping prted and closing connections"
        );
        stop.cancel();
        let limit = shared.config.kill_grace + SHUTDOWN_SLACK;
        if tokio::time::timeout(limit, async { while conns.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            error!("connections did not finish within {limit:?}; aborting them");
            conns.shutdown().await;
        }
        roles.stop(limit).await;
        if let Some(slot) = *shared.slot() {
            error!(
                pid = slot.pid,
                "prted still registered at exit; killing its process group"
            );
            let _ = killpg(Pid::from_raw(slot.pid as i32), Signal::SIGKILL);
        }
        shared.reaper.reap_all();
        reaper_task.abort();
        for t in [health_task, metrics_task].into_iter().flatten() {
            t.abort();
        }
        let code = shared
            .batch
            .exit_code()
            .map(batch::process_exit_code)
            .unwrap_or(0);
        info!(code, "agent stopped");
        Ok(code)
    }
}

/// Accepts connections, each served by its own task in the set returned, until `shutdown`
/// completes or batch mode's job has ended.
async fn accept_until(
    shared: &Arc<Shared>,
    listener: &TcpListener,
    stop: &CancellationToken,
    shutdown: impl Future<Output = ()>,
) -> JoinSet<()> {
    let batch_done = shared.batch.done();
    let next_conn = AtomicU64::new(1);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let id = next_conn.fetch_add(1, Ordering::Relaxed);
                    conns.spawn(handle_connection(shared.clone(), stream, peer, id, stop.clone()));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = &mut shutdown => break,
            _ = batch_done.cancelled() => {
                info!(code = ?shared.batch.exit_code(), "batch mode: the job has ended");
                break;
            }
        }
    }
    conns
}

/// Logs what the agent serves, and loudly when it serves without authentication.
/// A listener on `addr`, if one is asked for.
async fn bind_opt(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, ServeError> {
    match addr {
        Some(addr) => TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|source| ServeError::Bind { addr, source }),
        None => Ok(None),
    }
}

fn log_listening(
    config: &AgentConfig,
    addr: SocketAddr,
    health_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
) {
    let shown = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_else(|| "off".into());
    let (auth, channel) = if config.secret.is_some() {
        ("hmac-sha256", crate::protocol::NOISE_PSK)
    } else {
        ("NONE (insecure)", crate::protocol::NOISE_NONE)
    };
    info!(
        addr = %addr,
        health = %shown(health_addr),
        metrics = %shown(metrics_addr),
        prted = %config.prted.display(),
        auth,
        channel,
        pid = std::process::id(),
        "listening"
    );
    if config.secret.is_none() {
        warn!(
            secret_file = %config.secret_file.display(),
            "INSECURE: no secret file, serving without authentication (--insecure-no-auth); \
             anyone who can reach {addr} can start prted"
        );
    }
}

/// The tasks of the agent's role besides serving connections: the DVM head, batch mode's
/// launcher or worker.
struct Roles {
    head: Option<JoinHandle<()>>,
    batch: Option<JoinHandle<()>>,
}

impl Roles {
    fn spawn(
        shared: &Arc<Shared>,
        launches: Launches,
        health_addr: Option<SocketAddr>,
        stop: &CancellationToken,
    ) -> Roles {
        let head = shared.config.head.clone().map(|head| {
            tokio::spawn((launches.head)(
                head,
                shared.config.clone(),
                shared.reaper.clone(),
                shared.tracking.clone(),
                health_addr,
                stop.clone(),
                shared.head_up.clone(),
            ))
        });
        let batch = shared.config.batch.clone().map(|b| match b {
            BatchConfig::Launcher { .. } => tokio::spawn((launches.batch_launcher)(
                shared.config.clone(),
                shared.reaper.clone(),
                health_addr,
                shared.batch.clone(),
                stop.clone(),
            )),
            BatchConfig::Worker {
                launcher_wait,
                stay,
            } => tokio::spawn(batch::run_worker(
                shared.batch.clone(),
                launcher_wait,
                stay,
                stop.clone(),
            )),
        });
        Roles { head, batch }
    }

    /// Waits (each at most `limit`) for the tasks to end after the stop, aborting the late.
    async fn stop(self, limit: Duration) {
        if let Some(mut t) = self.batch {
            if tokio::time::timeout(limit, &mut t).await.is_err() {
                error!("the batch command did not stop within {limit:?}; aborting it");
                t.abort();
            }
        }
        if let Some(mut t) = self.head {
            if tokio::time::timeout(limit, &mut t).await.is_err() {
                error!("the DVM head did not stop within {limit:?}; aborting it");
                t.abort();
            }
        }
    }
}

/// SIGTERM and SIGINT, listened for from the agent's first moments: the agent is a pod's
/// PID 1, and a signal to PID 1 that has no handler yet is dropped by the kernel, so a pod
/// deleted while its agent starts (or detects the image's MPI) would wait out its grace period
/// and be killed. A signal that comes before the agent serves ends it as soon as it does.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers (within a Tokio runtime).
    pub fn install() -> Result<Signals, ServeError> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(ServeError::Signals)?,
            int: signal(SignalKind::interrupt()).map_err(ServeError::Signals)?,
        })
    }
}

/// Binds, serves until SIGTERM or SIGINT (or a batch job's end), stops prted, returns the
/// agent's exit code; `exec_policy` names the programs `exec` requests may run; `signals`
/// installed as early as the caller could; `launches` as for [`Agent::bind`].
pub async fn run_until_signalled_with_exec(
    config: AgentConfig,
    exec_policy: exec::ExecPolicy,
    signals: Signals,
    launches: Launches,
) -> Result<u8, ServeError> {
    limits::raise_nofile_limit();
    let Signals { mut term, mut int } = signals;
    let agent = Agent::bind_with_exec(config, exec_policy, launches).await?;
    let shared = agent.shared.clone();
    agent
        .run(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            info!(signal = name, "received signal");
            let signum = if name == "SIGTERM" { 15 } else { 2 };
            told_to_end(&shared, signum);
            if name == "SIGTERM" {
                hold_for_preemption(&shared, async {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                })
                .await;
            }
        })
        .await
}

/// The pod is told to end (signal `signum`). In batch mode before the job ended, or with a
/// DVM up in the pod (a prted runs, or the DVM head's prte): the agent will exit with 128 +
/// the signal, whatever happens from now on, so that the pod ends `Failed` (a pod deleted or
/// evicted while its job runs has not succeeded, and its Job's pod failure policy must see
/// it). Otherwise (an idle agent, a DVM ended by `pterm`) it exits 0. Returns whether the
/// status is 128 + `signum`.
fn told_to_end(shared: &Shared, signum: i32) -> bool {
    let code = 128 + signum;
    if shared.config.batch.is_some() {
        if shared.batch.told_to_end(signum) {
            shared.preemption.told_to_end(signum);
            warn!(
                code,
                "batch mode: the pod is told to end before the job ended: the agent exits with 128 + the signal, whatever the command does now"
            );
            return true;
        }
        return false;
    }
    let prted = shared.slot().is_some();
    if (prted || shared.head_up.load(Ordering::SeqCst)) && shared.batch.told_to_end(signum) {
        shared.preemption.told_to_end(signum);
        let what = if prted {
            "a prted of the DVM runs here"
        } else {
            "the DVM head (prte) runs here"
        };
        warn!(
            code,
            "the pod is told to end while its DVM is up ({what}): the agent exits with 128 + the signal, the DVM loses this pod"
        );
        return true;
    }
    false
}

/// On SIGTERM with `--preempt-grace`, while a prted runs or a launcher watches: announces the
/// notice and waits until nothing runs nor watches, the deadline passes or `again` (a second
/// signal) completes.
async fn hold_for_preemption(shared: &Arc<Shared>, again: impl Future<Output = ()>) {
    let config = &shared.config;
    let busy = || shared.slot().is_some() || shared.preemption.watchers() > 0;
    let Some(hold) = preempt::Preemption::hold_for(config.preempt_grace, config.kill_grace) else {
        return;
    };
    if !busy() {
        return;
    }
    let deadline = tokio::time::Instant::now() + hold;
    info!(
        seconds = hold.as_secs(),
        "the pod is told to end: its launcher is told, prted keeps running until it ends or for the grace period (--preempt-grace less --kill-grace and 1 s)"
    );
    shared.preemption.announce(deadline);
    tokio::select! {
        _ = shared.preemption.idle(busy) => info!("prted ended and no launcher watches: stopping"),
        _ = tokio::time::sleep_until(deadline) => info!("the grace period is over: stopping prted"),
        _ = again => info!("a second signal: stopping prted now"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, batch: Option<BatchConfig>) -> AgentConfig {
        AgentConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            health_listen: None,
            metrics_listen: None,
            prted: "/bin/true".into(),
            secret: None,
            secret_file: "/nonexistent".into(),
            tmpdir: dir.to_owned(),
            kill_grace: Duration::from_secs(1),
            preempt_grace: Duration::ZERO,
            max_frame: 4096,
            pass_env: vec![],
            dvm_uri_file: dir.join("dvm.uri"),
            head: None,
            batch,
            cgroup: false,
            limits: Default::default(),
            heartbeat_timeout: None,
            mpi: None,
        }
    }

    /// Launches that end at once: the test binds agents without a head or a batch launcher.
    const NONE: Launches = Launches {
        head: |_, _, _, _, _, _, _| Box::pin(async {}),
        batch_launcher: |_, _, _, _, _| Box::pin(async {}),
    };

    #[tokio::test]
    async fn told_to_end_under_a_running_dvm_is_not_a_success() {
        let d = tempfile::tempdir().unwrap();
        let policy = exec::ExecPolicy::only(std::path::Path::new("/bin/true"));
        // An idle interactive agent (no DVM, or one ended by pterm): 0.
        let agent = Agent::bind_with_exec(config(d.path(), None), policy.clone(), NONE)
            .await
            .unwrap();
        assert!(!told_to_end(&agent.shared, 15));
        assert_eq!(agent.shared.batch.exit_code(), None);
        // With the DVM head's prte up: 128 + the signal, kept when prte ends after.
        let agent = Agent::bind_with_exec(config(d.path(), None), policy.clone(), NONE)
            .await
            .unwrap();
        agent.shared.head_up.store(true, Ordering::SeqCst);
        assert!(told_to_end(&agent.shared, 15));
        agent.shared.head_up.store(false, Ordering::SeqCst);
        assert!(!told_to_end(&agent.shared, 2), "decided once");
        assert_eq!(agent.shared.batch.exit_code(), Some(143));
        // With a prted of the DVM running: the same.
        let agent = Agent::bind_with_exec(config(d.path(), None), policy.clone(), NONE)
            .await
            .unwrap();
        *agent.shared.slot() = Some(conn::Slot {
            pid: 1,
            peer: "10.0.0.1:1".parse().unwrap(),
            conn: 1,
        });
        assert!(told_to_end(&agent.shared, 2));
        *agent.shared.slot() = None;
        assert_eq!(agent.shared.batch.exit_code(), Some(130));
        // Batch mode keeps its own rule (the job's end decides).
        let worker = Some(BatchConfig::Worker {
            launcher_wait: Duration::from_secs(1),
            stay: false,
        });
        let agent = Agent::bind_with_exec(config(d.path(), worker), policy, NONE)
            .await
            .unwrap();
        agent.shared.batch.decide(0);
        assert!(!told_to_end(&agent.shared, 15));
        assert_eq!(agent.shared.batch.exit_code(), Some(0));
    }
}
