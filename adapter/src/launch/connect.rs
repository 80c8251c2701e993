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

/// Connects to a target's agent and runs the client side of the handshake, bounded by the
/// options' timeouts; errors name the cause and the remedy.
pub(crate) async fn connect_authenticated(
    target: &LaunchTarget,
    opts: &LaunchOptions,
) -> Result<(FramedConn<TcpStream>, Session), AgentError> {
    let connect = tokio::time::timeout(opts.connect_timeout, TcpStream::connect(target.addr));
    let cause = match connect.await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(ConnectFailure::Io(e)),
        Err(_) => Err(ConnectFailure::Timeout(opts.connect_timeout)),
    };
    let stream = cause.map_err(|cause| AgentError::Unreachable {
        pod: target.pod.clone(),
        addr: target.addr,
        cause,
    })?;
    let _ = stream.set_nodelay(true);
    let _ = protocol::set_keepalive(&stream);
    // An unauthenticated peer gets no more than the agent grants its clients before the handshake.
    let mut conn = protocol::framed(stream, HANDSHAKE_MAX_FRAME);
    let session = client_handshake(&mut conn, opts.secret.as_deref(), opts.request_timeout)
        .await
        .map_err(|e| handshake_error(target, e))?;
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
