//! An authenticated connection's state: sealing outgoing and opening incoming frames, each
//! under a MAC with its direction's label and a sequence number.

use std::fmt;

use serde::Serialize;

use super::auth::{hex_mac, mac_over, verify_hex, HmacSha256, LABEL_C2S, LABEL_S2C, NONCE_LEN};
use super::messages::Plain;
use super::wire::{encode_message, parse_versioned, ProtocolError};

/// Which end of the connection a [`Session`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Agent,
}

/// The authenticated state of one connection: seals outgoing and opens incoming frames.
pub struct Session {
    key: Option<Vec<u8>>,
    agent_nonce: [u8; NONCE_LEN],
    client_nonce: [u8; NONCE_LEN],
    role: Role,
    send_seq: u64,
    recv_seq: u64,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("authenticated", &self.key.is_some())
            .field("role", &self.role)
            .field("send_seq", &self.send_seq)
            .field("recv_seq", &self.recv_seq)
            .finish()
    }
}

impl Session {
    /// A session after a completed handshake; `key` is `None` in insecure mode.
    pub fn new(
        role: Role,
        key: Option<Vec<u8>>,
        agent_nonce: [u8; NONCE_LEN],
        client_nonce: [u8; NONCE_LEN],
    ) -> Session {
        Session {
            key,
            agent_nonce,
            client_nonce,
            role,
            send_seq: 0,
            recv_seq: 0,
        }
    }

    /// Whether frames are authenticated (false only in insecure mode).
    pub fn is_authenticated(&self) -> bool {
        self.key.is_some()
    }

    fn labels(&self) -> (&'static [u8], &'static [u8]) {
        match self.role {
            Role::Client => (LABEL_C2S, LABEL_S2C),
            Role::Agent => (LABEL_S2C, LABEL_C2S),
        }
    }

    fn frame_mac(&self, key: &[u8], label: &[u8], seq: u64, body: &[u8]) -> HmacSha256 {
        mac_over(
            key,
            &[
                label,
                &self.agent_nonce,
                &self.client_nonce,
                &seq.to_be_bytes(),
                body,
            ],
        )
    }

    /// Seals a message; returns the frame body to send.
    pub fn seal<T: Serialize>(&mut self, msg: &T) -> Vec<u8> {
        let body = String::from_utf8(encode_message(msg)).expect("JSON is UTF-8");
        self.seal_text(&body)
    }

    /// Seals arbitrary body text (normally JSON); returns the frame body to send.
    pub fn seal_text(&mut self, body: &str) -> Vec<u8> {
        self.send_seq += 1;
        self.seal_text_at(self.send_seq, body)
    }

    /// Seals `body` under an explicit sequence number without advancing the session's own
    /// counter ([`seal_text`](Session::seal_text) advances it first). Called alone, it makes a
    /// correctly authenticated frame that is out of order (for tests of the receiver's sequence
    /// checks).
    pub fn seal_text_at(&self, seq: u64, body: &str) -> Vec<u8> {
        let mac = self.key.as_ref().map(|key| {
            let (send_label, _) = self.labels();
            hex_mac(self.frame_mac(key, send_label, seq, body.as_bytes()))
        });
        encode_message(&Plain::Sealed {
            seq,
            body: body.to_owned(),
            mac,
        })
    }

