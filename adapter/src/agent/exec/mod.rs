//! `exec` requests: run a program from the agent's allowlist for an ssh-like client
//! (`prrte-k8s-rsh`), stream its output, forward stdin and signals, report its exit, and stop
//! its whole process group and cgroup when the client goes away. The wire format is in
//! [`crate::protocol::exec`].
//!
//! The program gets the same base environment as prted (see [`super`]), plus
//! `PRRTE_K8S_SECRET_FILE` and `PRRTE_K8S_AGENT_PORT` of this agent (so that a daemon started
//! this way can reach the other pods' agents with `prrte-k8s-rsh` itself, as PRRTE's tree spawn
//! does), then the request's variables as [`allowlist::check_env`] admits them (an ignored
//! `*_PREFIX` is taken after all when the resolved program lies inside it: the program's own
//! installation, as PRRTE's ssh launcher sends `PRTE_PREFIX`). It runs in its
//! own process group (and cgroup), with stdin from the client or `/dev/null`, in the request's
//! `cwd` or the agent's TMPDIR.

pub mod allowlist;
mod refusal;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
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

pub use allowlist::{ExecArgs, ExecPolicy};
pub use refusal::{ExecRefusal, ExecSettingsError};

use super::checked_config::AgentConfig;
use super::exit_status::{exited_reply, ExitStatus};
use super::process::{Job, Reaper};
use super::tracking::Tracking;
use crate::protocol::exec::{decode_data, encode_data, expand, CHUNK, FORWARDED_SIGNALS};
use crate::protocol::{
    decode_request, recv_frame, send_frame, FramedConn, ProtocolError, Reply, Request, Session,
};

/// How long output is still forwarded after the program ended (its descendants may hold the
/// pipes), before the rest of its group is stopped.
const DRAIN: Duration = Duration::from_secs(2);
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// An `exec` request.
#[derive(Debug, Clone)]
pub(crate) struct ExecRequest {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub stdin: bool,
}

/// The agent's exec settings and the count of programs running.
#[derive(Debug)]
pub(crate) struct ExecState {
    pub policy: ExecPolicy,
    running: AtomicUsize,
}

impl ExecState {
    pub fn new(policy: ExecPolicy) -> ExecState {
        ExecState {
            policy,
            running: AtomicUsize::new(0),
        }
    }
}

/// What one exec needs of the agent.
pub(crate) struct Ctx<'a> {
    pub config: &'a AgentConfig,
    pub reaper: &'a Arc<Reaper>,
    pub tracking: &'a Tracking,
    pub base_env: &'a [(std::ffi::OsString, std::ffi::OsString)],
    pub state: &'a ExecState,
}

/// A prepared command, or the reason it is refused.
pub(crate) struct Prepared {
    pub program: std::path::PathBuf,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: std::path::PathBuf,
}

/// Checks an exec request against the allowlist and the environment rules and expands its
/// templates; nothing is started here.
pub(crate) fn prepare(ctx: &Ctx<'_>, req: &ExecRequest) -> Result<Prepared, String> {
    let Some(argv0) = req.argv.first() else {
        return Err("exec request without a program (argv is empty)".into());
    };
    let mut env = agent_env(ctx);
    // The program is resolved first: an installation prefix the request names is taken only
    // when it is the allowlisted program's own.
    let argv0 = expand(argv0, |k| env.get(k).cloned()).map_err(|e| format!("argv[0]: {e}"))?;
    let program = ctx.state.policy.resolve(&argv0)?;
    add_request_env(&mut env, &req.env, &program)?;
    let lookup = |k: &str| env.get(k).cloned();
    let mut argv = vec![argv0];
    for (i, a) in req.argv.iter().enumerate().skip(1) {
        argv.push(expand(a, lookup).map_err(|e| format!("argv[{i}]: {e}"))?);
    }
    if allowlist::is_prrte_daemon(&program) {
        allowlist::check_daemon_args(&argv[1..])?;
    }
    let cwd = match &req.cwd {
        Some(c) => {
            let c = expand(c, lookup).map_err(|e| format!("cwd: {e}"))?;
            let p = std::path::PathBuf::from(&c);
            if !p.is_absolute() || !p.is_dir() {
                return Err(format!(
                    "cd {}: not an absolute path of a directory in this pod",
                    crate::text::printable(&c, 300)
                ));
            }
            p
        }
        None => ctx.config.tmpdir.clone(),
    };
    Ok(Prepared {
        program,
        argv,
        env,
        cwd,
    })
}

/// The program's environment before the request's variables: the base environment and this
/// agent's secret file and port.
fn agent_env(ctx: &Ctx<'_>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = ctx
        .base_env
        .iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    env.insert(
        crate::settings::agent::SECRET_FILE.var().into(),
        ctx.config.secret_file.display().to_string(),
    );
    env.insert(
        crate::settings::agent::PORT.var().into(),
        ctx.config.listen.port().to_string(),
    );
    env
}

