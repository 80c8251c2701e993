//! An established connection's state: every frame after the handshake is encrypted and
//! authenticated with the Noise session's keys (ChaCha20-Poly1305, one key per direction, an
//! implicit counter as nonce).
//!
//! A frame body is one or more Noise transport messages of at most 65,535 bytes each; every
//! message but the frame's last is exactly that long. Each message's plaintext is one flag byte
//! (`1`: more messages follow in this frame, `0`: the last) and up to 65,518 bytes of the JSON
//! message. A frame altered, truncated, replayed, reordered, sent in the other direction or
//! encrypted for another session does not decrypt, and the session is over.

use std::fmt;

use serde::Serialize;
use snow::TransportState;

use super::messages::Plain;
use super::wire::{encode_message, parse_versioned, ProtocolError};

/// The largest Noise message.
pub(super) const NOISE_MAX: usize = 65_535;
/// The AEAD tag of each message.
pub(super) const TAG: usize = 16;
/// JSON bytes per Noise message (after the flag byte).
pub(super) const CHUNK: usize = NOISE_MAX - TAG - 1;
const MORE: u8 = 1;
const LAST: u8 = 0;

/// Which end of the connection a [`Session`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Agent,
}

/// The encrypted state of one connection: seals outgoing and opens incoming frames.
pub struct Session {
    transport: TransportState,
    authenticated: bool,
    role: Role,
    broken: bool,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("authenticated", &self.authenticated)
            .field("role", &self.role)
            .field("sent", &self.transport.sending_nonce())
            .field("received", &self.transport.receiving_nonce())
            .finish()
    }
}

impl Session {
    /// A session after a completed handshake; `authenticated` is false only in insecure mode.
    pub(super) fn new(role: Role, transport: TransportState, authenticated: bool) -> Session {
        Session {
            transport,
            authenticated,
            role,
            broken: false,
        }
    }

    /// Whether the peer proved that it holds the secret (false only in insecure mode; the
    /// channel is encrypted either way).
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// Seals a message; returns the frame body to send.
    pub fn seal<T: Serialize>(&mut self, msg: &T) -> Vec<u8> {
        self.seal_bytes(&encode_message(msg))
    }

    /// Seals arbitrary body text (normally JSON); returns the frame body to send.
    pub fn seal_text(&mut self, body: &str) -> Vec<u8> {
        self.seal_bytes(body.as_bytes())
    }

    fn seal_bytes(&mut self, body: &[u8]) -> Vec<u8> {
        let count = body.len().div_ceil(CHUNK).max(1);
        let mut out = Vec::with_capacity(body.len() + count * (TAG + 1));
        // Buffers of the frame's size, not of the largest message: most frames are small.
        let largest = body.len().min(CHUNK) + 1;
        let mut plain = Vec::with_capacity(largest);
        let mut msg = vec![0u8; largest + TAG];
        for i in 0..count {
            let part = &body[(i * CHUNK).min(body.len())..((i + 1) * CHUNK).min(body.len())];
            plain.clear();
            plain.push(if i + 1 == count { LAST } else { MORE });
            plain.extend_from_slice(part);
            let n = self
                .transport
                .write_message(&plain, &mut msg)
                .expect("a Noise message of at most 65,535 bytes encrypts");
            out.extend_from_slice(&msg[..n]);
        }
        out
    }

    /// Decrypts a frame and returns its body text. Any failure is final for the session.
    pub fn open(&mut self, frame: &[u8]) -> Result<String, ProtocolError> {
        if self.broken {
            return Err(ProtocolError::Integrity(
                "the session already failed its integrity check".into(),
            ));
        }
        let result = self.open_frame(frame);
        if result.is_err() {
            self.broken = true;
        }
        let body = result?;
        String::from_utf8(body)
            .map_err(|_| ProtocolError::Malformed("the decrypted frame is not UTF-8".into()))
    }

    fn open_frame(&mut self, frame: &[u8]) -> Result<Vec<u8>, ProtocolError> {
        let mut body = Vec::with_capacity(frame.len());
        let mut rest = frame;
        // A message's plaintext is shorter than the message.
        let mut plain = vec![0u8; frame.len().min(NOISE_MAX)];
        loop {
            if rest.is_empty() {
                return Err(ProtocolError::Integrity(
                    "the frame ends before its last encrypted message (truncated)".into(),
                ));
            }
            let (msg, tail) = rest.split_at(rest.len().min(NOISE_MAX));
            let n = match self.transport.read_message(msg, &mut plain) {
                Ok(n) if n > 0 => n,
                _ => return Err(undecryptable(frame)),
            };
            body.extend_from_slice(&plain[1..n]);
            rest = tail;
            match plain[0] {
                LAST if rest.is_empty() => return Ok(body),
                MORE => continue,
                _ => {
                    return Err(ProtocolError::Integrity(
                        "the frame's encrypted messages are not laid out as sent".into(),
                    ))
                }
            }
        }
    }
}

/// Why a frame did not decrypt: a plain frame where an encrypted one belongs (naming it, and
/// quoting a peer's plain `error`), else an integrity failure.
fn undecryptable(frame: &[u8]) -> ProtocolError {
    let Ok(value) = parse_versioned(frame) else {
        return ProtocolError::Integrity(
            "the frame does not decrypt (altered, replayed, reordered, or encrypted for another \
             session)"
                .into(),
        );
    };
    let kind = value
        .get("type")
        .and_then(|t| t.as_str())
        .unwrap_or("")
        .to_owned();
    if let Ok(Plain::Error { reason } | Plain::Refused { reason }) =
        serde_json::from_value::<Plain>(value)
    {
        return ProtocolError::Malformed(format!("peer sent an unencrypted error: {reason}"));
    }
    ProtocolError::Malformed(format!(
        "expected an encrypted frame, got an unencrypted `{}` (after the handshake every frame \
         is encrypted)",
        kind.escape_debug()
    ))
}
