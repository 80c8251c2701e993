//! The agent's side of the handshake that opens every connection: a challenge with the agent's
//! nonce, the launcher's response (its nonce and, with a secret, its proof), and `welcome` with
//! the agent's proof, or `error`/`refused` and the end of the connection (see
//! [`crate::protocol`]). Failed handshakes are logged through `FailureLog`: one WARN line an
//! interval and the count of the others, not a line each.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tracing::{debug, warn};

use super::checked_config::AgentConfig;
use crate::protocol::{
    self, agent_noise, agent_proof, decode_message, encode_message, new_nonce, parse_noise_field,
    parse_nonce, recv_frame, send_frame, verify_client_proof, AuthMode, FramedConn, Plain,
    ProtocolError, Session, AUTH_FAILED_REASON, NONCE_LEN,
};

/// How long the agent waits for a peer to take a frame it sends.
pub(super) const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// How often at most a failed handshake is logged in full.
pub(super) const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Failed handshakes, logged without letting a flood of them flood the log: the first failure
/// of an interval is logged in full, the others only counted, and their count (with the last
/// one's peer and reason) is logged when the interval ends.
pub(super) struct FailureLog {
    interval: Duration,
    state: Mutex<FailureState>,
}

#[derive(Default)]
struct FailureState {
    /// Whether an interval is running (its first failure was logged).
    open: bool,
    /// Failures in the running interval not logged one by one.
    suppressed: u64,
    /// The last of them: its peer and reason.
    last: Option<(SocketAddr, String)>,
}

