//! Running one exec request on its connection: start the program, stream its output, forward
//! stdin and signals, report its exit, and stop its whole process group and cgroup when the
//! client goes away.
//!
//! The connection's loop never waits for the program: stdin is queued for a writer task (at
//! most `STDIN_BUDGET` bytes the program has not read yet; a client that sends more is told
//! so and its program is stopped), and every send to the client gives way to the agent's
//! shutdown. So the loop always sees the client's `kill`, its signals and the end of its
//! connection, and a program whose client went away is stopped within the kill grace.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::prepare::{prepare, Ctx, ExecRequest, ExecState};
use crate::agent::exit_status::{exited_reply, ExitStatus};
use crate::agent::metrics::{AgentMetrics, Peer, Refusal, Via};
use crate::agent::process::Job;
use crate::protocol::exec::{decode_data, encode_data, CHUNK, FORWARDED_SIGNALS};
use crate::protocol::liveness::SilenceWatch;
use crate::protocol::{
    parse_request, recv_frame, send_frame, FramedConn, ProtocolError, Reply, Request, Session,
};

/// How long output is still forwarded after the program ended (its descendants may hold the
/// pipes), before the rest of its group is stopped.
const DRAIN: Duration = Duration::from_secs(2);
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Most stdin bytes held for a program that has not read them yet.
pub(crate) const STDIN_BUDGET: usize = 1 << 20;

/// Why an exec connection ended.
enum End {
    /// The program ended (and its output was forwarded).
    Done,
    /// The client asked for `kill`.
    Killed,
    /// The client's connection ended, or it broke the protocol.
    ClientGone(String),
    /// The agent is shutting down.
    Stopping,
}

