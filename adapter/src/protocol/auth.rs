//! The cryptography of the protocol: nonces, HMAC-SHA256 under the per-job secret, and the
//! proofs each side gives in the handshake.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use super::wire::ProtocolError;

/// Length of the handshake nonces in bytes.
pub(crate) const NONCE_LEN: usize = 32;

const LABEL_CLIENT_PROOF: &[u8] = b"prrte-k8s client";
const LABEL_AGENT_PROOF: &[u8] = b"prrte-k8s agent";

/// The reason text the agent sends when the client's proof does not verify.
pub(crate) const AUTH_FAILED_REASON: &str =
    "authentication failed: the launcher's secret does not \
     match this agent's; mount the same Secret in both";

pub(super) type HmacSha256 = Hmac<Sha256>;

/// A fresh random nonce.
pub fn new_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

/// Decodes a hex nonce of exactly `NONCE_LEN` bytes.
pub fn parse_nonce(hex_text: &str) -> Result<[u8; NONCE_LEN], ProtocolError> {
    let bytes = hex::decode(hex_text)
        .map_err(|e| ProtocolError::Malformed(format!("nonce is not hex: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| ProtocolError::Malformed(format!("nonce must be {NONCE_LEN} bytes")))
}

pub(super) fn mac_over(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac
}

pub(super) fn verify_hex(mac: HmacSha256, given_hex: &str) -> bool {
    match hex::decode(given_hex) {
        Ok(tag) => mac.verify_slice(&tag).is_ok(),
        Err(_) => false,
    }
}

/// A MAC as hex text.
pub(super) fn hex_mac(mac: HmacSha256) -> String {
    hex::encode(mac.finalize().into_bytes())
}

/// `MAC("prrte-k8s client" || Na || Nc)`.
fn client_mac(key: &[u8], agent_nonce: &[u8], client_nonce: &[u8]) -> HmacSha256 {
    mac_over(key, &[LABEL_CLIENT_PROOF, agent_nonce, client_nonce])
}

/// `MAC("prrte-k8s agent" || Nc || Na)`.
fn agent_mac(key: &[u8], agent_nonce: &[u8], client_nonce: &[u8]) -> HmacSha256 {
    mac_over(key, &[LABEL_AGENT_PROOF, client_nonce, agent_nonce])
}

/// The client's proof: `MAC("prrte-k8s client" || Na || Nc)`, hex.
pub fn client_proof(key: &[u8], agent_nonce: &[u8], client_nonce: &[u8]) -> String {
    hex_mac(client_mac(key, agent_nonce, client_nonce))
}

/// Checks a client's proof in constant time.
pub fn verify_client_proof(
    key: &[u8],
    agent_nonce: &[u8],
    client_nonce: &[u8],
    given: &str,
) -> bool {
    verify_hex(client_mac(key, agent_nonce, client_nonce), given)
}

/// The agent's proof: `MAC("prrte-k8s agent" || Nc || Na)`, hex.
pub fn agent_proof(key: &[u8], agent_nonce: &[u8], client_nonce: &[u8]) -> String {
    hex_mac(agent_mac(key, agent_nonce, client_nonce))
}

/// Checks an agent's proof in constant time.
pub fn verify_agent_proof(
    key: &[u8],
    agent_nonce: &[u8],
    client_nonce: &[u8],
    given: &str,
) -> bool {
    verify_hex(agent_mac(key, agent_nonce, client_nonce), given)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_are_direction_specific() {
        let (na, nc) = (new_nonce(), new_nonce());
        let p = client_proof(b"k", &na, &nc);
        assert!(verify_client_proof(b"k", &na, &nc, &p));
        assert!(!verify_client_proof(b"other", &na, &nc, &p));
        assert!(!verify_agent_proof(b"k", &na, &nc, &p));
        assert!(!verify_client_proof(b"k", &na, &nc, "zz"));
        let q = agent_proof(b"k", &na, &nc);
        assert!(verify_agent_proof(b"k", &na, &nc, &q));
    }
}