    /// Verifies a sealed frame and returns its body text. Any failure is final for the session.
    pub fn open(&mut self, frame: &[u8]) -> Result<String, ProtocolError> {
        let value = parse_versioned(frame)?;
        let kind = value
            .get("type")
            .and_then(|t| t.as_str())
            .unwrap_or("")
            .to_owned();
        if kind != "sealed" {
            if let Ok(Plain::Error { reason } | Plain::Refused { reason }) =
                serde_json::from_value::<Plain>(value)
            {
                return Err(ProtocolError::Malformed(format!(
                    "peer sent an unsealed error: {reason}"
                )));
            }
            return Err(ProtocolError::Malformed(format!(
                "expected a sealed frame, got type `{}` (after the handshake every frame must be sealed)",
                kind.escape_debug()
            )));
        }
        let (seq, body, mac) = match serde_json::from_value::<Plain>(value) {
            Ok(Plain::Sealed { seq, body, mac }) => (seq, body, mac),
            Ok(_) => unreachable!("type checked above"),
            Err(e) => return Err(ProtocolError::Malformed(e.to_string())),
        };
        if let Some(key) = &self.key {
            let Some(mac) = mac else {
                return Err(ProtocolError::Integrity(
                    "sealed frame without a MAC".into(),
                ));
            };
            let (_, recv_label) = self.labels();
            if !verify_hex(self.frame_mac(key, recv_label, seq, body.as_bytes()), &mac) {
                return Err(ProtocolError::Integrity(
                    "MAC does not verify (forged, altered, or replayed from another session)"
                        .into(),
                ));
            }
        }
        let expected = self.recv_seq + 1;
        if seq != expected {
            return Err(ProtocolError::Integrity(format!(
                "sequence number {seq} where {expected} was expected (replayed or reordered frame)"
            )));
        }
        self.recv_seq = seq;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::auth::new_nonce;
    use super::super::messages::{decode_request, Reply, Request};
    use super::super::wire::decode_message;
    use super::*;

    fn pair(key: Option<&[u8]>) -> (Session, Session) {
        let na = new_nonce();
        let nc = new_nonce();
        (
            Session::new(Role::Client, key.map(|k| k.to_vec()), na, nc),
            Session::new(Role::Agent, key.map(|k| k.to_vec()), na, nc),
        )
    }

    #[test]
    fn sealed_round_trip_and_sequence() {
        let (mut c, mut a) = pair(Some(b"k1"));
        let f1 = c.seal(&Request::Ping {});
        let f2 = c.seal(&Request::Status {});
        let b1 = a.open(&f1).unwrap();
        assert_eq!(decode_request(b1.as_bytes()).unwrap(), Request::Ping {});
        // Replaying frame 1 after it was accepted is refused.
        let mut a2 = Session::new(
            Role::Agent,
            Some(b"k1".to_vec()),
            a.agent_nonce,
            a.client_nonce,
        );
        a2.open(&f1).unwrap();
        assert!(matches!(a2.open(&f1), Err(ProtocolError::Integrity(_))));
        // In-order frame 2 works on the original session.
        assert_eq!(
            decode_request(a.open(&f2).unwrap().as_bytes()).unwrap(),
            Request::Status {}
        );
        // Reply direction.
        let r = a.seal(&Reply::Pong {});
        assert_eq!(
            decode_message::<Reply>(c.open(&r).unwrap().as_bytes()).unwrap(),
            Reply::Pong {}
        );
    }

    #[test]
    fn reflected_and_foreign_frames_are_refused() {
        let (mut c, mut a) = pair(Some(b"k1"));
        // A client frame sent back to the client (reflection) fails: other direction's label.
        let f = c.seal(&Request::Ping {});
        assert!(matches!(c.open(&f), Err(ProtocolError::Integrity(_))));
        // A frame from another session (other nonces) fails.
        let (mut c2, _) = pair(Some(b"k1"));
        let g = c2.seal(&Request::Ping {});
        assert!(matches!(a.open(&g), Err(ProtocolError::Integrity(_))));
        // Wrong key fails.
        let mut c3 = Session::new(
            Role::Client,
            Some(b"k2".to_vec()),
            a.agent_nonce,
            a.client_nonce,
        );
        let h = c3.seal(&Request::Ping {});
        assert!(matches!(a.open(&h), Err(ProtocolError::Integrity(_))));
    }

    #[test]
    fn altered_body_is_refused() {
        let (mut c, mut a) = pair(Some(b"secret"));
        let frame = c.seal(&Request::Ping {});
        let text = String::from_utf8(frame).unwrap().replace("ping", "status");
        assert!(matches!(
            a.open(text.as_bytes()),
            Err(ProtocolError::Integrity(_))
        ));
    }

    #[test]
    fn insecure_sessions_still_enforce_sequence() {
        let (mut c, mut a) = pair(None);
        let f = c.seal(&Request::Ping {});
        a.open(&f).unwrap();
        assert!(matches!(a.open(&f), Err(ProtocolError::Integrity(_))));
    }
}
