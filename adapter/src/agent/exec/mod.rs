//! `exec` requests: run a program from the agent's allowlist for an ssh-like client
//! (`prrte-k8s-rsh`), stream its output, forward stdin and signals, report its exit, and stop
//! its whole process group and cgroup when the client goes away. The wire format is in
//! [`crate::protocol::exec`].
//!
//! The program gets the same base environment as prted (see [`super`]), plus
//! `PRRTE_K8S_SECRET_FILE` and `PRRTE_K8S_AGENT_PORT` of this agent (so that a daemon started
//! this way can reach the other pods' agents with `prrte-k8s-rsh` itself, as PRRTE's tree spawn
//! does), then the request's variables as [`policy::check_env`] admits them (an ignored
//! `*_PREFIX` is taken after all when the resolved program lies inside it: the program's own
//! installation, as PRRTE's ssh launcher sends `PRTE_PREFIX`). It runs in its
//! own process group (and cgroup), with stdin from the client or `/dev/null`, in the request's
//! `cwd` or the agent's TMPDIR.

pub mod policy;

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

pub use policy::{ExecArgs, ExecPolicy};

use super::process::{ExitStatus, Reaper};
use super::tracking::Tracking;
use super::AgentConfig;
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
pub struct ExecRequest {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub stdin: bool,
}

/// The agent's exec settings and the count of programs running.
#[derive(Debug)]
pub struct ExecState {
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
    // The program is resolved first: an installation prefix the request names is taken only
    // when it is the allowlisted program's own.
    let argv0 = expand(argv0, |k| env.get(k).cloned()).map_err(|e| format!("argv[0]: {e}"))?;
    let program = ctx.state.policy.resolve(&argv0)?;
    let own_prefix = |value: &str| {
        let (Ok(prefix), Ok(prog)) = (
            std::fs::canonicalize(value),
            std::fs::canonicalize(&program),
        ) else {
            return false;
        };
        prefix != std::path::Path::new("/") && prog.starts_with(prefix)
    };
    for (name, value) in &req.env {
        let mut use_ = policy::check_env(name)?;
        if use_ != policy::EnvUse::Pass && name.ends_with("_PREFIX") {
            let v = expand(value, |k| env.get(k).cloned()).unwrap_or_default();
            if own_prefix(&v) {
                use_ = policy::EnvUse::Pass;
            }
        }
        match use_ {
            policy::EnvUse::Pass => {
                let v = expand(value, |k| env.get(k).cloned())
                    .map_err(|e| format!("environment variable `{name}`: {e}"))?;
                env.insert(name.clone(), v);
            }
            policy::EnvUse::Ignore(why) => {
                debug!(variable = %crate::text::echo(name), why, "exec: not setting a variable of the request");
            }
        }
    }
    let lookup = |k: &str| env.get(k).cloned();
    let mut argv = vec![argv0];
    for (i, a) in req.argv.iter().enumerate().skip(1) {
        argv.push(expand(a, lookup).map_err(|e| format!("argv[{i}]: {e}"))?);
    }
    if policy::is_prrte_daemon(&program) {
        policy::check_daemon_args(&argv[1..])?;
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
    let state = ctx.state;
    if state.running.fetch_add(1, Ordering::SeqCst) >= state.policy.max {
        state.running.fetch_sub(1, Ordering::SeqCst);
        let reason = format!(
            "this agent already runs {} programs through exec (--max-exec)",
            state.policy.max
        );
        info!(%peer, request = "exec", program = %shown, outcome = %format!("refused: {reason}"), "request");
        let _ = send(conn, session, Reply::Failed { reason }).await;
        return "exec refused".into();
    }
    struct Running<'a>(&'a AtomicUsize);
    impl Drop for Running<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _running = Running(&state.running);

