//! The key pair of a TrainJob's `<trainjob>-mpi-ssh-auth` Secret. Trainer's controller makes
//! an ECDSA key (P-521, SEC1 PEM); ring, the tree's cryptography, makes P-384 and no P-521, so
//! the key here is ECDSA P-384: the private key as PKCS#8 PEM (`PRIVATE KEY`, which OpenSSH
//! reads), the public key in `authorized_keys` form (`ecdsa-sha2-nistp384 AAAA...`). No ssh
//! server uses it: the agents derive the key they authenticate each other with from it.

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P384_SHA384_ASN1_SIGNING};

/// A key pair in the Secret's two forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshKeyPair {
    /// `ssh-privatekey`: PEM.
    pub private_pem: String,
    /// `ssh-publickey`: one `authorized_keys` line, with its newline.
    pub public_openssh: String,
}

/// Why no key was made.
#[derive(Debug, thiserror::Error)]
#[error("cannot generate the ssh-auth key pair: {0}")]
pub struct KeyError(String);

/// A new random key pair.
pub fn generate() -> Result<SshKeyPair, KeyError> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_ASN1_SIGNING, &rng)
        .map_err(|e| KeyError(e.to_string()))?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|e| KeyError(e.to_string()))?;
    Ok(SshKeyPair {
        private_pem: pem("PRIVATE KEY", pkcs8.as_ref()),
        public_openssh: authorized_key(pair.public_key().as_ref()),
    })
}

/// DER in PEM: base64 in lines of 64.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// RFC 5656's public key blob (key type, curve, uncompressed point), as `authorized_keys`
/// writes it.
fn authorized_key(point: &[u8]) -> String {
    const KEY_TYPE: &str = "ecdsa-sha2-nistp384";
    let mut blob = Vec::new();
    for field in [KEY_TYPE.as_bytes(), b"nistp384", point] {
        blob.extend_from_slice(&(field.len() as u32).to_be_bytes());
        blob.extend_from_slice(field);
    }
    format!(
        "{KEY_TYPE} {}\n",
        base64::engine::general_purpose::STANDARD.encode(blob)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_pem_and_an_authorized_keys_line_of_the_same_key() {
        let k = generate().unwrap();
        assert!(k.private_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(k.private_pem.ends_with("-----END PRIVATE KEY-----\n"));
        let body: String = k
            .private_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        assert!(k.private_pem.lines().all(|l| l.len() <= 64));
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_ASN1_SIGNING, &der, &rng).unwrap();
        let (kind, b64) = k.public_openssh.trim_end().split_once(' ').unwrap();
        assert_eq!(kind, "ecdsa-sha2-nistp384");
        let blob = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert!(blob.ends_with(pair.public_key().as_ref()));
        assert_eq!(&blob[4..23], b"ecdsa-sha2-nistp384");
        assert_ne!(generate().unwrap(), k, "each pair is new");
    }
}