/// Adds the request's variables that [`allowlist::check_env`] admits to `env`, expanded (an
/// ignored `*_PREFIX` is taken when `program` lies inside it).
fn add_request_env(
    env: &mut BTreeMap<String, String>,
    request: &[(String, String)],
    program: &std::path::Path,
) -> Result<(), String> {
    let own_prefix = |value: &str| {
        let (Ok(prefix), Ok(prog)) = (std::fs::canonicalize(value), std::fs::canonicalize(program))
        else {
            return false;
        };
        prefix != std::path::Path::new("/") && prog.starts_with(prefix)
    };
    for (name, value) in request {
        let mut use_ = allowlist::check_env(name)?;
        if use_ != allowlist::EnvUse::Pass && name.ends_with("_PREFIX") {
            let v = expand(value, |k| env.get(k).cloned()).unwrap_or_default();
            if own_prefix(&v) {
                use_ = allowlist::EnvUse::Pass;
            }
        }
        match use_ {
            allowlist::EnvUse::Pass => {
                let v = expand(value, |k| env.get(k).cloned())
                    .map_err(|e| format!("environment variable `{name}`: {e}"))?;
                env.insert(name.clone(), v);
            }
            allowlist::EnvUse::Ignore(why) => {
                debug!(variable = %crate::text::echo(name), why, "exec: not setting a variable of the request");
            }
        }
    }
    Ok(())
}

impl Prepared {
    /// The command: in its own process group, only the prepared environment, output piped,
    /// stdin piped if the client sends it (else `/dev/null`).
    fn command(&self, stdin: bool) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg0(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(&self.env)
            .current_dir(&self.cwd)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        cmd
    }
}

/// Why an exec connection ended.
enum End {
    /// The program ended (and its output was forwarded).
    Done,
    /// The client asked for `kill`.
    Killed,
    /// The client's connection ended.
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
    let shown = req
        .argv
        .first()
        .map(|a| crate::text::echo(a))
        .unwrap_or_default();
    let prepared = match prepare(&ctx, &req) {
        Ok(p) => p,
        Err(reason) => {
            let reason = crate::text::echo(&reason);
            info!(%peer, request = "exec", program = %shown, outcome = %format!("refused: {reason}"), "request");
            let _ = send(conn, session, Reply::Failed { reason }).await;
            return "exec refused".into();
        }
    };
    let Some(_running) = Running::take(ctx.state) else {
        let reason = format!(
            "this agent already runs {} programs through exec (--max-exec)",
            ctx.state.policy.max
        );
        info!(%peer, request = "exec", program = %shown, outcome = %format!("refused: {reason}"), "request");
        let _ = send(conn, session, Reply::Failed { reason }).await;
        return "exec refused".into();
    };

    let mut cmd = prepared.command(req.stdin);
    let (mut job, child) = match ctx.reaper.spawn_job_child(&mut cmd, ctx.tracking) {
        Ok(j) => j,
        Err(e) => {
            let reason = format!("cannot execute {}: {e}", prepared.program.display());
            info!(%peer, request = "exec", program = %shown, outcome = %format!("failed: {reason}"), "request");
            let _ = send(conn, session, Reply::Failed { reason }).await;
            return "exec failed".into();
        }
    };
    let pid = job.pid;
    info!(%peer, request = "exec", program = %prepared.program.display(), pid,
          tracking = job.tracking_label(), outcome = %format!("started pid {pid}"), "request");
    let pipes = Pipes::of(child);
    if let Err(e) = send(conn, session, Reply::Started { pid }).await {
        warn!(%peer, pid, error = %e, "cannot report the start; stopping the program");
        job.terminate(ctx.config.kill_grace, ctx.reaper).await;
        return format!("cannot send reply: {e}");
    }

    let (end, status) = pump(conn, session, &mut job, pipes, peer, stop).await;
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
            let _ = send(conn, session, exited_reply(pid, status)).await;
            match end {
                End::Stopping => "agent shutting down".into(),
                End::Killed => "program killed on request".into(),
                _ => "program ended".into(),
            }
        }
    }
}

