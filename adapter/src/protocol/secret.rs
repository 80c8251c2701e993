//! The per-job secret both sides of the protocol hold: where it is mounted by default and how
//! it is read (the agent at startup, the launcher before it connects, `prrte-k8s doctor`).

use std::io;
use std::path::{Path, PathBuf};

/// Default location of the mounted per-job Secret (the agent's `--secret-file`, the PLM's
/// `plm_k8s_secret_file`: [`crate::settings::mca::SECRET_FILE`]).
pub const DEFAULT_SECRET_FILE: &str = crate::settings::mca::SECRET_FILE.default;

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
    #[error("secret file {} holds only {len} bytes; at least {MIN_SECRET_LEN} are required (create it with e.g. `head -c 32 /dev/urandom | base64`)", path.display())]
    TooShort { path: PathBuf, len: usize },
}

/// The shortest secret accepted (bytes, after trailing line breaks are removed).
pub(crate) const MIN_SECRET_LEN: usize = 32;

/// Reads the per-job secret. Trailing line breaks (`\n`, `\r\n`) are not part of the secret, so a
/// key written with `echo` and one created from a literal work the same.
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
    while matches!(bytes.last(), Some(b'\n' | b'\r')) {
        bytes.pop();
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
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::fs::write(&p, "\n").unwrap();
        assert!(matches!(
            read_secret_file(&p),
            Err(SecretError::Empty { .. })
        ));
        std::fs::write(&p, "abc\r\n").unwrap();
        let e = read_secret_file(&p).unwrap_err();
        assert!(matches!(e, SecretError::TooShort { len: 3, .. }), "{e:?}");
        assert!(e.to_string().contains("at least 32"), "{e}");
        let long = "k".repeat(MIN_SECRET_LEN);
        std::fs::write(&p, format!("{long}\r\n")).unwrap();
        assert_eq!(read_secret_file(&p).unwrap(), long.as_bytes());
        let binary: Vec<u8> = (0..=255u8).collect();
        std::fs::write(&p, &binary).unwrap();
        assert_eq!(read_secret_file(&p).unwrap(), binary);
        let e = read_secret_file(d.path()).unwrap_err();
        assert!(matches!(e, SecretError::Unreadable { .. }), "{e:?}");
    }
}
