//! The per-job secret derived from an ssh private key: Kubeflow Trainer makes a Secret
//! `<trainjob>-mpi-ssh-auth` for every MPI TrainJob and mounts its private key in every pod
//! (`<sshAuthMountPath>/id_rsa`, a PEM `EC PRIVATE KEY`). Pointed at such a file, the secret
//! file setting takes no key of its own: both sides derive the same 32 bytes from the mounted
//! key with HKDF-SHA256 (RFC 5869) under a fixed salt and context, so the agents of one
//! TrainJob share a secret no other TrainJob holds, and the ssh key itself is never the MAC
//! key.

use hmac::Mac;

use super::auth::mac_over;

/// HKDF's salt.
const SALT: &[u8] = b"prrte-k8s";
/// HKDF's context (`info`).
const CONTEXT: &[u8] = b"prrte-k8s agent secret from an ssh private key v1";
/// Length of the derived secret.
pub(crate) const DERIVED_LEN: usize = 32;

/// Whether `bytes` is a PEM private key (`-----BEGIN ... PRIVATE KEY-----`, the OpenSSH,
/// SEC1 and PKCS#8 forms), after leading blank space.
pub(crate) fn is_private_key(bytes: &[u8]) -> bool {
    let text = bytes.trim_ascii_start();
    let Some(rest) = text.strip_prefix(b"-----BEGIN ") else {
        return false;
    };
    let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
    line.trim_ascii_end().ends_with(b"PRIVATE KEY-----")
}

/// The secret derived from the private key file's bytes.
pub(crate) fn derive(private_key: &[u8]) -> [u8; DERIVED_LEN] {
    hkdf_sha256(SALT, private_key, CONTEXT)
}

/// HKDF-SHA256 (RFC 5869) with an output of one block: `T(1) = HMAC(HMAC(salt, ikm), info ||
/// 0x01)`.
fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[u8]) -> [u8; DERIVED_LEN] {
    let prk = mac_over(salt, &[ikm]).finalize().into_bytes();
    let okm = mac_over(&prk, &[info, &[1u8]]).finalize().into_bytes();
    okm.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5869, test case 1 (the first 32 bytes of its 42-byte output).
    #[test]
    fn hkdf_matches_rfc_5869() {
        let ikm = [0x0bu8; 22];
        let salt: Vec<u8> = (0x00..=0x0c).collect();
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        assert_eq!(
            hex::encode(hkdf_sha256(&salt, &ikm, &info)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
        );
    }

    #[test]
    fn private_keys_are_recognised() {
        assert!(is_private_key(b"-----BEGIN EC PRIVATE KEY-----\nMIHc\n"));
        assert!(is_private_key(
            b"\n-----BEGIN OPENSSH PRIVATE KEY-----\r\nb3Bl\n"
        ));
        assert!(is_private_key(b"-----BEGIN PRIVATE KEY-----\nMC4C\n"));
        assert!(!is_private_key(b"-----BEGIN PUBLIC KEY-----\nMFkw\n"));
        assert!(!is_private_key(b"ecdsa-sha2-nistp521 AAAA"));
        assert!(!is_private_key(b"0123456789abcdef0123456789abcdef"));
    }

    /// Two keys give two secrets; the same key always the same one, never the key itself.
    #[test]
    fn derivation_is_per_key() {
        let a = b"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        let b = b"-----BEGIN EC PRIVATE KEY-----\nAAAB\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(derive(a), derive(a));
        assert_ne!(derive(a), derive(b));
        assert!(!a.windows(DERIVED_LEN).any(|w| w == derive(a)));
    }
}
