//! The encrypted channel's key exchange: a Noise handshake (the `snow` crate) carried inside
//! the `response` and `welcome` frames of the challenge-response handshake.
//!
//! With a secret the pattern is `Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s`: fresh X25519 keys on
//! both sides, and a pre-shared key derived from the job's secret, so only holders of the secret
//! derive the session keys. Without one (`--insecure-no-auth`) it is `Noise_NN_...`: encrypted
//! against eavesdroppers, authenticated by nothing. The prologue binds the challenge's
//! authentication mode and both nonces into the handshake hash.

use hmac::Mac;
use snow::{Builder, HandshakeState};

use super::auth::{mac_over, NONCE_LEN};
use super::messages::AuthMode;
use super::session::{Role, Session};
use super::wire::ProtocolError;

/// The Noise pattern with the job's secret as pre-shared key.
pub(crate) const NOISE_PSK: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
/// The Noise pattern of insecure mode (no secret).
pub(crate) const NOISE_NONE: &str = "Noise_NN_25519_ChaChaPoly_BLAKE2s";

const PROLOGUE_LABEL: &[u8] = b"prrte-k8s channel v1";
const PSK_LABEL: &[u8] = b"prrte-k8s noise psk";
/// A handshake message is 32 bytes of key and at most a 16-byte tag: anything longer is junk.
const MAX_HANDSHAKE_MSG: usize = 96;

/// The initiator's half-finished handshake, between `response` and `welcome`.
pub struct ClientNoise {
    state: HandshakeState,
    authenticated: bool,
}

impl std::fmt::Debug for ClientNoise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientNoise")
            .field("authenticated", &self.authenticated)
            .finish()
    }
}

fn builder_error(e: snow::Error) -> ProtocolError {
    ProtocolError::Integrity(format!("the encrypted channel could not be set up: {e}"))
}

fn prologue(key: Option<&[u8]>, agent_nonce: &[u8], client_nonce: &[u8]) -> Vec<u8> {
    let mode = match key {
        Some(_) => AuthMode::HmacSha256,
        None => AuthMode::None,
    };
    let mut p = PROLOGUE_LABEL.to_vec();
    p.push(u8::from(mode == AuthMode::HmacSha256));
    p.extend_from_slice(agent_nonce);
    p.extend_from_slice(client_nonce);
    p
}

fn handshake_state(
    key: Option<&[u8]>,
    agent_nonce: &[u8; NONCE_LEN],
    client_nonce: &[u8; NONCE_LEN],
    role: Role,
) -> Result<HandshakeState, ProtocolError> {
    let pattern = if key.is_some() { NOISE_PSK } else { NOISE_NONE };
    let params = pattern.parse().map_err(builder_error)?;
    let prologue = prologue(key, agent_nonce, client_nonce);
    let psk: Option<[u8; 32]> =
        key.map(|k| mac_over(k, &[PSK_LABEL]).finalize().into_bytes().into());
    let mut builder = Builder::new(params)
        .prologue(&prologue)
        .map_err(builder_error)?;
    if let Some(psk) = &psk {
        builder = builder.psk(0, psk).map_err(builder_error)?;
    }
    match role {
        Role::Client => builder.build_initiator(),
        Role::Agent => builder.build_responder(),
    }
    .map_err(builder_error)
}

/// The client's first Noise message (sent hex-encoded in `response`) and its state.
pub fn client_noise_start(
    key: Option<&[u8]>,
    agent_nonce: &[u8; NONCE_LEN],
    client_nonce: &[u8; NONCE_LEN],
) -> Result<(ClientNoise, Vec<u8>), ProtocolError> {
    let mut state = handshake_state(key, agent_nonce, client_nonce, Role::Client)?;
    let mut msg = [0u8; MAX_HANDSHAKE_MSG];
    let n = state.write_message(&[], &mut msg).map_err(builder_error)?;
    let noise = ClientNoise {
        state,
        authenticated: key.is_some(),
    };
    Ok((noise, msg[..n].to_vec()))
}

