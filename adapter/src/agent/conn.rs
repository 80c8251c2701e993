//! One connection to the agent, after it was accepted: the handshake, then requests until the
//! launcher closes it or the agent shuts down. The connection that launched prted controls it
//! (`kill`, or the connection's end, stops prted's process group); `exec` hands the connection
//! to [`super::exec`].

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::batch::BatchState;
use super::checked_config::AgentConfig;
use super::dvm_uri::{publish_dvm_uri, unpublish_dvm_uri, FileId};
use super::exec;
use super::exit_status::{exited_reply, ExitStatus};
use super::handshake::{agent_handshake, describe_bad_frame, FailureLog, SEND_TIMEOUT};
use super::launch_policy;
use super::limits::Pending;
use super::metrics::{self, AgentMetrics, Via};
use super::preempt::{self, Preemption, WatchGuard};
use super::process::{Job, Reaper};
use super::prted_cmd::prted_args;
use super::tracking::Tracking;
use crate::protocol::liveness::SilenceWatch;
use crate::protocol::{
    self, parse_request, recv_frame, send_frame, FramedConn, ProtocolError, Reply, Request,
    Session, HANDSHAKE_MAX_FRAME,
};

/// How long, and how many bytes, a closing connection is drained.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_MAX_BYTES: usize = 1 << 20;
/// Which connection launched the running prted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub(super) pid: u32,
    pub(super) peer: SocketAddr,
    pub(super) conn: u64,
}

/// What the agent's connections share.
pub(super) struct Shared {
    pub(super) config: AgentConfig,
    pub(super) reaper: Arc<Reaper>,
    pub(super) slot: Mutex<Option<Slot>>,
    pub(super) child_env: Vec<(OsString, OsString)>,
    pub(super) batch: Arc<BatchState>,
    /// How the processes of a launch are tracked (a cgroup per launch, or the sweep).
    pub(super) tracking: Tracking,
    /// Connections that have not authenticated yet.
    pub(super) pending: Arc<Pending>,
    /// Failed handshakes, logged a few at a time.
    pub(super) failures: Arc<FailureLog>,
    /// What `exec` requests may run.
    pub(super) exec: exec::ExecState,
    /// The preemption notice (SIGTERM with `--preempt-grace`).
    pub(super) preemption: Arc<Preemption>,
    /// Whether the DVM head's prte runs in this pod (`--dvm-head`).
    pub(super) head_up: Arc<std::sync::atomic::AtomicBool>,
    /// The counters `/metrics` shows.
    pub(super) metrics: Arc<AgentMetrics>,
}

impl Shared {
    pub(super) fn slot(&self) -> std::sync::MutexGuard<'_, Option<Slot>> {
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
        drop(slot);
        self.shared.preemption.poke();
    }
}

fn set_keepalive(stream: &TcpStream) {
    if let Err(e) = protocol::set_keepalive(stream) {
        debug!(error = %e, "cannot enable TCP keepalive");
    }
}