/// One of the `--max-exec` places, held while a program runs.
struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    /// Takes a place, if one is free.
    fn take(state: &'a ExecState) -> Option<Running<'a>> {
        if state.running.fetch_add(1, Ordering::SeqCst) >= state.policy.max {
            state.running.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Running(&state.running))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The program's pipes, as async streams.
struct Pipes {
    out: Option<tokio::process::ChildStdout>,
    err: Option<tokio::process::ChildStderr>,
    stdin: Option<tokio::process::ChildStdin>,
}

impl Pipes {
    fn of(mut child: std::process::Child) -> Pipes {
        Pipes {
            out: child
                .stdout
                .take()
                .and_then(|p| tokio::process::ChildStdout::from_std(p).ok()),
            err: child
                .stderr
                .take()
                .and_then(|p| tokio::process::ChildStderr::from_std(p).ok()),
            stdin: child
                .stdin
                .take()
                .and_then(|p| tokio::process::ChildStdin::from_std(p).ok()),
        }
    }
}

/// Why a message did not reach the client.
#[derive(Debug, thiserror::Error)]
enum NotSent {
    #[error(transparent)]
    Send(#[from] ProtocolError),
    #[error("the agent is shutting down")]
    ShuttingDown,
}

/// The client's connection while its program runs.
struct Client<'a> {
    conn: &'a mut FramedConn<TcpStream>,
    session: &'a mut Session,
    peer: SocketAddr,
    stop: &'a CancellationToken,
    metrics: &'a AgentMetrics,
}

impl Client<'_> {
    /// Sends `msg`, giving way to the agent's shutdown (the connection closes then anyway).
    async fn send(&mut self, msg: Reply) -> Result<(), NotSent> {
        let frame = self.session.seal(&msg);
        tokio::select! {
            r = send_frame(self.conn, frame, SEND_TIMEOUT) => Ok(r?),
            _ = self.stop.cancelled() => Err(NotSent::ShuttingDown),
        }
    }

    /// Refuses the request with `reason` (nothing was started), counted under `why`.
    async fn refuse(&mut self, why: Refusal, program: &str, reason: String) -> String {
        self.metrics.exec_refused(why);
        let reason = crate::text::echo(&reason);
        info!(peer = %self.peer, request = "exec", %program, outcome = %format!("refused: {reason}"), "request");
        let _ = self.send(Reply::Failed { reason }).await;
        "exec refused".into()
    }
}

/// Runs one exec request on its connection until the program has ended (and reports that) or
/// the client has gone (and the program's group is stopped). Returns why the connection ends.
pub(crate) async fn serve(
    ctx: Ctx<'_>,
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    peer: SocketAddr,
    req: ExecRequest,
    stop: &CancellationToken,
) -> String {
    let t0 = Instant::now();
    let mut client = Client {
        conn,
        session,
        peer,
        stop,
        metrics: ctx.metrics,
    };
    let shown = req
        .argv
        .first()
        .map(|a| crate::text::echo(a))
        .unwrap_or_default();
    let prepared = match prepare(&ctx, &req, peer) {
        Ok(p) => p,
        Err(e) => {
            return client
                .refuse(Refusal::from(&e), &shown, e.to_string())
                .await
        }
    };
    let Some(_running) = Running::take(ctx.state) else {
        let reason = format!(
            "this agent already runs {} programs through exec (--max-exec)",
            ctx.state.policy.max
        );
        return client.refuse(Refusal::Busy, &shown, reason).await;
    };
    let mut cmd = prepared.command(req.stdin);
    let (mut job, child) = match ctx.reaper.spawn_job_child(&mut cmd, ctx.tracking) {
        Ok(j) => j,
        Err(e) => {
            let reason = format!("cannot execute {}: {e}", prepared.program.display());
            return client.refuse(Refusal::SpawnFailed, &shown, reason).await;
        }
    };
    let pid = job.pid;
    ctx.metrics.daemon_started(Via::Exec);
    info!(%peer, request = "exec", program = %prepared.program.display(), pid,
          tracking = job.tracking_label(), outcome = %format!("started pid {pid}"), "request");
    debug!(%peer, pid, argv = ?prepared.argv.iter().map(|a| crate::text::echo(a)).collect::<Vec<_>>(), "exec: arguments");
    if let Err(e) = client.send(Reply::Started { pid }).await {
        warn!(%peer, pid, error = %e, "cannot report the start; stopping the program");
        job.terminate(ctx.config.kill_grace, ctx.reaper).await;
        return format!("cannot send reply: {e}");
    }
    let silence = ctx.config.heartbeat_timeout;
    let (end, status) = pump(&mut client, &mut job, Pipes::of(child), silence).await;
    let final_status = job.terminate(ctx.config.kill_grace, ctx.reaper).await;
    let status = status.unwrap_or(final_status);
    let ran_ms = t0.elapsed().as_millis() as u64;
    match end {
        End::ClientGone(reason) => {
            warn!(%peer, pid, %reason, status = %status, ran_ms,
                  "exec: the client went away; the program's process group was stopped");
            reason
        }
        end => {
            info!(%peer, pid, status = %status, ran_ms, "exec: the program ended");
            let _ = client.send(exited_reply(pid, status, None)).await;
            match end {
                End::Stopping => "agent shutting down".into(),
                End::Killed => "program killed on request".into(),
                _ => "program ended".into(),
            }
        }
    }
}

/// The program's stdin: a writer task and what is queued for it.
struct Stdin {
    tx: Option<mpsc::UnboundedSender<Vec<u8>>>,
    queued: Arc<AtomicUsize>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Stdin {
    /// A writer for the program's stdin pipe, if it has one.
    fn start(pipe: Option<tokio::process::ChildStdin>) -> Stdin {
        let queued = Arc::new(AtomicUsize::new(0));
        let Some(mut w) = pipe else {
            return Stdin {
                tx: None,
                queued,
                task: None,
            };
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let q = queued.clone();
        let task = tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                let ok = w.write_all(&chunk).await.is_ok();
                q.fetch_sub(chunk.len(), Ordering::SeqCst);
                if !ok {
                    break;
                }
            }
            let _ = w.shutdown().await;
        });
        Stdin {
            tx: Some(tx),
            queued,
            task: Some(task),
        }
    }

    /// Queues `bytes`; `Err` with the amount waiting when the program has not read enough of
    /// what came before. Bytes for a program that closed its stdin are dropped, as a pipe
    /// would.
    fn push(&mut self, bytes: Vec<u8>) -> Result<(), usize> {
        let Some(tx) = &self.tx else {
            return Ok(());
        };
        if tx.is_closed() {
            return Ok(());
        }
        let waiting = self.queued.load(Ordering::SeqCst);
        if waiting + bytes.len() > STDIN_BUDGET {
            return Err(waiting + bytes.len());
        }
        self.queued.fetch_add(bytes.len(), Ordering::SeqCst);
        if tx.send(bytes).is_err() {
            self.queued.store(0, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The client's end of stdin: the writer closes the pipe once the queue is written.
    fn close(&mut self) {
        self.tx = None;
    }
}

impl Drop for Stdin {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Forwards the program's output to the client and the client's stdin and signals to the
/// program, until the program has ended and its output is drained (for at most [`DRAIN`]), or
/// the client asks for `kill`, goes away, or the agent stops. A client that sends heartbeats
/// (`ping`) and then stays silent for `silence` is gone (its pod is cut off): its program is
/// stopped as for a closed connection. Returns why, and the program's status if it ended.
async fn pump(
    client: &mut Client<'_>,
    job: &mut Job,
    pipes: Pipes,
    silence: Option<Duration>,
) -> (End, Option<ExitStatus>) {
    let pid = job.pid;
    let Pipes {
        mut out,
        mut err,
        stdin,
    } = pipes;
    let mut stdin = Stdin::start(stdin);
    let mut obuf = vec![0u8; CHUNK];
    let mut ebuf = vec![0u8; CHUNK];
    let mut status: Option<ExitStatus> = None;
    let drain = tokio::time::sleep(FAR);
    tokio::pin!(drain);
    let stop = client.stop.clone();
    let mut liveness = SilenceWatch::new(silence);
    loop {
        if status.is_some() && out.is_none() && err.is_none() {
            return (End::Done, status);
        }
        let due = liveness.deadline();
        let output = tokio::select! {
            n = read_opt(&mut out, &mut obuf) => match n {
                Some(n) if n > 0 => Some((1, n)),
                _ => { out = None; None }
            },
            n = read_opt(&mut err, &mut ebuf) => match n {
                Some(n) if n > 0 => Some((2, n)),
                _ => { err = None; None }
            },
            s = job.wait_exit(), if status.is_none() => {
                debug!(peer = %client.peer, pid, status = %s, "exec: the program ended");
                status = Some(s);
                drain.as_mut().reset(tokio::time::Instant::now() + DRAIN);
                None
            }
            _ = &mut drain, if status.is_some() => return (End::Done, status),
            _ = tokio::time::sleep_until(due), if liveness.watched() => {
                if !liveness.woke(due) {
                    continue;
                }
                // A frame that arrived during a stall of this process counts before the
                // silence (the read is cancel-safe, so a frame is never lost here).
                match recv_frame(client.conn, Some(Duration::from_millis(1))).await {
                    Err(ProtocolError::Timeout(_)) => {
                        let reason = liveness.reason("the client");
                        client.metrics.heartbeats_missed(Peer::Exec);
                        warn!(peer = %client.peer, pid, %reason, "exec: the client is silent");
                        return (End::ClientGone(reason), status);
                    }
                    frame => {
                        liveness.heard();
                        if let Some(end) = on_frame(client, frame, &mut stdin, pid, &mut liveness).await {
                            return (end, status);
                        }
                    }
                }
                None
            }
            frame = recv_frame(client.conn, None) => {
                liveness.heard();
                if let Some(end) = on_frame(client, frame, &mut stdin, pid, &mut liveness).await {
                    return (end, status);
                }
                None
            }
            _ = stop.cancelled() => return (End::Stopping, status),
        };
        if let Some((fd, n)) = output {
            let data = if fd == 1 { &obuf[..n] } else { &ebuf[..n] };
            let msg = Reply::Output {
                fd,
                data: encode_data(data),
            };
            if let Err(e) = client.send(msg).await {
                let end = if stop.is_cancelled() {
                    End::Stopping
                } else {
                    End::ClientGone(format!("cannot send output: {e}"))
                };
                return (end, status);
            }
        }
    }
}

/// Effectively never (a timer that is not meant to fire).
const FAR: Duration = Duration::from_secs(86_400 * 365);

/// Handles one frame of the client while its program runs (process group `pid`); `Some` when
/// the connection's exec is over.
async fn on_frame(
    client: &mut Client<'_>,
    frame: Result<tokio_util::bytes::Bytes, ProtocolError>,
    stdin: &mut Stdin,
    pid: u32,
    liveness: &mut SilenceWatch,
) -> Option<End> {
    let peer = client.peer;
    let frame = match frame {
        Ok(f) => f,
        Err(ProtocolError::Closed) => return Some(End::ClientGone("closed by the client".into())),
        Err(e) => return Some(End::ClientGone(e.to_string())),
    };
    let body = match client.session.open(&frame) {
        Ok(b) => b,
        Err(e) => {
            let reason = format!("frame refused: {}", crate::text::echo(&e.to_string()));
            return Some(error_and_end(client, reason).await);
        }
    };
    let reply = match parse_request(body.as_bytes()) {
        Ok(Request::Stdin { data }) => {
            let pushed = decode_data(&data).map(|bytes| stdin.push(bytes));
            return match pushed {
                Ok(Ok(())) => None,
                Ok(Err(waiting)) => {
                    let reason = format!(
                        "the program has not read its standard input: {waiting} bytes would \
                         be waiting, at most {STDIN_BUDGET} are held for it; the program is \
                         stopped (send stdin only to a program that reads it, or use `-n`)"
                    );
                    warn!(%peer, pid, waiting, "exec: stdin overrun; stopping the program");
                    Some(error_and_end(client, reason).await)
                }
                Err(e) => Some(error_and_end(client, format!("stdin: {e}")).await),
            };
        }
        Ok(Request::StdinClose {}) => {
            stdin.close();
            return None;
        }
        Ok(Request::Signal { signal }) => match Signal::try_from(signal) {
            Ok(sig) if FORWARDED_SIGNALS.contains(&signal) => {
                info!(%peer, pid, signal = sig.as_str(), "exec: forwarding a signal to the program's process group");
                let _ = killpg(Pid::from_raw(pid as i32), sig);
                return None;
            }
            _ => Reply::Failed {
                reason: format!(
                    "signal {signal} is not forwarded (allowed: {FORWARDED_SIGNALS:?})"
                ),
            },
        },
        Ok(Request::Kill { .. }) => return Some(End::Killed),
        Ok(Request::Ping {}) => {
            if liveness.ping() {
                debug!(%peer, pid, "exec: the client sends heartbeats");
            }
            Reply::Pong {}
        }
        Ok(other) => Reply::Failed {
            reason: format!(
                "`{}` is not accepted while a program runs on this connection",
                other.kind()
            ),
        },
        Err(e) => Reply::Failed {
            reason: crate::text::echo(&e.to_string()),
        },
    };
    match client.send(reply).await {
        Ok(()) => None,
        Err(_) => Some(End::ClientGone("cannot send reply".into())),
    }
}

/// Sends `error {reason}` (ignoring a failure, the connection ends next); the client is gone
/// for `reason`.
async fn error_and_end(client: &mut Client<'_>, reason: String) -> End {
    let _ = client
        .send(Reply::Error {
            reason: reason.clone(),
        })
        .await;
    End::ClientGone(reason)
}

async fn read_opt<R: tokio::io::AsyncRead + Unpin>(
    r: &mut Option<R>,
    buf: &mut [u8],
) -> Option<usize> {
    match r {
        Some(r) => r.read(buf).await.ok(),
        None => std::future::pending().await,
    }
}
