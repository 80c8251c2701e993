//! `prrte-k8s-agent`: runs in every pod and starts PRRTE's prted when an authenticated launcher
//! asks it to (see [`crate::protocol`] for the wire protocol).
//!
//! * Only the configured prted executable is ever started, with `argv[1..]` and extra
//!   `PRTE_*`/`PMIX_*`/`OMPI_*` variables from the request, in its own process group, with
//!   stdin from `/dev/null` and stdout/stderr shared with the agent (raw, unprefixed).
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
//!   descendants of prted that left its process group are reparented to it; those left in the
//!   agent's session after prted ends are stopped too. No process outlives its job.
//! * SIGTERM/SIGINT: stop accepting, report 503 on the health endpoint, stop the running prted
//!   as above (reporting `exited` to its launcher), and exit 0.

pub mod batch;
pub mod child_env;
pub mod config;
pub mod dvm_uri;
pub mod exec;
pub mod handshake;
pub mod head;
pub mod health;
pub mod launch_policy;
pub mod limits;
pub mod process;
pub mod tracking;

use std::ffi::OsString;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::protocol::{
    self, decode_request, recv_frame, send_frame, validate_launch, FramedConn, ProtocolError,
    Reply, Request, Session, HANDSHAKE_MAX_FRAME,
};
pub use config::{
    AgentArgs, AgentConfig, BatchConfig, BatchRole, CgroupMode, ConfigError, ConnLimits, DvmHead,
    HeadConfig, LogFormat,
};
pub(crate) use dvm_uri::{publish_dvm_uri, publish_dvm_uri_dir, unpublish_dvm_uri};
pub use dvm_uri::{write_dvm_uri_file, FileId};
use handshake::{agent_handshake, describe_bad_frame, SEND_TIMEOUT};
use limits::Pending;
use process::{exited_reply, ExitStatus, Job, Reaper};
use tracking::Tracking;

/// Caps of the health port (requests in progress at once, overall and from one address).
const HEALTH_MAX_PENDING: usize = 32;
const HEALTH_MAX_PENDING_PER_PEER: usize = 8;
/// Extra time, beyond the kill grace period, that shutdown waits for connections to finish.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(15);
/// How long, and how many bytes, a closing connection is drained.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_MAX_BYTES: usize = 1 << 20;
/// prted's flag that keeps it from forking into a new session (`setsid()`), which would take
/// the daemon out of the agent's process group; always passed.
pub const LEAVE_SESSION_ATTACHED: &str = "--leave-session-attached";

/// Why the agent could not serve.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot set up signal handling: {0}")]
    Signals(std::io::Error),
}

/// Which connection launched the running prted.
#[derive(Debug, Clone, Copy)]
struct Slot {
    pid: u32,
    peer: SocketAddr,
    conn: u64,
}

struct Shared {
    config: AgentConfig,
    reaper: Arc<Reaper>,
    slot: Mutex<Option<Slot>>,
    child_env: Vec<(OsString, OsString)>,
    batch: Arc<batch::BatchState>,
    /// How the processes of a launch are tracked (a cgroup per launch, or the sweep).
    tracking: Tracking,
    /// Connections that have not authenticated yet.
    pending: Arc<Pending>,
    /// What `exec` requests may run.
    exec: exec::ExecState,
}

impl Shared {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Slot>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running prted of one connection; dropping it frees the agent's job slot and, if prted's
/// group was not stopped properly (a panic, an aborted task), kills it outright.
struct ActiveJob {
    job: Job,
    shared: Arc<Shared>,
    conn: u64,
    peer: SocketAddr,
    started: Instant,
    /// The DVM URI file this prted's launch published (removed when the job ends).
    published_uri: Option<FileId>,
}

impl Drop for ActiveJob {
    fn drop(&mut self) {
        if let Some(id) = self.published_uri {
            unpublish_dvm_uri(&self.shared.config.dvm_uri_file, Some(id));
        }
        // Before the slot is freed: no second prted while the first one's group is alive.
        self.job.kill_leftovers();
        let mut slot = self.shared.slot();
        if slot.is_some_and(|s| s.conn == self.conn) {
            *slot = None;
        }
    }
}

/// A bound, not yet serving agent.
pub struct Agent {
    shared: Arc<Shared>,
    listener: TcpListener,
    health: Option<TcpListener>,
}

impl Agent {
    /// Binds the launch and health listeners. Must run inside a tokio runtime. `exec`
    /// requests may run only the configured prted.
    pub async fn bind(config: AgentConfig) -> Result<Agent, AgentError> {
        let policy = exec::ExecPolicy::only(&config.prted);
        Agent::bind_with_exec(config, policy).await
    }