/// Closes a connection so that the peer reads everything sent so far (in particular a final
/// `error` or `refused`): FIN first, then discard what the peer still sends for a short while
/// (at most [`LINGER`] and [`LINGER_MAX_BYTES`]), instead of closing with unread data (which
/// makes the kernel send a reset). An unauthenticated connection keeps its place among the
/// pending ones meanwhile: `evicted` ends the linger when the caps drop it.
async fn close_gracefully(conn: FramedConn<TcpStream>, evicted: Option<&CancellationToken>) {
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
    let evicted = async {
        match evicted {
            Some(t) => t.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(LINGER, drain) => {}
        _ = evicted => {}
    }
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

/// How a connection's requests ended.
enum Ended {
    /// The connection is to be closed, for this reason.
    Closed(String),
    /// An `exec` request takes the connection over.
    Exec(exec::ExecRequest),
}

struct Conn {
    shared: Arc<Shared>,
    conn: FramedConn<TcpStream>,
    session: Session,
    peer: SocketAddr,
    id: u64,
    job: Option<ActiveJob>,
    /// When the launcher was last heard of; from its first `ping` on it sends heartbeats, so its
    /// silence means it is gone.
    silence: SilenceWatch,
    /// The batch launcher attached on this connection (see `super::batch`).
    attached: bool,
    /// Set by `watch`: this connection is told `preempt`.
    watch: Option<WatchGuard>,
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
        let request = match parse_request(body.as_bytes()) {
            Ok(r) => r,
            Err(e) => {
                let reason = crate::text::echo(&e.to_string());
                info!(peer = %self.peer, request = "invalid", outcome = "refused", %reason,
                      duration_ms = t0.elapsed().as_millis() as u64, "request");
                return self.send_or_close(&Reply::Failed { reason }).await;
            }
        };
        let kind = request.kind();
        let (reply, outcome) = match request {
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
            Request::Launch { argv, env, dvm_uri } => self.launch(argv, env, dvm_uri),
            Request::Kill { grace_ms } => self.kill(grace_ms).await,
            Request::Ping {} => {
                // Heartbeats come every few seconds: not worth a log line each.
                self.silence.ping();
                debug!(peer = %self.peer, "ping");
                return self.send_or_close(&Reply::Pong {}).await;
            }
            Request::Attach {} => {
                let r = self
                    .shared
                    .batch
                    .attach(&self.shared.config, self.id, self.peer);
                // The batch launcher's connection: watched for silence once it pings.
                self.attached |= matches!(r.0, Reply::Ack {});
                r
            }
            Request::RankOutput { rank, fd, data } => {
                let attached = self.attached;
                return match self.shared.batch.rank_output(attached, rank, fd, &data) {
                    Ok(()) => Next::Continue,
                    Err(reason) => self.send_or_close(&Reply::Failed { reason }).await,
                };
            }
            Request::Finish { code } => {
                self.shared
                    .batch
                    .finish(&self.shared.config, self.peer, code)
            }
            Request::Status {} => self.status(),
            Request::Watch {} => {
                if self.watch.is_none() {
                    self.watch = Some(self.shared.preemption.watch());
                }
                (Reply::Ack {}, "watching".to_owned())
            }
        };
        info!(peer = %self.peer, request = kind, %outcome,
              duration_ms = t0.elapsed().as_millis() as u64, "request");
        self.send_or_close(&reply).await
    }

    /// `kill`: stops the prted this connection launched, within `grace_ms` if shorter than the
    /// agent's grace period.
    async fn kill(&mut self, grace_ms: Option<u64>) -> (Reply, String) {
        let mut grace = self.shared.config.kill_grace;
        if let Some(ms) = grace_ms {
            grace = grace.min(Duration::from_millis(ms));
        }
        match self.stop_job(grace).await {
            Some((pid, status)) => (
                exited_reply(pid, status, None),
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

    /// `status`: whether a prted runs, and who launched it.
    fn status(&self) -> (Reply, String) {
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

    /// Serves requests until the connection is done (closed, or taken over by an `exec`
    /// request). Reports prted's exit when it ends, and
    /// stops it when the agent shuts down.
    async fn serve(&mut self, stop: &CancellationToken) -> Ended {
        let peer = self.peer;
        let grace = self.shared.config.kill_grace;
        let mut notice = self.shared.preemption.subscribe();
        let mut told = false;
        loop {
            let tell = !told && (self.job.is_some() || self.watch.is_some());
            // Watched only while this connection's prted runs (or the batch launcher is
            // attached on it) and its launcher sends heartbeats.
            let watch = self.silence.watched() && (self.job.is_some() || self.attached);
            let deadline = self.silence.deadline();
            tokio::select! {
                biased;
                frame = recv_frame(&mut self.conn, None) => match frame {
                    Ok(bytes) => {
                        self.silence.heard();
                        match self.handle_frame(&bytes).await {
                            Next::Continue => {}
                            Next::Close(reason) => return Ended::Closed(reason),
                            Next::Exec(req) => return Ended::Exec(req),
                        }
                    }
                    Err(ProtocolError::Closed) => return Ended::Closed("closed by the launcher".to_owned()),
                    Err(e @ (ProtocolError::FrameTooLarge { .. } | ProtocolError::Malformed(_))) => {
                        let reason = describe_bad_frame(&e);
                        warn!(%peer, %reason, "closing the connection");
                        let _ = self.reply(&Reply::Error { reason: reason.clone() }).await;
                        return Ended::Closed(reason);
                    }
                    Err(e) => return Ended::Closed(e.to_string()),
                },
                status = wait_job(&mut self.job) => {
                    let pid = self.job.as_ref().map(|j| j.job.pid).unwrap_or_default();
                    info!(%peer, pid, status = %status, "prted exited");
                    let (pid, status) = self.stop_job(grace).await.unwrap_or((pid, status));
                    if let Err(e) = self.reply(&exited_reply(pid, status, None)).await {
                        return Ended::Closed(format!("cannot report prted's exit: {e}"));
                    }
                }
                _ = stop.cancelled() => {
                    if let Some((pid, status)) = self.stop_job(grace).await {
                        let told = self.shared.preemption.ended_by();
                        let _ = self.reply(&exited_reply(pid, status, told)).await;
                    }
                    let _ = self.reply(&Reply::Error { reason: "the agent is shutting down".into() }).await;
                    return Ended::Closed("agent shutting down".to_owned());
                }
                deadline = preempt::notice(&mut notice), if tell => {
                    told = true;
                    let seconds = preempt::seconds_left(deadline);
                    info!(%peer, seconds, "the pod is told to end: telling the launcher");
                    if let Err(e) = self.reply(&Reply::Preempt { seconds }).await {
                        return Ended::Closed(format!("cannot send the preemption notice: {e}"));
                    }
                }
                // Last: a frame that arrived during a stall counts before the silence.
                _ = tokio::time::sleep_until(deadline), if watch => {
                    if !self.silence.woke(deadline) {
                        continue;
                    }
                    let reason = self.silence.reason("the launcher");
                    self.shared.metrics.heartbeats_missed(metrics::Peer::Launcher);
                    warn!(%peer, %reason, "closing the connection (and stopping its prted, if any)");
                    if let Some((pid, status)) = self.stop_job(grace).await {
                        let _ = self.reply(&exited_reply(pid, status, None)).await;
                    }
                    return Ended::Closed(reason);
                }
            }
        }
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
        let argv = match launch_policy::check_launch_request(
            &argv,
            &env,
            dvm_uri.as_deref(),
            self.peer.ip(),
        ) {
            Ok(argv) => argv,
            Err(e) => return refuse(e.to_string()),
        };
        debug!(peer = %self.peer, argv = ?argv.iter().map(|a| crate::text::echo(a)).collect::<Vec<_>>(),
               env = ?env.keys().map(|k| crate::text::echo(k)).collect::<Vec<_>>(), "launch: prted's arguments");
        let config = &self.shared.config;
        let mut slot = self.shared.slot();
        if let Some(s) = *slot {
            return refuse(format!(
                "a prted launched by {} is already running (pid {}); this agent runs one at a time",
                s.peer, s.pid
            ));
        }
        // No `process_group(0)`: a process group leader cannot call `setsid()`, and prted makes
        // itself the leader of a new session and group at once (`--set-sid`, see
        // [`super::prted_cmd::SET_SID`]).
        // Until it has, the agent signals it by its pid as well as by its group.
        let mut cmd = Command::new(&config.prted);
        cmd.args(prted_args(&argv))
            .env_clear()
            .envs(self.shared.child_env.iter().map(|(k, v)| (k, v)))
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        match self
            .shared
            .reaper
            .spawn_job(&mut cmd, &self.shared.tracking)
        {
            Ok(job) => {
                let pid = job.pid;
                debug!(pid, tracking = job.tracking_label(), "prted started");
                self.shared.metrics.daemon_started(Via::Launch);
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

pub(super) async fn handle_connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    stop: CancellationToken,
) {
    let opened = Instant::now();
    let Some((framed, session)) = authenticate(&shared, stream, peer, &stop).await else {
        return;
    };
    let mut c = Conn {
        shared: shared.clone(),
        conn: framed,
        session,
        peer,
        id,
        job: None,
        silence: SilenceWatch::new(shared.config.heartbeat_timeout),
        attached: false,
        watch: None,
    };

    let reason = match c.serve(&stop).await {
        Ended::Exec(req) => {
            let ctx = exec::Ctx {
                config: &shared.config,
                reaper: &shared.reaper,
                tracking: &shared.tracking,
                base_env: &shared.child_env,
                state: &shared.exec,
                metrics: &shared.metrics,
            };
            exec::serve(ctx, &mut c.conn, &mut c.session, peer, req, &stop).await
        }
        Ended::Closed(reason) => reason,
    };
    if let Some(pid) = c.job.as_ref().map(|j| j.job.pid) {
        warn!(%peer, pid, %reason, "the launcher's connection ended while prted runs; stopping prted's process group");
        c.stop_job(shared.config.kill_grace).await;
    }
    shared.batch.connection_closed(id);
    close_gracefully(c.conn, None).await;
    info!(%peer, %reason, connected_ms = opened.elapsed().as_millis() as u64, "connection closed");
}

/// Runs the handshake on a new connection (bounded, and dropped early when too many are
/// pending); `None` when the connection is over (it has been closed then).
async fn authenticate(
    shared: &Shared,
    stream: TcpStream,
    peer: SocketAddr,
    stop: &CancellationToken,
) -> Option<(FramedConn<TcpStream>, Session)> {
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
        s = tokio::time::timeout(deadline, agent_handshake(&shared.config, &mut framed, peer, &shared.failures)) => match s {
            Ok(s) => s,
            Err(_) => {
                debug!(%peer, "no complete handshake within {deadline:?}; closing");
                None
            }
        },
        _ = stop.cancelled() => None,
        _ = ticket.cancel.cancelled() => {
            debug!(%peer, "dropping an unauthenticated connection (too many pending)");
            return None;
        }
    };
    let Some(session) = session else {
        // Still pending until closed: a flood of failed handshakes stays within the caps.
        close_gracefully(framed, Some(&ticket.cancel)).await;
        return None;
    };
    drop(ticket);
    // Its address gets priority among the pending connections from now on.
    shared.pending.authenticated(peer.ip());
    framed
        .codec_mut()
        .set_max_frame_length(shared.config.max_frame);
    Some((framed, session))
}
