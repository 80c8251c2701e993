//! The client's side of the handshake (the agent's is `crate::agent::handshake`).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::auth::{client_proof, new_nonce, parse_nonce, verify_agent_proof};
use super::frame::{recv_frame, send_frame, FramedConn};
use super::messages::{plain_kind, AuthMode, Plain};
use super::noise::{client_noise_start, parse_noise_field};
use super::session::Session;
use super::wire::{decode_message, encode_message, ProtocolError};

/// Why a client-side handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The agent refused us (normally: our secret does not match its secret).
    #[error("{0}")]
    Refused(String),
    /// The agent answered our proof but could not prove that it holds the secret.
    #[error("the agent could not prove that it holds the launcher's secret (its Secret differs, or it is not a prrte-k8s agent)")]
    AgentNotProven,
    /// The agent runs without authentication but we hold a secret.
    #[error("the agent runs without authentication (--insecure-no-auth, no secret) but the launcher has a secret; refusing to launch through it: mount the same Secret in the agent's pod")]
    AgentInsecure,
    /// The agent demands authentication but we have no secret.
    #[error("the agent requires authentication but the launcher has no secret: give the launcher the agent's Secret")]
    NoSecret,
    /// The agent closed the connection after our proof without a word: it refused us (a reset
    /// beat its `refused`), or it dropped the connection before authenticating it (too many
    /// pending).
    #[error("the agent closed the connection during authentication")]
    ClosedInAuthentication,
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
}

/// Runs the client side of the handshake. Each wait for the agent is bounded by `timeout`.
pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut FramedConn<S>,
    secret: Option<&[u8]>,
    timeout: Duration,
) -> Result<Session, HandshakeError> {
    let first = recv_frame(conn, Some(timeout)).await?;
    let (auth, agent_nonce) = match decode_message::<Plain>(&first)? {
        Plain::Challenge { auth, nonce, .. } => (auth, parse_nonce(&nonce)?),
        other => return Err(unexpected(other, "a challenge")),
    };
    let key = match (auth, secret) {
        (AuthMode::HmacSha256, Some(s)) => Some(s.to_vec()),
        (AuthMode::HmacSha256, None) => return Err(HandshakeError::NoSecret),
        (AuthMode::None, Some(_)) => return Err(HandshakeError::AgentInsecure),
        (AuthMode::None, None) => None,
    };
    let client_nonce = new_nonce();
    let mac = key
        .as_deref()
        .map(|k| client_proof(k, &agent_nonce, &client_nonce));
    let (noise, noise_msg) = client_noise_start(key.as_deref(), &agent_nonce, &client_nonce)?;
    let response = Plain::Response {
        nonce: hex::encode(client_nonce),
        mac,
        noise: Some(hex::encode(noise_msg)),
    };
    send_frame(conn, encode_message(&response), timeout).await?;
    let answer = match recv_frame(conn, Some(timeout)).await {
        Ok(a) => a,
        // An agent that refuses closes right after its `refused`; a reset may beat it.
        Err(ProtocolError::Closed) if key.is_some() => {
            return Err(HandshakeError::ClosedInAuthentication)
        }
        Err(e) => return Err(e.into()),
    };
    match decode_message::<Plain>(&answer)? {
        Plain::Welcome {
            mac,
            noise: agent_msg,
        } => {
            if let Some(k) = &key {
                let ok = mac
                    .as_deref()
                    .is_some_and(|m| verify_agent_proof(k, &agent_nonce, &client_nonce, m));
                if !ok {
                    return Err(HandshakeError::AgentNotProven);
                }
            }
            let agent_msg = parse_noise_field(agent_msg.as_deref(), "the agent")?;
            Ok(noise.finish(&agent_msg)?)
        }
        other => Err(unexpected(other, "welcome")),
    }
}

/// The agent sent `got` where the client waited for `expected`: its `refused` or `error`, or
/// a frame out of place.
fn unexpected(got: Plain, expected: &str) -> HandshakeError {
    match got {
        Plain::Refused { reason } | Plain::Error { reason } => HandshakeError::Refused(reason),
        other => {
            ProtocolError::Malformed(format!("expected {expected}, got {}", plain_kind(&other)))
                .into()
        }
    }
}
