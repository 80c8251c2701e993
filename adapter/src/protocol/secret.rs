//! The per-job secret both sides of the protocol hold: where it is mounted by default and how
//! it is read (the agent at startup, the launcher before it connects, `prrte-k8s doctor`).
//!
//! Like ssh with a key it must trust (sshd's `StrictModes`), the reader refuses a key file
//! that someone else could replace (writable by group or others, or owned by a user other than
//! root or the reader), and a key that is no secret at all: shorter than [`MIN_SECRET_LEN`],
//! one block repeated, a run of consecutive bytes, or too little variety to hold 80 bits. A key
//! that others may read is a warning, loud and once per read, not a refusal: Kubernetes mounts a
//! Secret's files with mode 0644 unless `defaultMode` says otherwise, and refusing those would
//! break running deployments. `prrte-k8s manifest` renders `defaultMode: 0440` with the pod's
//! own `fsGroup`, which reads as private (the group is the reader's own).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Default location of the mounted per-job Secret (the agent's `--secret-file`, the PLM's
/// `plm_k8s_secret_file`: [`crate::settings::mca::SECRET_FILE`]).
pub const DEFAULT_SECRET_FILE: &str = crate::settings::mca::SECRET_FILE.default;

/// How to make a good key, for messages.
const MAKE_ONE: &str = "create it from random bytes, e.g. `(umask 077; head -c 32 /dev/urandom \
                        | od -An -tx1 | tr -d ' \\n' > key)` and `kubectl create secret generic \
                        NAME --from-file=key=key`";

/// Why the per-job secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret file {} does not exist: mount the job's Kubernetes Secret there, or point the secret file setting at the mounted key ({})", path.display(), crate::settings::mca::SECRET_FILE.how_to_set())]
    Missing { path: PathBuf },
    #[error("cannot read secret file {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("secret file {} is empty: the Secret's key must hold the shared secret (for example 32 random bytes)", path.display())]
    Empty { path: PathBuf },
    #[error("secret file {} holds only {len} bytes; at least {MIN_SECRET_LEN} are required ({MAKE_ONE})", path.display())]
    TooShort { path: PathBuf, len: usize },
    #[error("secret file {} is no secret: it {why}; {MAKE_ONE}", path.display())]
    Degenerate { path: PathBuf, why: String },
    #[error("secret file {} (mode {mode:04o}) can be changed by {who}, who could then impersonate the job's launcher; mount it read-only (a Kubernetes Secret volume, defaultMode 0400 or 0440) or chmod go-w", path.display())]
    Writable {
        path: PathBuf,
        mode: u32,
        who: &'static str,
    },
    #[error("secret file {} belongs to uid {uid}, neither root nor this process's user ({me}), who could change it; use a Secret volume or chown it", path.display())]
    Owner { path: PathBuf, uid: u32, me: u32 },
}

/// The shortest secret accepted (bytes, after trailing line breaks are removed).
pub(crate) const MIN_SECRET_LEN: usize = 32;

/// The least variety a key must show (bits, estimated from its byte frequencies).
const MIN_ESTIMATED_BITS: f64 = 80.0;

/// Reads the per-job secret. For a text key (printable ASCII: hex, base64, a passphrase) trailing
/// line breaks (`\n`, `\r\n`) are not part of the secret, so a key written with `echo` and one
/// written without a newline work the same; a binary key is taken byte for byte, a last byte of
/// `\n` included. A PEM private key (an ssh key, as Kubeflow Trainer's `<trainjob>-mpi-ssh-auth`
/// Secret mounts it) is not the secret itself: the secret is the 32 bytes HKDF-SHA256 derives
/// from it (`ssh_key`). Refuses keys others could replace and degenerate keys; warns (on the
/// log) when others can read it.
pub fn read_secret_file(path: &Path) -> Result<Vec<u8>, SecretError> {
    let mut bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SecretError::Missing {
                path: path.to_owned(),
            })
        }
        Err(source) => {
            return Err(SecretError::Unreadable {
                path: path.to_owned(),
                source,
            })
        }
    };
    check_file(path)?;
    if super::ssh_key::is_private_key(&bytes) {
        return Ok(super::ssh_key::derive(&bytes).to_vec());
    }
    let text_end = bytes
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    if bytes[..text_end].iter().all(|b| (0x20..=0x7e).contains(b)) {
        bytes.truncate(text_end);
    }
    if bytes.is_empty() {
        return Err(SecretError::Empty {
            path: path.to_owned(),
        });
    }
    if bytes.len() < MIN_SECRET_LEN {
        return Err(SecretError::TooShort {
            path: path.to_owned(),
            len: bytes.len(),
        });
    }
    if let Some(why) = degenerate(&bytes) {
        return Err(SecretError::Degenerate {
            path: path.to_owned(),
            why,
        });
    }
    Ok(bytes)
}

