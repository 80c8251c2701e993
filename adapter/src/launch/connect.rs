//! Connecting to a pod's agent: the TCP connection, the mutual authentication, and one
//! request/reply exchange, each bounded by the launcher's timeouts, with errors that name the
//! cause and the remedy. Used by the launcher, the batch launcher, `prrte-k8s-rsh` and `doctor`.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::error::{AgentError, ConnectFailure};
use super::request::{LaunchOptions, LaunchTarget};
use crate::protocol::{
    self, client_handshake, decode_message, recv_frame, send_frame, FramedConn, HandshakeError,
    ProtocolError, Reply, Request, Session, DEFAULT_MAX_FRAME, HANDSHAKE_MAX_FRAME,
};

/// "the agent of pod P at ADDR", for messages.
pub(crate) fn agent_name(target: &LaunchTarget) -> String {
    format!("the agent of pod {} at {}", target.pod, target.addr)
}

fn handshake_error(target: &LaunchTarget, e: HandshakeError) -> AgentError {
    let who = agent_name(target);
    match e {
        HandshakeError::Refused(reason) => AgentError::Refused { who, reason },
        e @ HandshakeError::ClosedInAuthentication => AgentError::Refused {
            who,
            reason: e.to_string(),
        },
        HandshakeError::AgentNotProven => AgentError::NotProven { who },
        HandshakeError::Protocol(ProtocolError::Timeout(after)) => {
            AgentError::HandshakeStalled { who, after }
        }
        HandshakeError::Protocol(ProtocolError::Closed) => {
            AgentError::ClosedInHandshake { addr: target.addr }
        }
        HandshakeError::Protocol(
            source @ (ProtocolError::Malformed(_)
            | ProtocolError::Version { .. }
            | ProtocolError::FrameTooLarge { .. }),
        ) => AgentError::NotAnAgent {
            addr: target.addr,
            source,
        },
        source => AgentError::Handshake { who, source },
    }
}

/// How many times a connection the agent dropped before authenticating it is tried again.
pub(crate) const PRE_AUTH_RETRIES: u32 = 4;
/// The log target of the retries' warnings (what `prrte-k8s-rsh` prints on stderr).
pub const RETRY_LOG_TARGET: &str = "agent_connect_retry";
/// The wait before the first retry; doubled for each next one.
const PRE_AUTH_BACKOFF: Duration = Duration::from_millis(25);

/// Whether the agent ended the connection before the handshake completed, without a refusal:
/// what an agent does with a pending connection when too many are pending (a flood).
fn dropped_before_auth(e: &HandshakeError) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    match e {
        HandshakeError::ClosedInAuthentication
        | HandshakeError::Protocol(ProtocolError::Closed) => true,
        HandshakeError::Protocol(ProtocolError::Io(io)) => matches!(
            io.kind(),
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
        ),
        _ => false,
    }
}

/// Connects to a target's agent and runs the client side of the handshake, bounded by the
/// options' timeouts; errors name the cause and the remedy. A connection the agent closed or
/// reset before authenticating it (it drops pending connections under a flood) is tried again,
/// at most [`PRE_AUTH_RETRIES`] times with a growing pause, each logged.
pub(crate) async fn connect_authenticated(
    target: &LaunchTarget,
    opts: &LaunchOptions,
) -> Result<(FramedConn<TcpStream>, Session), AgentError> {
    let mut pause = PRE_AUTH_BACKOFF;
    for attempt in 1.. {
        match connect_once(target, opts).await {
            Err(Attempt::DroppedBeforeAuth(e)) if attempt <= PRE_AUTH_RETRIES => {
                tracing::warn!(
                    target: RETRY_LOG_TARGET,
                    pod = %target.pod,
                    addr = %target.addr,
                    attempt,
                    of = PRE_AUTH_RETRIES,
                    error = %e,
                    "the agent dropped the connection before authenticating it (it sheds pending connections under load); trying again"
                );
                // A little jitter, so that many launchers dropped together do not return together.
                let jitter = Duration::from_millis(u64::from(rand::random::<u8>() % 16));
                tokio::time::sleep(pause + jitter).await;
                pause *= 2;
            }
            Err(Attempt::DroppedBeforeAuth(e)) => return Err(handshake_error(target, e)),
            Err(Attempt::Failed(e)) => return Err(e),
            Ok(done) => return Ok(done),
        }
    }
    unreachable!("the retries are bounded")
}