/// The agent's side: reads the client's message, answers with its own (sent hex-encoded in
/// `welcome`), and returns the session. A failure means the message was altered or made under
/// another key.
pub fn agent_noise(
    key: Option<&[u8]>,
    agent_nonce: &[u8; NONCE_LEN],
    client_nonce: &[u8; NONCE_LEN],
    client_msg: &[u8],
) -> Result<(Vec<u8>, Session), ProtocolError> {
    let mut state = handshake_state(key, agent_nonce, client_nonce, Role::Agent)?;
    let mut payload = [0u8; MAX_HANDSHAKE_MSG];
    if client_msg.len() > MAX_HANDSHAKE_MSG {
        return Err(handshake_failed("the launcher's"));
    }
    state
        .read_message(client_msg, &mut payload)
        .map_err(|_| handshake_failed("the launcher's"))?;
    let mut msg = [0u8; MAX_HANDSHAKE_MSG];
    let n = state.write_message(&[], &mut msg).map_err(builder_error)?;
    let transport = state.into_transport_mode().map_err(builder_error)?;
    Ok((
        msg[..n].to_vec(),
        Session::new(Role::Agent, transport, key.is_some()),
    ))
}

impl ClientNoise {
    /// Reads the agent's message and returns the session.
    pub fn finish(mut self, agent_msg: &[u8]) -> Result<Session, ProtocolError> {
        let mut payload = [0u8; MAX_HANDSHAKE_MSG];
        if agent_msg.len() > MAX_HANDSHAKE_MSG {
            return Err(handshake_failed("the agent's"));
        }
        self.state
            .read_message(agent_msg, &mut payload)
            .map_err(|_| handshake_failed("the agent's"))?;
        let transport = self.state.into_transport_mode().map_err(builder_error)?;
        Ok(Session::new(Role::Client, transport, self.authenticated))
    }
}

fn handshake_failed(whose: &str) -> ProtocolError {
    ProtocolError::Integrity(format!(
        "{whose} encrypted-channel handshake message does not verify (altered on the way, or \
         made under another secret)"
    ))
}

