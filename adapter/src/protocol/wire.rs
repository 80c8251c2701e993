//! The versioned JSON every frame body is (`"v": 1` and a `"type"`), and the errors of the
//! wire: framing, parsing and authentication.

use std::io;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Protocol version carried as `"v"` in every frame.
pub const VERSION: u64 = 1;
/// Errors of framing, parsing and authentication.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    #[error("frame exceeds the maximum of {max} bytes")]
    FrameTooLarge { max: usize },
    #[error("connection closed by the peer")]
    Closed,
    #[error("no frame within {0:?}")]
    Timeout(Duration),
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("unsupported protocol version {got} (this side speaks {VERSION})")]
    Version { got: String },
    #[error("frame integrity check failed: {0}")]
    Integrity(String),
}

/// Serializes a message as a frame body: its JSON object with `"v": 1` added.
pub fn encode_message<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut value = serde_json::to_value(msg).expect("protocol messages serialize to JSON");
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("v".to_owned(), serde_json::Value::from(VERSION));
    }
    serde_json::to_vec(&value).expect("JSON values serialize")
}

/// Parses a frame body: checks it is a JSON object with `"v": 1`, then decodes the rest as `T`.
pub fn decode_message<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProtocolError> {
    let value = parse_versioned(body)?;
    serde_json::from_value(value).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

pub(super) fn parse_versioned(body: &[u8]) -> Result<serde_json::Value, ProtocolError> {
    let mut value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ProtocolError::Malformed(format!("not JSON: {e}")))?;
    let map = value
        .as_object_mut()
        .ok_or_else(|| ProtocolError::Malformed("not a JSON object".into()))?;
    match map.remove("v") {
        Some(v) if v.as_u64() == Some(VERSION) => Ok(value),
        Some(v) => Err(ProtocolError::Version { got: v.to_string() }),
        None => Err(ProtocolError::Malformed(
            "missing protocol version field `v`".into(),
        )),
    }
}