/// Refuses a key file others could replace; warns when others can read it.
fn check_file(path: &Path) -> Result<(), SecretError> {
    let meta = std::fs::metadata(path).map_err(|source| SecretError::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    let mode = meta.mode() & 0o7777;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(SecretError::Owner {
            path: path.to_owned(),
            uid: meta.uid(),
            me,
        });
    }
    let writable_by = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (_, true) => Some("every user of the pod"),
        (true, false) => Some("the members of its group"),
        _ => None,
    };
    if let Some(who) = writable_by {
        return Err(SecretError::Writable {
            path: path.to_owned(),
            mode,
            who,
        });
    }
    if let Some(who) = readers(mode, meta.gid()) {
        tracing::warn!(
            secret_file = %path.display(),
            mode = %format!("{mode:04o}"),
            "WARNING: the job's secret can be read by {who}; anyone who reads it can run \
             programs as the job's user in every pod of the job. Mount the Secret with \
             defaultMode 0400 (or 0440 with the pod's fsGroup)"
        );
    }
    Ok(())
}

/// Who besides the owner can read a file of `mode` and group `gid`, if anyone: others, or a
/// group this process is not in.
fn readers(mode: u32, gid: u32) -> Option<&'static str> {
    if mode & 0o004 != 0 {
        return Some("every user of the pod");
    }
    let mine = |g: u32| {
        nix::unistd::getegid().as_raw() == g
            || nix::unistd::getgroups().is_ok_and(|gs| gs.iter().any(|x| x.as_raw() == g))
    };
    (mode & 0o040 != 0 && !mine(gid)).then_some("the members of its group")
}

/// Why `key` is no secret, if it is not: a repeated block, a run of consecutive bytes, or too
/// little variety (an order-0 estimate of its information, which random keys of 32 bytes or
/// more, binary, hex or base64, exceed by far).
pub(crate) fn degenerate(key: &[u8]) -> Option<String> {
    let period = smallest_period(key);
    if period <= key.len() / 2 {
        return Some(format!(
            "repeats a block of {period} byte{}",
            if period == 1 { "" } else { "s" }
        ));
    }
    let step = key[1].wrapping_sub(key[0]);
    if key.windows(2).all(|w| w[1].wrapping_sub(w[0]) == step) {
        return Some("is a run of consecutive bytes".into());
    }
    let mut counts = [0usize; 256];
    for b in key {
        counts[*b as usize] += 1;
    }
    let n = key.len() as f64;
    let per_byte: f64 = counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = *c as f64 / n;
            -p * p.log2()
        })
        .sum();
    let bits = per_byte * n;
    (bits < MIN_ESTIMATED_BITS).then(|| {
        format!(
            "shows too little variety (about {bits:.0} bits, at least {MIN_ESTIMATED_BITS:.0} \
             are required)"
        )
    })
}