/// Forwards the program's output to the client and the client's stdin and signals to the
/// program, until the program has ended and its output is drained (for at most [`DRAIN`]), or
/// the client asks for `kill`, goes away, or the agent stops. Returns why, and the program's
/// status if it ended.
async fn pump(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    job: &mut Job,
    pipes: Pipes,
    peer: SocketAddr,
    stop: &CancellationToken,
) -> (End, Option<ExitStatus>) {
    let pid = job.pid;
    let Pipes {
        mut out,
        mut err,
        stdin,
    } = pipes;
    // stdin is written by its own task so that a program that does not read cannot stall the
    // connection's loop.
    let (stdin_tx, mut stdin_rx) = mpsc::channel::<Vec<u8>>(64);
    let stdin_task = stdin.map(|mut w| {
        tokio::spawn(async move {
            while let Some(chunk) = stdin_rx.recv().await {
                if w.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            let _ = w.shutdown().await;
        })
    });
    let mut stdin_tx = Some(stdin_tx);

    let mut obuf = vec![0u8; CHUNK];
    let mut ebuf = vec![0u8; CHUNK];
    let mut status: Option<ExitStatus> = None;
    let drain = tokio::time::sleep(Duration::from_secs(86_400 * 365));
    tokio::pin!(drain);
    let end = loop {
        if status.is_some() && out.is_none() && err.is_none() {
            break End::Done;
        }
        tokio::select! {
            n = read_opt(&mut out, &mut obuf) => match n {
                Some(n) if n > 0 => {
                    if let Err(e) = send(conn, session, Reply::Output { fd: 1, data: encode_data(&obuf[..n]) }).await {
                        break End::ClientGone(format!("cannot send output: {e}"));
                    }
                }
                _ => out = None,
            },
            n = read_opt(&mut err, &mut ebuf) => match n {
                Some(n) if n > 0 => {
                    if let Err(e) = send(conn, session, Reply::Output { fd: 2, data: encode_data(&ebuf[..n]) }).await {
                        break End::ClientGone(format!("cannot send output: {e}"));
                    }
                }
                _ => err = None,
            },
            s = job.wait_exit(), if status.is_none() => {
                debug!(%peer, pid, status = %s, "exec: the program ended");
                status = Some(s);
                drain.as_mut().reset(tokio::time::Instant::now() + DRAIN);
            }
            _ = &mut drain, if status.is_some() => break End::Done,
            frame = recv_frame(conn, None) => {
                if let Some(end) = on_frame(conn, session, frame, &mut stdin_tx, peer, pid).await {
                    break end;
                }
            }
            _ = stop.cancelled() => break End::Stopping,
        }
    };
    drop(stdin_tx);
    if let Some(t) = stdin_task {
        t.abort();
    }
    (end, status)
}

/// Handles one frame of the client while its program runs (process group `pid`); `Some` when
/// the connection's exec is over.
async fn on_frame(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    frame: Result<tokio_util::bytes::Bytes, ProtocolError>,
    stdin_tx: &mut Option<mpsc::Sender<Vec<u8>>>,
    peer: SocketAddr,
    pid: u32,
) -> Option<End> {
    let frame = match frame {
        Ok(f) => f,
        Err(ProtocolError::Closed) => return Some(End::ClientGone("closed by the client".into())),
        Err(e) => return Some(End::ClientGone(e.to_string())),
    };
    let body = match session.open(&frame) {
        Ok(b) => b,
        Err(e) => {
            let reason = format!("frame refused: {}", crate::text::echo(&e.to_string()));
            return Some(error_and_end(conn, session, reason).await);
        }
    };
    let reply = match decode_request(body.as_bytes()) {
        Ok(Request::Stdin { data }) => match (decode_data(&data), &*stdin_tx) {
            (Ok(bytes), Some(tx)) => {
                let _ = tx.send(bytes).await;
                return None;
            }
            (Ok(_), None) => {
                debug!(%peer, pid, "exec: stdin after its end; dropped");
                return None;
            }
            (Err(e), _) => {
                return Some(error_and_end(conn, session, format!("stdin: {e}")).await);
            }
        },
        Ok(Request::StdinClose {}) => {
            *stdin_tx = None;
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
        Ok(Request::Ping {}) => Reply::Pong {},
        Ok(other) => Reply::Failed {
            reason: format!(
                "`{}` is not accepted while a program runs on this connection",
                other.kind()
            ),
        },
        Err(reason) => Reply::Failed {
            reason: crate::text::echo(&reason),
        },
    };
    match send(conn, session, reply).await {
        Ok(()) => None,
        Err(_) => Some(End::ClientGone("cannot send reply".into())),
    }
}

/// Sends `error {reason}` (ignoring a failure, the connection ends next); the client is gone
/// for `reason`.
async fn error_and_end(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    reason: String,
) -> End {
    let _ = send(
        conn,
        session,
        Reply::Error {
            reason: reason.clone(),
        },
    )
    .await;
    End::ClientGone(reason)
}

async fn send(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    msg: Reply,
) -> Result<(), ProtocolError> {
    let frame = session.seal(&msg);
    send_frame(conn, frame, SEND_TIMEOUT).await
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
