//! Framing: a 4-byte big-endian length and that many bytes of body, over a byte stream.

use std::io;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::bytes::Bytes;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use super::wire::ProtocolError;

/// Default maximum frame length (bytes of JSON after the length prefix).
pub const DEFAULT_MAX_FRAME: usize = crate::settings::agent::MAX_FRAME.default_u64() as usize;
/// Maximum frame length accepted before authentication.
pub const HANDSHAKE_MAX_FRAME: usize = 16 * 1024;
/// The framing codec: u32 big-endian length prefix, at most `max` bytes of body.
pub fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .big_endian()
        .length_field_type::<u32>()
        .max_frame_length(max)
        .new_codec()
}

/// Encodes one frame (length prefix + body) as raw bytes.
pub fn encode_frame(body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).expect("frame body fits in u32");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A framed connection.
pub type FramedConn<S> = Framed<S, LengthDelimitedCodec>;

/// Wraps a byte stream in the frame codec with the given maximum frame length.
pub fn framed<S: AsyncRead + AsyncWrite>(stream: S, max: usize) -> FramedConn<S> {
    Framed::new(stream, codec(max))
}

/// Receives one frame, waiting at most `timeout` (if given). Cancel-safe.
pub async fn recv_frame<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut FramedConn<S>,
    timeout: Option<Duration>,
) -> Result<Bytes, ProtocolError> {
    let next = match timeout {
        Some(t) => tokio::time::timeout(t, conn.next())
            .await
            .map_err(|_| ProtocolError::Timeout(t))?,
        None => conn.next().await,
    };
    match next {
        None => Err(ProtocolError::Closed),
        Some(Ok(bytes)) => Ok(bytes.freeze()),
        Some(Err(e)) => Err(classify_read_error(e, conn.codec().max_frame_length())),
    }
}

/// Turns a codec read error into [`ProtocolError::FrameTooLarge`] where that is what it is.
pub(crate) fn classify_read_error(e: io::Error, max: usize) -> ProtocolError {
    if e.get_ref()
        .is_some_and(|inner| inner.is::<tokio_util::codec::LengthDelimitedCodecError>())
    {
        ProtocolError::FrameTooLarge { max }
    } else {
        ProtocolError::Io(e)
    }
}

/// Sends one frame body, waiting at most `timeout` for the peer to take it.
pub async fn send_frame<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut FramedConn<S>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), ProtocolError> {
    match tokio::time::timeout(timeout, conn.send(Bytes::from(body))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ProtocolError::Io(e)),
        Err(_) => Err(ProtocolError::Timeout(timeout)),
    }
}

/// Turns on TCP keepalive (first probe after 15 s idle, then every 5 s, 4 probes), so that a
/// peer whose node vanished is noticed within about 35 s by both sides.
pub(crate) fn set_keepalive(stream: &tokio::net::TcpStream) -> io::Result<()> {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(15))
        .with_interval(Duration::from_secs(5))
        .with_retries(4);
    socket2::SockRef::from(stream).set_tcp_keepalive(&ka)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_encode_length_big_endian() {
        let f = encode_frame(b"{}");
        assert_eq!(f, vec![0, 0, 0, 2, b'{', b'}']);
    }

    #[tokio::test]
    async fn oversized_frames_are_classified() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut conn = framed(a, 8);
        use tokio::io::AsyncWriteExt;
        b.write_all(&encode_frame(b"0123456789")).await.unwrap();
        let e = recv_frame(&mut conn, Some(Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert!(
            matches!(e, ProtocolError::FrameTooLarge { max: 8 }),
            "{e:?}"
        );
    }
}