/// Decodes the hex handshake message of a `response` or `welcome`; a peer that sent none
/// speaks a protocol without the encrypted channel.
pub fn parse_noise_field(field: Option<&str>, peer: &str) -> Result<Vec<u8>, ProtocolError> {
    let text = field.ok_or_else(|| {
        ProtocolError::Malformed(format!(
            "{peer} sent no encrypted-channel handshake (`noise`): it runs an older prrte-k8s \
             without channel encryption; run the same prrte-k8s version on both sides"
        ))
    })?;
    let bytes = hex::decode(text)
        .map_err(|e| ProtocolError::Malformed(format!("`noise` is not hex: {e}")))?;
    if bytes.len() > MAX_HANDSHAKE_MSG {
        return Err(ProtocolError::Malformed(format!(
            "`noise` is {} bytes, more than a handshake message ({MAX_HANDSHAKE_MSG})",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Both ends of one session, handshaken in memory with fresh nonces (for tests and the
/// benchmark of the channel's cost).
pub fn local_pair(key: Option<&[u8]>) -> (Session, Session) {
    let (na, nc) = (super::auth::new_nonce(), super::auth::new_nonce());
    let (client, msg1) = client_noise_start(key, &na, &nc).expect("a local handshake starts");
    let (msg2, agent) = agent_noise(key, &na, &nc, &msg1).expect("a local handshake answers");
    let client = client.finish(&msg2).expect("a local handshake completes");
    (client, agent)
}

/// The encrypted frames of a [`Session`] (tested here, where sessions are made).
#[cfg(test)]
mod session_tests {
    use super::super::messages::{parse_request, Plain, Reply, Request};
    use super::super::session::{Session, CHUNK, NOISE_MAX, TAG};
    use super::super::wire::{decode_message, encode_message, ProtocolError};
    use super::local_pair;

    #[test]
    fn sealed_round_trip_and_order() {
        let (mut c, mut a) = local_pair(Some(b"k1"));
        let f1 = c.seal(&Request::Ping {});
        let f2 = c.seal(&Request::Status {});
        let b1 = a.open(&f1).unwrap();
        assert_eq!(parse_request(b1.as_bytes()).unwrap(), Request::Ping {});
        assert_eq!(
            parse_request(a.open(&f2).unwrap().as_bytes()).unwrap(),
            Request::Status {}
        );
        let r = a.seal(&Reply::Pong {});
        assert_eq!(
            decode_message::<Reply>(c.open(&r).unwrap().as_bytes()).unwrap(),
            Reply::Pong {}
        );
        // Replaying frame 1 after it was accepted is refused, and the session is over.
        assert!(matches!(a.open(&f1), Err(ProtocolError::Integrity(_))));
        assert!(a.open(&a_frame(&mut c)).is_err());
    }

    fn a_frame(c: &mut Session) -> Vec<u8> {
        c.seal(&Request::Ping {})
    }

    #[test]
    fn reordered_reflected_and_foreign_frames_are_refused() {
        let (mut c, mut a) = local_pair(Some(b"k1"));
        let _skipped = c.seal(&Request::Ping {});
        let second = c.seal(&Request::Ping {});
        assert!(matches!(a.open(&second), Err(ProtocolError::Integrity(_))));
        // A client frame sent back to the client (reflection) fails: the other direction's key.
        let (mut c, _) = local_pair(Some(b"k1"));
        let f = c.seal(&Request::Ping {});
        assert!(c.open(&f).is_err());
        // A frame from another session fails.
        let (mut c2, _) = local_pair(Some(b"k1"));
        let (_, mut a) = local_pair(Some(b"k1"));
        assert!(a.open(&c2.seal(&Request::Ping {})).is_err());
    }

    #[test]
    fn altered_and_truncated_frames_are_refused() {
        let (mut c, mut a) = local_pair(Some(b"secret"));
        let mut frame = c.seal(&Request::Ping {});
        frame[3] ^= 0x20;
        assert!(matches!(a.open(&frame), Err(ProtocolError::Integrity(_))));
        // A frame of several messages, cut after its first.
        let (mut c, mut a) = local_pair(Some(b"secret"));
        let big = format!("\"{}\"", "x".repeat(3 * CHUNK));
        let frame = c.seal_text(&big);
        assert_eq!(frame.len(), big.len() + 4 * (TAG + 1));
        let e = a.open(&frame[..NOISE_MAX]).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        let (mut c, mut a) = local_pair(Some(b"secret"));
        assert_eq!(a.open(&c.seal_text(&big)).unwrap(), big);
    }

    #[test]
    fn bodies_of_every_size_around_a_message_boundary_round_trip() {
        let (mut c, mut a) = local_pair(Some(b"secret"));
        for len in [
            0,
            1,
            837,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            2 * CHUNK,
            2 * CHUNK + 1,
        ] {
            let body = "y".repeat(len);
            let frame = c.seal_text(&body);
            let messages = len.div_ceil(CHUNK).max(1);
            assert_eq!(frame.len(), len + messages * (TAG + 1), "{len}");
            assert_eq!(a.open(&frame).unwrap(), body, "{len}");
            let back = a.seal_text(&body);
            assert_eq!(c.open(&back).unwrap(), body, "{len}");
        }
    }

    #[test]
    fn nothing_of_the_body_is_in_clear() {
        let (mut c, _) = local_pair(None);
        let frame = c.seal_text(r#"{"v":1,"type":"launch","argv":["MARKER-7f3a"]}"#);
        let text = String::from_utf8_lossy(&frame);
        assert!(
            !text.contains("MARKER") && !text.contains("launch"),
            "{text}"
        );
    }

    #[test]
    fn a_plain_frame_after_the_handshake_is_named() {
        let (_, mut a) = local_pair(Some(b"k"));
        let e = a
            .open(&encode_message(&Plain::Error {
                reason: "busy".into(),
            }))
            .unwrap_err();
        assert!(e.to_string().contains("unencrypted error: busy"), "{e}");
        let (_, mut a) = local_pair(Some(b"k"));
        let e = a.open(br#"{"v":1,"type":"ping"}"#).unwrap_err();
        assert!(e.to_string().contains("expected an encrypted frame"), "{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::auth::new_nonce;
    use super::*;

    #[test]
    fn a_wrong_key_or_other_nonces_fail_the_handshake() {
        let (na, nc) = (new_nonce(), new_nonce());
        let (_, msg1) = client_noise_start(Some(b"key one"), &na, &nc).unwrap();
        let e = agent_noise(Some(b"key two"), &na, &nc, &msg1).unwrap_err();
        assert!(e.to_string().contains("another secret"), "{e}");
        assert!(agent_noise(Some(b"key one"), &nc, &na, &msg1).is_err());
        // An agent without a secret (insecure mode) cannot complete a keyed client's handshake.
        let (client, msg1) = client_noise_start(Some(b"key one"), &na, &nc).unwrap();
        let (msg2, _) = agent_noise(None, &na, &nc, &msg1).unwrap();
        assert!(client.finish(&msg2).is_err());
        let (client, msg1) = client_noise_start(Some(b"key one"), &na, &nc).unwrap();
        let (mut msg2, _) = agent_noise(Some(b"key one"), &na, &nc, &msg1).unwrap();
        msg2[40] ^= 1;
        assert!(client.finish(&msg2).is_err());
    }

    #[test]
    fn a_response_without_noise_names_the_version_mismatch() {
        let e = parse_noise_field(None, "the launcher").unwrap_err();
        assert!(e.to_string().contains("same prrte-k8s version"), "{e}");
    }
}
