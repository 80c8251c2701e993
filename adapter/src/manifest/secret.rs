//! The per-job Secret and its key.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;

use super::meta::{meta, names};
use super::plan::JobPlan;

/// A fresh per-job key: 32 random bytes from the operating system, hex-encoded.
pub fn fresh_key() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// The Secret holding `key` (under the data key `key`).
pub(super) fn secret(a: &JobPlan, key: &str) -> Secret {
    Secret {
        metadata: meta(a, &names(a).secret),
        type_: Some("Opaque".into()),
        data: Some([("key".to_string(), ByteString(key.as_bytes().to_vec()))].into()),
        ..Default::default()
    }
}