    /// As [`bind`](Agent::bind), with the programs `exec` requests may run.
    pub async fn bind_with_exec(
        config: AgentConfig,
        exec_policy: exec::ExecPolicy,
    ) -> Result<Agent, AgentError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| AgentError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let health = match config.health_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| AgentError::Bind { addr, source })?,
            ),
            None => None,
        };
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
                exec: exec::ExecState::new(exec_policy),
            }),
            listener,
            health,
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

    /// Serves until `shutdown` completes (or, in batch mode, the job has ended), then stops the
    /// running prted and returns the agent's exit code (0, or batch mode's status).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<u8, AgentError> {
        let Agent {
            shared,
            listener,
            health,
        } = self;
        let sigchld = signal(SignalKind::child()).map_err(AgentError::Signals)?;
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
            tokio::spawn(health::serve(l, serving.clone(), pending))
        });
        let addr = listener.local_addr().map_err(|source| AgentError::Bind {
            addr: shared.config.listen,
            source,
        })?;
        let auth = if shared.config.secret.is_some() {
            "hmac-sha256"
        } else {
            "NONE (insecure)"
        };
        info!(
            addr = %addr,
            health = %health_addr.map(|a| a.to_string()).unwrap_or_else(|| "off".into()),
            prted = %shared.config.prted.display(),
            auth,
            pid = std::process::id(),
            "listening"
        );
        if shared.config.secret.is_none() {
            warn!(
                secret_file = %shared.config.secret_file.display(),
                "INSECURE: no secret file, serving without authentication (--insecure-no-auth); \
                 anyone who can reach {addr} can start prted"
            );
        }

        let stop = CancellationToken::new();
        let head_task = shared.config.head.clone().map(|head| {
            tokio::spawn(head::run(
                head,
                shared.config.clone(),
                shared.reaper.clone(),
                shared.tracking.clone(),
                health_addr,
                stop.clone(),
            ))
        });
        let batch_task = shared.config.batch.clone().map(|b| match b {
            BatchConfig::Launcher { .. } => tokio::spawn(batch::run_launcher(
                shared.config.clone(),
                shared.reaper.clone(),
                health_addr,
                shared.batch.clone(),
                stop.clone(),
            )),
            BatchConfig::Worker { launcher_wait } => tokio::spawn(batch::run_worker(
                shared.batch.clone(),
                launcher_wait,
                stop.clone(),
            )),
        });
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
        if let Some(mut t) = batch_task {
            if tokio::time::timeout(limit, &mut t).await.is_err() {
                error!("the batch command did not stop within {limit:?}; aborting it");
                t.abort();
            }
        }
        if let Some(mut t) = head_task {
            if tokio::time::timeout(limit, &mut t).await.is_err() {
                error!("the DVM head did not stop within {limit:?}; aborting it");
                t.abort();
            }
        }
        if let Some(slot) = *shared.slot() {
            error!(
                pid = slot.pid,
                "prted still registered at exit; killing its process group"
            );
            let _ = killpg(Pid::from_raw(slot.pid as i32), Signal::SIGKILL);
        }
        shared.reaper.reap_all();
        reaper_task.abort();
        if let Some(t) = health_task {
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

/// Binds, serves until SIGTERM or SIGINT (or a batch job's end), stops prted, returns the
/// agent's exit code.
pub async fn run_until_signalled(config: AgentConfig) -> Result<u8, AgentError> {
    let policy = exec::ExecPolicy::only(&config.prted);
    run_until_signalled_with_exec(config, policy).await
}

/// As [`run_until_signalled`], with the programs `exec` requests may run.
pub async fn run_until_signalled_with_exec(
    config: AgentConfig,
    exec_policy: exec::ExecPolicy,
) -> Result<u8, AgentError> {
    limits::raise_nofile_limit();
    let mut term = signal(SignalKind::terminate()).map_err(AgentError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(AgentError::Signals)?;
    let agent = Agent::bind_with_exec(config, exec_policy).await?;
    agent
        .run(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            info!(signal = name, "received signal");
        })
        .await
}

fn set_keepalive(stream: &TcpStream) {
    if let Err(e) = protocol::set_keepalive(stream) {
        debug!(error = %e, "cannot enable TCP keepalive");
    }
}

/// Closes a connection so that the peer reads everything sent so far (in particular a final
/// `error` or `refused`): FIN first, then discard what the peer still sends for a short while,
/// instead of closing with unread data (which makes the kernel send a reset).
async fn close_gracefully(conn: FramedConn<TcpStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = conn.into_inner();
    if stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut buf = [0u8; 8192];
        let mut total = 0usize;
        while total < LINGER_MAX_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

async fn wait_job(job: &mut Option<ActiveJob>) -> ExitStatus {
    match job {
        Some(j) => j.job.wait_exit().await,
        None => std::future::pending().await,
    }
}

/// What to do with the connection after a request.
enum Next {
    Continue,
    Close(String),
    /// Hand the connection to an `exec` request.
    Exec(exec::ExecRequest),
}

struct Conn {
    shared: Arc<Shared>,
    conn: FramedConn<TcpStream>,
    session: Session,
    peer: SocketAddr,
    id: u64,
    job: Option<ActiveJob>,
}

impl Conn {
    async fn reply(&mut self, msg: &Reply) -> Result<(), ProtocolError> {
        let frame = self.session.seal(msg);
        send_frame(&mut self.conn, frame, SEND_TIMEOUT).await
    }

    /// Stops the running prted (if any), frees the slot and returns its pid and status.
    async fn stop_job(&mut self, grace: Duration) -> Option<(u32, ExitStatus)> {
        let mut active = self.job.take()?;
        let status = active.job.terminate(grace, &self.shared.reaper).await;
        let pid = active.job.pid;
        info!(
            peer = %active.peer,
            pid,
            status = %status,
            ran_ms = active.started.elapsed().as_millis() as u64,
            "prted stopped"
        );
        drop(active);
        Some((pid, status))
    }

    async fn handle_frame(&mut self, frame: &[u8]) -> Next {
        let body = match self.session.open(frame) {
            Ok(b) => b,
            Err(e) => {
                let reason = format!("frame refused: {}", crate::text::echo(&e.to_string()));
                warn!(peer = %self.peer, %reason, "closing the connection");
                let _ = self
                    .reply(&Reply::Error {
                        reason: reason.clone(),
                    })
                    .await;
                return Next::Close(reason);
            }
        };
        let t0 = Instant::now();
        let request = match decode_request(body.as_bytes()) {
            Ok(r) => r,
            Err(reason) => {
                let reason = crate::text::echo(&reason);
                info!(peer = %self.peer, request = "invalid", outcome = "refused", %reason,
                      duration_ms = t0.elapsed().as_millis() as u64, "request");
                return self.send_or_close(&Reply::Failed { reason }).await;
            }
        };
        let kind = request.kind();
        let request = match request {
            Request::Exec {
                argv,
                env,
                cwd,
                stdin,
            } => {
                if self.job.is_some() {
                    let reason = "this connection launched a prted; send exec on a new connection";
                    return self
                        .send_or_close(&Reply::Failed {
                            reason: reason.into(),
                        })
                        .await;
                }
                return Next::Exec(exec::ExecRequest {
                    argv,
                    env,
                    cwd,
                    stdin,
                });
            }
            Request::Stdin { .. } | Request::StdinClose {} | Request::Signal { .. } => {
                info!(peer = %self.peer, request = kind, outcome = "refused: no program runs on this connection", "request");
                let reason = format!("`{kind}` without a running program: send `exec` first");
                return self.send_or_close(&Reply::Failed { reason }).await;
            }
            r => r,
        };
        let (reply, outcome) = match request {
            Request::Launch { argv, env, dvm_uri } => self.launch(argv, env, dvm_uri),
            Request::Kill { grace_ms } => {
                let mut grace = self.shared.config.kill_grace;
                if let Some(ms) = grace_ms {
                    grace = grace.min(Duration::from_millis(ms));
                }
                match self.stop_job(grace).await {
                    Some((pid, status)) => (
                        exited_reply(pid, status),
                        format!("killed pid {pid}: {status}"),
                    ),
                    None => {
                        let reason = match *self.shared.slot() {
                            Some(s) => format!(
                                "the running prted (pid {}) was launched by another connection ({}); only that connection can kill it",
                                s.pid, s.peer
                            ),
                            None => "no prted is running".to_owned(),
                        };
                        (
                            Reply::Failed {
                                reason: reason.clone(),
                            },
                            format!("refused: {reason}"),
                        )
                    }
                }
            }
            Request::Ping {} => (Reply::Pong {}, "pong".to_owned()),
            Request::Attach {} => self
                .shared
                .batch
                .attach(&self.shared.config, self.id, self.peer),
            Request::Finish { code } => {
                self.shared
                    .batch
                    .finish(&self.shared.config, self.peer, code)
            }
            Request::Exec { .. }
            | Request::Stdin { .. }
            | Request::StdinClose {}
            | Request::Signal { .. } => unreachable!("handled above"),
            Request::Status {} => {
                let slot = *self.shared.slot();
                (
                    Reply::Status {
                        running: slot.is_some(),
                        pid: slot.map(|s| s.pid),
                        launched_by: slot.map(|s| s.peer.to_string()),
                    },
                    format!("running: {}", slot.is_some()),
                )
            }
        };
        info!(peer = %self.peer, request = kind, %outcome,
              duration_ms = t0.elapsed().as_millis() as u64, "request");
        self.send_or_close(&reply).await
    }

    async fn send_or_close(&mut self, reply: &Reply) -> Next {
        match self.reply(reply).await {
            Ok(()) => Next::Continue,
            Err(e) => Next::Close(format!("cannot send reply: {e}")),
        }
    }

    fn launch(
        &mut self,
        argv: Vec<String>,
        env: std::collections::BTreeMap<String, String>,
        dvm_uri: Option<String>,
    ) -> (Reply, String) {
        let refuse = |reason: String| {
            let reason = crate::text::echo(&reason);
            let outcome = format!("refused: {reason}");
            (Reply::Failed { reason }, outcome)
        };
        if let Err(reason) = validate_launch(&argv, &env) {
            return refuse(reason);
        }
        if let Err(reason) = launch_policy::check_launch(&argv, &env) {
            return refuse(reason);
        }
        if let Some(Err(reason)) = dvm_uri.as_deref().map(protocol::validate_dvm_uri) {
            return refuse(reason);
        }
        if let Some(Err(reason)) = dvm_uri
            .as_deref()
            .map(|uri| launch_policy::check_dvm_uri_host(uri, self.peer.ip()))
        {
            return refuse(reason);
        }
        let config = &self.shared.config;
        let mut slot = self.shared.slot();
        if let Some(s) = *slot {
            return refuse(format!(
                "a prted launched by {} is already running (pid {}); this agent runs one at a time",
                s.peer, s.pid
            ));
        }
        let mut cmd = Command::new(&config.prted);
        cmd.args(&argv)
            .args(
                (!argv.iter().any(|a| a == LEAVE_SESSION_ATTACHED))
                    .then_some(LEAVE_SESSION_ATTACHED),
            )
            .env_clear()
            .envs(self.shared.child_env.iter().map(|(k, v)| (k, v)))
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .process_group(0);
        match self
            .shared
            .reaper
            .spawn_job(&mut cmd, &self.shared.tracking)
        {
            Ok(job) => {
                let pid = job.pid;
                debug!(pid, tracking = job.tracking_label(), "prted started");
                *slot = Some(Slot {
                    pid,
                    peer: self.peer,
                    conn: self.id,
                });
                drop(slot);
                let published_uri = dvm_uri
                    .as_deref()
                    .and_then(|uri| publish_dvm_uri(&config.dvm_uri_file, uri));
                self.job = Some(ActiveJob {
                    job,
                    shared: self.shared.clone(),
                    conn: self.id,
                    peer: self.peer,
                    started: Instant::now(),
                    published_uri,
                });
                (Reply::Started { pid }, format!("started pid {pid}"))
            }
            Err(e) => {
                let reason = format!(
                    "cannot execute {}: {e}; --prted (PRRTE_K8S_PRTED) must name an executable \
                     prted in this pod's image",
                    config.prted.display()
                );
                (
                    Reply::Failed {
                        reason: reason.clone(),
                    },
                    format!("failed: {reason}"),
                )
            }
        }
    }
}

async fn handle_connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    stop: CancellationToken,
) {
    let opened = Instant::now();
    set_keepalive(&stream);
    if shared.config.secret.is_none() {
        warn!(%peer, "INSECURE: accepting a connection without authentication (--insecure-no-auth)");
    } else {
        debug!(%peer, "connection accepted");
    }
    let ticket = shared.pending.admit(peer.ip());
    let mut framed = protocol::framed(stream, HANDSHAKE_MAX_FRAME);
    let deadline = shared.config.limits.handshake_timeout;
    let session = tokio::select! {
        s = tokio::time::timeout(deadline, agent_handshake(&shared.config, &mut framed, peer)) => match s {
            Ok(s) => s,
            Err(_) => {
                debug!(%peer, "no complete handshake within {deadline:?}; closing");
                None
            }
        },
        _ = stop.cancelled() => None,
        _ = ticket.cancel.cancelled() => {
            debug!(%peer, "dropping an unauthenticated connection (too many pending)");
            return;
        }
    };
    drop(ticket);
    let Some(session) = session else {
        close_gracefully(framed).await;
        return;
    };
    framed
        .codec_mut()
        .set_max_frame_length(shared.config.max_frame);
    let mut c = Conn {
        shared: shared.clone(),
        conn: framed,
        session,
        peer,
        id,
        job: None,
    };

    let mut exec_request = None;
    let reason = loop {
        tokio::select! {
            frame = recv_frame(&mut c.conn, None) => match frame {
                Ok(bytes) => match c.handle_frame(&bytes).await {
                    Next::Continue => {}
                    Next::Close(reason) => break reason,
                    Next::Exec(req) => {
                        exec_request = Some(req);
                        break String::new();
                    }
                },
                Err(ProtocolError::Closed) => break "closed by the launcher".to_owned(),
                Err(e @ (ProtocolError::FrameTooLarge { .. } | ProtocolError::Malformed(_))) => {
                    let reason = describe_bad_frame(&e);
                    warn!(%peer, %reason, "closing the connection");
                    let _ = c.reply(&Reply::Error { reason: reason.clone() }).await;
                    break reason;
                }
                Err(e) => break e.to_string(),
            },
            status = wait_job(&mut c.job) => {
                let pid = c.job.as_ref().map(|j| j.job.pid).unwrap_or_default();
                info!(%peer, pid, status = %status, "prted exited");
                let (pid, status) = c.stop_job(shared.config.kill_grace).await.unwrap_or((pid, status));
                if let Err(e) = c.reply(&exited_reply(pid, status)).await {
                    break format!("cannot report prted's exit: {e}");
                }
            }
            _ = stop.cancelled() => {
                if let Some((pid, status)) = c.stop_job(shared.config.kill_grace).await {
                    let _ = c.reply(&exited_reply(pid, status)).await;
                }
                let _ = c.reply(&Reply::Error { reason: "the agent is shutting down".into() }).await;
                break "agent shutting down".to_owned();
            }
        }
    };
    let reason = match exec_request {
        Some(req) => {
            let ctx = exec::Ctx {
                config: &shared.config,
                reaper: &shared.reaper,
                tracking: &shared.tracking,
                base_env: &shared.child_env,
                state: &shared.exec,
            };
            exec::serve(ctx, &mut c.conn, &mut c.session, peer, req, &stop).await
        }
        None => reason,
    };
    if let Some(pid) = c.job.as_ref().map(|j| j.job.pid) {
        warn!(%peer, pid, %reason, "the launcher's connection ended while prted runs; stopping prted's process group");
        c.stop_job(shared.config.kill_grace).await;
    }
    shared.batch.connection_closed(id);
    close_gracefully(c.conn).await;
    info!(%peer, %reason, connected_ms = opened.elapsed().as_millis() as u64, "connection closed");
}