/// The smallest `p` such that `key` is a prefix of its first `p` bytes repeated (the key's
/// length if none is shorter); KMP's failure function.
fn smallest_period(key: &[u8]) -> usize {
    let mut fail = vec![0usize; key.len()];
    let mut k = 0;
    for i in 1..key.len() {
        while k > 0 && key[i] != key[k] {
            k = fail[k - 1];
        }
        if key[i] == key[k] {
            k += 1;
        }
        fail[i] = k;
    }
    key.len() - fail.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(p: &Path, bytes: &[u8], mode: u32) {
        std::fs::write(p, bytes).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn secret_file_errors_are_clear() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("key");
        let e = read_secret_file(&p).unwrap_err();
        assert!(matches!(e, SecretError::Missing { .. }));
        assert!(
            e.to_string().contains("mount") && e.to_string().contains("key"),
            "{e}"
        );
        write(&p, b"\n", 0o600);
        assert!(matches!(
            read_secret_file(&p),
            Err(SecretError::Empty { .. })
        ));
        write(&p, b"abc\r\n", 0o600);
        let e = read_secret_file(&p).unwrap_err();
        assert!(matches!(e, SecretError::TooShort { len: 3, .. }), "{e:?}");
        assert!(e.to_string().contains("at least 32"), "{e}");
        let key = hex::encode(rand::random::<[u8; 32]>());
        write(&p, format!("{key}\r\n").as_bytes(), 0o400);
        assert_eq!(read_secret_file(&p).unwrap(), key.as_bytes());
        // A binary key is the file's bytes, whatever its last byte (a random 32-byte key ends in
        // a line break one time in 128).
        for last in [b'\n', b'\r', 0xa5] {
            let mut binary: [u8; 32] = rand::random();
            binary[0] = 0x80;
            binary[31] = last;
            write(&p, &binary, 0o440);
            assert_eq!(read_secret_file(&p).unwrap(), binary);
        }
        let mut crlf = [0u8; 32];
        crlf[..30].copy_from_slice(&rand::random::<[u8; 30]>());
        crlf[0] = 0x80;
        crlf[30..].copy_from_slice(b"\r\n");
        write(&p, &crlf, 0o600);
        assert_eq!(read_secret_file(&p).unwrap(), crlf);
        let e = read_secret_file(d.path()).unwrap_err();
        assert!(matches!(e, SecretError::Unreadable { .. }), "{e:?}");
    }

    #[test]
    fn keys_others_could_replace_are_refused_readable_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("key");
        let key = hex::encode(rand::random::<[u8; 32]>());
        for mode in [0o666, 0o646, 0o620, 0o660] {
            write(&p, key.as_bytes(), mode);
            let e = read_secret_file(&p).unwrap_err();
            assert!(matches!(e, SecretError::Writable { .. }), "{mode:o}: {e:?}");
            assert!(e.to_string().contains("defaultMode"), "{e}");
        }
        // Kubernetes' default mode: readable by everyone, a warning only.
        write(&p, key.as_bytes(), 0o644);
        assert_eq!(read_secret_file(&p).unwrap(), key.as_bytes());
        assert_eq!(readers(0o644, 0), Some("every user of the pod"));
        assert_eq!(readers(0o400, 0), None);
        let own_group = nix::unistd::getegid().as_raw();
        assert_eq!(readers(0o440, own_group), None);
    }

    #[test]
    fn degenerate_keys_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("key");
        for (key, why) in [
            (b"k".repeat(32), "block of 1 byte"),
            (b"ab".repeat(20), "block of 2 bytes"),
            (b"password1234".repeat(3), "block of 12"),
            ((0..64u8).collect::<Vec<_>>(), "consecutive"),
            ((0..=255u8).rev().collect::<Vec<_>>(), "consecutive"),
            ([b"a".repeat(30), b"bcdefg".to_vec()].concat(), "variety"),
            (
                b"0000000000000000000000000000000000000001".to_vec(),
                "variety",
            ),
        ] {
            write(&p, &key, 0o600);
            let e = read_secret_file(&p).unwrap_err();
            assert!(
                matches!(e, SecretError::Degenerate { .. }) && e.to_string().contains(why),
                "{:?}: {e}",
                String::from_utf8_lossy(&key)
            );
            assert!(e.to_string().contains("--from-file"), "{e}");
        }
        // Random keys of the usual forms pass, however short the form allows.
        for _ in 0..200 {
            let raw: [u8; 16] = rand::random();
            assert_eq!(degenerate(hex::encode(raw).as_bytes()), None);
            let raw: [u8; 32] = rand::random();
            assert_eq!(degenerate(&raw), None);
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
            assert_eq!(degenerate(b64.as_bytes()), None);
        }
    }

    /// Trainer's mounted ssh key (mode 0640, as its Secret volume's item mode gives it): the
    /// secret is derived from it, the same for every reader of the same key.
    #[test]
    fn an_ssh_private_key_gives_a_derived_secret() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("id_rsa");
        let pem = b"-----BEGIN EC PRIVATE KEY-----\nMIHcAgEBBEIB\n-----END EC PRIVATE KEY-----\n";
        write(&p, pem, 0o640);
        let got = read_secret_file(&p).unwrap();
        assert_eq!(got, super::super::ssh_key::derive(pem).to_vec());
        assert_eq!(got.len(), 32);
        let q = d.path().join("copy");
        write(&q, pem, 0o400);
        assert_eq!(read_secret_file(&q).unwrap(), got);
        write(&p, pem, 0o660);
        assert!(matches!(
            read_secret_file(&p).unwrap_err(),
            SecretError::Writable { .. }
        ));
    }
}