impl FailureLog {
    pub(super) fn new(interval: Duration) -> Arc<FailureLog> {
        Arc::new(FailureLog {
            interval,
            state: Mutex::new(FailureState::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FailureState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a failed handshake: logs it (`what` says how it failed) if it is the first of an
    /// interval, else counts it.
    pub(super) fn failed(self: &Arc<Self>, peer: SocketAddr, reason: &str, what: &str) {
        let mut st = self.state();
        if st.open {
            st.suppressed += 1;
            st.last = Some((peer, reason.to_string()));
            return;
        }
        st.open = true;
        drop(st);
        warn!(%peer, %reason, "{what}");
        let log = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(log.interval).await;
            log.close_interval();
        });
    }

    /// Ends the running interval, logging the count of the failures not logged in it.
    fn close_interval(&self) {
        let mut st = self.state();
        let (failed, last) = (st.suppressed, st.last.take());
        *st = FailureState::default();
        drop(st);
        if let Some((last_peer, last_reason)) = last {
            warn!(
                failed,
                seconds = self.interval.as_secs(),
                %last_peer,
                %last_reason,
                "more handshakes failed (authentication or protocol), not logged one by one"
            );
        }
    }
}

/// Sends a plain frame during the handshake, ignoring failures (the connection closes next).
pub(super) async fn send_plain(conn: &mut FramedConn<TcpStream>, msg: Plain) {
    let _ = send_frame(conn, encode_message(&msg), SEND_TIMEOUT).await;
}

/// Why a frame was refused, as one printable line (the error may quote the peer's bytes).
pub(super) fn describe_bad_frame(e: &ProtocolError) -> String {
    crate::text::echo(&match e {
        ProtocolError::FrameTooLarge { max } => format!(
            "frame exceeds the maximum of {max} bytes (--max-frame); this port speaks the \
             prrte-k8s agent protocol (u32 big-endian length + JSON)"
        ),
        other => other.to_string(),
    })
}

/// The agent side of the handshake; `None` when the connection is to be closed.
pub(super) async fn agent_handshake(
    config: &AgentConfig,
    conn: &mut FramedConn<TcpStream>,
    peer: SocketAddr,
    failures: &Arc<FailureLog>,
) -> Option<Session> {
    let key = config.secret.clone();
    let agent_nonce = new_nonce();
    let challenge = Plain::Challenge {
        auth: if key.is_some() {
            AuthMode::HmacSha256
        } else {
            AuthMode::None
        },
        nonce: hex::encode(agent_nonce),
        // Not the version: anyone may connect and read this.
        agent: "prrte-k8s-agent".into(),
    };
    send_frame(conn, encode_message(&challenge), SEND_TIMEOUT)
        .await
        .ok()?;
    let frame = match recv_frame(conn, Some(config.limits.handshake_timeout)).await {
        Ok(f) => f,
        Err(e @ (ProtocolError::FrameTooLarge { .. } | ProtocolError::Malformed(_))) => {
            let reason = describe_bad_frame(&e);
            failures.failed(peer, &reason, "refusing a bad frame before authentication");
            send_plain(conn, Plain::Error { reason }).await;
            return None;
        }
        Err(e) => {
            debug!(%peer, error = %e, "connection ended during the handshake");
            return None;
        }
    };
    let (client_nonce, mac, noise) = match read_response(&frame, &agent_nonce) {
        Ok(r) => r,
        Err(e) => {
            let reason = e.to_string();
            failures.failed(peer, &reason, "handshake failed");
            send_plain(conn, Plain::Error { reason }).await;
            return None;
        }
    };
    let welcome_mac = match &key {
        Some(k) => {
            let ok = mac
                .as_deref()
                .is_some_and(|m| verify_client_proof(k, &agent_nonce, &client_nonce, m));
            if !ok {
                failures.failed(
                    peer,
                    "the launcher's secret does not match ours",
                    "authentication failed",
                );
                send_plain(
                    conn,
                    Plain::Refused {
                        reason: AUTH_FAILED_REASON.into(),
                    },
                )
                .await;
                return None;
            }
            Some(agent_proof(k, &agent_nonce, &client_nonce))
        }
        None => None,
    };
    let channel = parse_noise_field(noise.as_deref(), "the launcher")
        .and_then(|msg| agent_noise(key.as_deref(), &agent_nonce, &client_nonce, &msg));
    let (noise_msg, session) = match channel {
        Ok(c) => c,
        Err(e) => {
            let reason = describe_bad_frame(&e);
            failures.failed(peer, &reason, "handshake failed");
            send_plain(conn, Plain::Error { reason }).await;
            return None;
        }
    };
    let welcome = Plain::Welcome {
        mac: welcome_mac,
        noise: Some(hex::encode(noise_msg)),
    };
    send_frame(conn, encode_message(&welcome), SEND_TIMEOUT)
        .await
        .ok()?;
    debug!(%peer, "authenticated; channel encrypted");
    Some(session)
}

/// A `response`'s parts: the client's nonce, its proof and its Noise handshake message.
type Response = ([u8; NONCE_LEN], Option<String>, Option<String>);

/// Why the launcher's `response` to the challenge is refused; the message is sent back to it.
#[derive(Debug, thiserror::Error)]
enum BadResponse {
    #[error("expected a `response` to the challenge, got `{0}`")]
    NotAResponse(&'static str),
    /// The frame is no message ([`describe_bad_frame`]'s line).
    #[error("{0}")]
    Unreadable(String),
    #[error("the response reflects the agent's own nonce; a client sends a fresh one")]
    OwnNonce,
    /// The nonce is malformed (the reason as one printable line).
    #[error("{0}")]
    BadNonce(String),
}

/// The launcher's `response` to the challenge: its nonce (not the agent's own) and its proof;
/// else why the handshake failed, to be sent to the peer.
fn read_response(frame: &[u8], agent_nonce: &[u8; NONCE_LEN]) -> Result<Response, BadResponse> {
    match decode_message::<Plain>(frame) {
        Ok(Plain::Response { nonce, mac, noise }) => match parse_nonce(&nonce) {
            Ok(n) if n == *agent_nonce => Err(BadResponse::OwnNonce),
            Ok(n) => Ok((n, mac, noise)),
            Err(e) => Err(BadResponse::BadNonce(crate::text::echo(&e.to_string()))),
        },
        Ok(other) => Err(BadResponse::NotAResponse(protocol::plain_kind(&other))),
        Err(e) => Err(BadResponse::Unreadable(describe_bad_frame(&e))),
    }
}