/// How one attempt to connect failed.
enum Attempt {
    /// Dropped by the agent before authenticating: worth another try.
    DroppedBeforeAuth(HandshakeError),
    Failed(AgentError),
}

async fn connect_once(
    target: &LaunchTarget,
    opts: &LaunchOptions,
) -> Result<(FramedConn<TcpStream>, Session), Attempt> {
    let connect = tokio::time::timeout(opts.connect_timeout, TcpStream::connect(target.addr));
    let cause = match connect.await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(ConnectFailure::Io(e)),
        Err(_) => Err(ConnectFailure::Timeout(opts.connect_timeout)),
    };
    let stream = cause.map_err(|cause| {
        Attempt::Failed(AgentError::Unreachable {
            pod: target.pod.clone(),
            addr: target.addr,
            cause,
        })
    })?;
    let _ = stream.set_nodelay(true);
    let _ = protocol::set_keepalive(&stream);
    // An unauthenticated peer gets no more than the agent grants its clients before the handshake.
    let mut conn = protocol::framed(stream, HANDSHAKE_MAX_FRAME);
    let session = client_handshake(&mut conn, opts.secret.as_deref(), opts.request_timeout)
        .await
        .map_err(|e| {
            if dropped_before_auth(&e) {
                Attempt::DroppedBeforeAuth(e)
            } else {
                Attempt::Failed(handshake_error(target, e))
            }
        })?;
    conn.codec_mut().set_max_frame_length(DEFAULT_MAX_FRAME);
    Ok((conn, session))
}

/// Sends `request` (`what` names it in messages) to the agent `who`, bounded by `timeout`.
pub(crate) async fn send_request(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    request: &Request,
    what: &'static str,
    who: &str,
    timeout: Duration,
) -> Result<(), AgentError> {
    send_frame(conn, session.seal(request), timeout)
        .await
        .map_err(|source| AgentError::Send {
            what,
            who: who.to_owned(),
            source,
        })
}

/// Receives and opens the agent's next reply to `what`, waiting until `deadline` at most
/// (`timeout` is the whole allowance, for the message).
pub(crate) async fn recv_reply(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    what: &'static str,
    who: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<Reply, AgentError> {
    let left = deadline.saturating_duration_since(Instant::now());
    let who = who.to_owned();
    let frame = match recv_frame(conn, Some(left)).await {
        Ok(f) => f,
        Err(ProtocolError::Timeout(_)) => {
            return Err(AgentError::Stalled { what, who, timeout });
        }
        Err(source) => return Err(AgentError::NoAnswer { what, who, source }),
    };
    session
        .open(&frame)
        .and_then(|body| decode_message::<Reply>(body.as_bytes()))
        .map_err(|source| AgentError::Protocol { who, source })
}

/// Connects to a target's agent, authenticates with `opts.secret` (both sides prove they hold
/// it) and exchanges `ping`/`pong`. Bounded by the options' timeouts. Returns the round-trip
/// time of the whole exchange; the error names the cause and the remedy.
pub async fn ping_agent(
    target: &LaunchTarget,
    opts: &LaunchOptions,
) -> Result<Duration, AgentError> {
    let t0 = Instant::now();
    let (mut conn, mut session) = connect_authenticated(target, opts).await?;
    let who = agent_name(target);
    let (what, timeout) = ("a ping", opts.request_timeout);
    send_request(
        &mut conn,
        &mut session,
        &Request::Ping {},
        what,
        &who,
        timeout,
    )
    .await?;
    let deadline = Instant::now() + timeout;
    match recv_reply(&mut conn, &mut session, what, &who, deadline, timeout).await? {
        Reply::Pong {} => Ok(t0.elapsed()),
        other => Err(AgentError::Unexpected {
            what,
            who,
            reply: format!("{other:?}"),
        }),
    }
}
