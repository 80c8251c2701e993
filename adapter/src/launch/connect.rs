//! Connecting to a pod's agent: the TCP connection, the mutual authentication, and one
//! request/reply exchange, each bounded by the launcher's timeouts, with errors that name the
//! cause and the remedy. Used by the launcher, the batch launcher, `prrte-k8s-rsh` and `doctor`.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::request::{LaunchOptions, LaunchTarget};
use crate::protocol::{
    self, client_handshake, decode_message, recv_frame, send_frame, FramedConn, HandshakeError,
    ProtocolError, Reply, Request, Session, DEFAULT_MAX_FRAME, HANDSHAKE_MAX_FRAME,
};

fn unreachable_reason(target: &LaunchTarget, what: &str) -> String {
    format!(
        "cannot reach the prrte-k8s agent of pod {} at {}: {what}; is the agent running in the \
         pod and listening on port {}? is a NetworkPolicy blocking the launcher?",
        target.pod,
        target.addr,
        target.addr.port()
    )
}

/// "the agent of pod P at ADDR", for messages.
pub(crate) fn agent_name(target: &LaunchTarget) -> String {
    format!("the agent of pod {} at {}", target.pod, target.addr)
}

fn handshake_reason(target: &LaunchTarget, e: HandshakeError) -> String {
    let who = agent_name(target);
    match e {
        HandshakeError::Refused(reason) if reason.starts_with("authentication failed") => {
            format!("{who} refused the launcher: {reason}")
        }
        HandshakeError::Refused(reason) => format!(
            "{who} refused the launcher: {reason} (if this is an authentication failure, the \
             launcher's secret does not match the agent's; mount the same Secret in both)"
        ),
        HandshakeError::AgentNotProven => format!(
            "authentication failed: {who} could not prove that it holds the launcher's secret \
             (secret mismatch, or not a prrte-k8s agent); mount the same Secret in both"
        ),
        HandshakeError::Protocol(ProtocolError::Timeout(t)) => {
            format!("{who} did not answer within {t:?} during authentication (stalled)")
        }
        HandshakeError::Protocol(ProtocolError::Closed) => format!(
            "the peer at {} closed the connection before the handshake completed; is a \
             prrte-k8s agent listening on port {}?",
            target.addr,
            target.addr.port()
        ),
        HandshakeError::Protocol(
            e @ (ProtocolError::Malformed(_)
            | ProtocolError::Version { .. }
            | ProtocolError::FrameTooLarge { .. }),
        ) => format!(
            "the peer at {} does not speak the prrte-k8s agent protocol ({e}); is port {} the \
             agent's?",
            target.addr,
            target.addr.port()
        ),
        other => format!("{who}: {other}"),
    }
}

/// Connects to a target's agent and runs the client side of the handshake, bounded by the
/// options' timeouts; errors name the cause and the remedy.
pub(crate) async fn connect_authenticated(
    target: &LaunchTarget,
    opts: &LaunchOptions,
) -> Result<(FramedConn<TcpStream>, Session), String> {
    let stream =
        match tokio::time::timeout(opts.connect_timeout, TcpStream::connect(target.addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(unreachable_reason(target, &e.to_string())),
            Err(_) => {
                return Err(unreachable_reason(
                    target,
                    &format!("no connection within {:?}", opts.connect_timeout),
                ))
            }
        };
    let _ = stream.set_nodelay(true);
    let _ = protocol::set_keepalive(&stream);
    // An unauthenticated peer gets no more than the agent grants its clients before the handshake.
    let mut conn = protocol::framed(stream, HANDSHAKE_MAX_FRAME);
    let session = client_handshake(&mut conn, opts.secret.as_deref(), opts.request_timeout)
        .await
        .map_err(|e| handshake_reason(target, e))?;
    conn.codec_mut().set_max_frame_length(DEFAULT_MAX_FRAME);
    Ok((conn, session))
}

/// Sends `request` (`what` names it in messages) to the agent `who`, bounded by `timeout`.
pub(crate) async fn send_request(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    request: &Request,
    what: &str,
    who: &str,
    timeout: Duration,
) -> Result<(), String> {
    send_frame(conn, session.seal(request), timeout)
        .await
        .map_err(|e| format!("cannot send {what} to {who}: {e}"))
}

/// Receives and opens the agent's next reply to `what`, waiting until `deadline` at most
/// (`timeout` is the whole allowance, for the message).
pub(crate) async fn recv_reply(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    what: &str,
    who: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<Reply, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    let frame = match recv_frame(conn, Some(left)).await {
        Ok(f) => f,
        Err(ProtocolError::Timeout(_)) => {
            return Err(format!(
                "{who} did not answer {what} within {timeout:?} (stalled)"
            ))
        }
        Err(e) => return Err(format!("{who} did not answer {what}: {e}")),
    };
    session
        .open(&frame)
        .and_then(|body| decode_message::<Reply>(body.as_bytes()))
        .map_err(|e| format!("protocol error from {who}: {e}"))
}

/// Connects to a target's agent, authenticates with `opts.secret` (both sides prove they hold
/// it) and exchanges `ping`/`pong`. Bounded by the options' timeouts. Returns the round-trip
/// time of the whole exchange; the error names the cause and the remedy.
pub async fn ping_agent(target: &LaunchTarget, opts: &LaunchOptions) -> Result<Duration, String> {
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
        other => Err(format!("{who} answered a ping with {other:?}")),
    }
}