    let mut cmd = Command::new(&prepared.program);
    cmd.arg0(&prepared.argv[0])
        .args(&prepared.argv[1..])
        .env_clear()
        .envs(&prepared.env)
        .current_dir(&prepared.cwd)
        .stdin(if req.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let (mut job, mut child) = match ctx.reaper.spawn_job_child(&mut cmd, ctx.tracking) {
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
    let pipes = (
        child
            .stdout
            .take()
            .and_then(|p| tokio::process::ChildStdout::from_std(p).ok()),
        child
            .stderr
            .take()
            .and_then(|p| tokio::process::ChildStderr::from_std(p).ok()),
        child
            .stdin
            .take()
            .and_then(|p| tokio::process::ChildStdin::from_std(p).ok()),
    );
    drop(child);
    let (mut out, mut err, stdin) = pipes;
    if let Err(e) = send(conn, session, Reply::Started { pid }).await {
        warn!(%peer, pid, error = %e, "cannot report the start; stopping the program");
        job.terminate(ctx.config.kill_grace, ctx.reaper).await;
        return format!("cannot send reply: {e}");
    }

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
                let frame = match frame {
                    Ok(f) => f,
                    Err(ProtocolError::Closed) => break End::ClientGone("closed by the client".into()),
                    Err(e) => break End::ClientGone(e.to_string()),
                };
                let body = match session.open(&frame) {
                    Ok(b) => b,
                    Err(e) => {
                        let reason = format!("frame refused: {}", crate::text::echo(&e.to_string()));
                        let _ = send(conn, session, Reply::Error { reason: reason.clone() }).await;
                        break End::ClientGone(reason);
                    }
                };
                match decode_request(body.as_bytes()) {
                    Ok(Request::Stdin { data }) => match (decode_data(&data), &stdin_tx) {
                        (Ok(bytes), Some(tx)) => {
                            let _ = tx.send(bytes).await;
                        }
                        (Ok(_), None) => debug!(%peer, pid, "exec: stdin after its end; dropped"),
                        (Err(e), _) => {
                            let reason = format!("stdin: {e}");
                            let _ = send(conn, session, Reply::Error { reason: reason.clone() }).await;
                            break End::ClientGone(reason);
                        }
                    },
                    Ok(Request::StdinClose {}) => stdin_tx = None,
                    Ok(Request::Signal { signal }) => {
                        match Signal::try_from(signal) {
                            Ok(sig) if FORWARDED_SIGNALS.contains(&signal) => {
                                info!(%peer, pid, signal = sig.as_str(), "exec: forwarding a signal to the program's process group");
                                let _ = killpg(Pid::from_raw(pid as i32), sig);
                            }
                            _ => {
                                if send(conn, session, Reply::Failed {
                                    reason: format!("signal {signal} is not forwarded (allowed: {FORWARDED_SIGNALS:?})"),
                                }).await.is_err() {
                                    break End::ClientGone("cannot send reply".into());
                                }
                            }
                        }
                    }
                    Ok(Request::Kill { .. }) => break End::Killed,
                    Ok(Request::Ping {}) => {
                        if send(conn, session, Reply::Pong {}).await.is_err() {
                            break End::ClientGone("cannot send reply".into());
                        }
                    }
                    Ok(other) => {
                        if send(conn, session, Reply::Failed {
                            reason: format!("`{}` is not accepted while a program runs on this connection", other.kind()),
                        }).await.is_err() {
                            break End::ClientGone("cannot send reply".into());
                        }
                    }
                    Err(reason) => {
                        if send(conn, session, Reply::Failed { reason: crate::text::echo(&reason) }).await.is_err() {
                            break End::ClientGone("cannot send reply".into());
                        }
                    }
                }
            }
            _ = stop.cancelled() => break End::Stopping,
        }
    };
    drop(stdin_tx);
    if let Some(t) = stdin_task {
        t.abort();
    }
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
            let _ = send(conn, session, super::exited_reply(pid, status)).await;
            match end {
                End::Stopping => "agent shutting down".into(),
                End::Killed => "program killed on request".into(),
                _ => "program ended".into(),
            }
        }
    }
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
