//! The per-job Secret and its key.

use serde_json::{json, Value};

use super::meta::{meta, names};
use super::plan::JobPlan;

/// A fresh per-job key: 32 random bytes from the operating system, hex-encoded.
pub fn fresh_key() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// The Secret holding `key`.
pub(super) fn secret(a: &JobPlan, key: &str) -> Value {
    use base64::Engine;
    let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(a, &names(a).secret), "type": "Opaque",
        "data": {"key": encode(key.as_bytes())}})
}
