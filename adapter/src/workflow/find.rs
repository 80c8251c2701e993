//! Where the job's DVM and PMIx are, found as `prrte-k8s prun` finds them: the DVM's URI in the
//! published file (`--dvm-uri-file`, `$PRRTE_K8S_DVM_URI_FILE`), libpmix in the PRRTE install
//! (`$PRRTE_K8S_PREFIX/lib`, else the directory above `$PRRTE_K8S_PRTED`'s, else wherever the
//! dynamic loader finds `libpmix.so.2`).

use std::path::{Path, PathBuf};

use crate::protocol::{validate_dvm_uri, InvalidDvmUri};
use crate::settings::{agent, tools, Setting};

/// Why the published DVM URI cannot be used; each names the cause and the remedy.
#[derive(Debug, thiserror::Error)]
pub enum DvmUriError {
    #[error(
        "no DVM URI at {}: no DVM is running for this job, or it has not reached this pod. \
         Start one (the pod-0 agent with --dvm-head auto, or `prte --prtemca ras k8s \
         --prtemca plm k8s` in a pod of the job), wait until it is ready, and retry; if the \
         agent publishes elsewhere, pass --{} or set {}",
        file.display(),
        agent::DVM_URI_FILE.flag,
        agent::DVM_URI_FILE.var()
    )]
    Missing { file: PathBuf },
    #[error("cannot read the DVM URI file {}: {source}", file.display())]
    Unreadable {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the DVM URI file {} is empty: the DVM is still starting; retry in a moment",
        file.display()
    )]
    Empty { file: PathBuf },
    #[error("{}: {source}", file.display())]
    Invalid {
        file: PathBuf,
        source: InvalidDvmUri,
    },
}

/// Reads and checks the published DVM URI; the error names the cause and the remedy.
pub fn read_dvm_uri(file: &Path) -> Result<String, DvmUriError> {
    let file_ = || file.to_path_buf();
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(DvmUriError::Missing { file: file_() })
        }
        Err(source) => {
            return Err(DvmUriError::Unreadable {
                file: file_(),
                source,
            })
        }
    };
    let uri = text.lines().next().unwrap_or("").trim().to_owned();
    if uri.is_empty() {
        return Err(DvmUriError::Empty { file: file_() });
    }
    validate_dvm_uri(&uri).map_err(|source| DvmUriError::Invalid {
        file: file_(),
        source,
    })?;
    Ok(uri)
}

/// The value of a path setting's variable, if set and not empty.
fn env_path(s: &Setting) -> Option<PathBuf> {
    std::env::var_os(s.var())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// The published DVM URI file: `$PRRTE_K8S_DVM_URI_FILE`, else its default.
pub fn dvm_uri_file() -> PathBuf {
    env_path(&agent::DVM_URI_FILE).unwrap_or_else(|| PathBuf::from(agent::DVM_URI_FILE.default))
}

/// The PRRTE install prefix if one is configured: `$PRRTE_K8S_PREFIX`, else the directory
/// above the one holding `$PRRTE_K8S_PRTED`.
pub fn configured_prefix() -> Option<PathBuf> {
    if let Some(p) = env_path(&tools::PREFIX) {
        return Some(p);
    }
    let prted = env_path(&agent::PRTED)?;
    Some(prted.parent()?.parent()?.to_path_buf())
}

/// Where libpmix is: the PRRTE install's `lib/libpmix.so.2`, else the bare name (the dynamic
/// loader's search: `LD_LIBRARY_PATH`, the system's directories).
pub fn libpmix() -> PathBuf {
    configured_prefix()
        .map(|p| p.join("lib/libpmix.so.2"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("libpmix.so.2"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_uri_is_checked_and_its_absence_explained() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("dvm.uri");
        let e = read_dvm_uri(&f).unwrap_err();
        assert!(matches!(e, DvmUriError::Missing { .. }), "{e}");
        assert!(e.to_string().contains("--dvm-uri-file"), "{e}");
        std::fs::write(&f, "\n").unwrap();
        assert!(matches!(read_dvm_uri(&f), Err(DvmUriError::Empty { .. })));
        std::fs::write(&f, "not a uri\n").unwrap();
        assert!(matches!(read_dvm_uri(&f), Err(DvmUriError::Invalid { .. })));
        std::fs::write(&f, "prte-job-0@0.0;tcp4://10.0.0.1:7120\nmore\n").unwrap();
        assert_eq!(
            read_dvm_uri(&f).unwrap(),
            "prte-job-0@0.0;tcp4://10.0.0.1:7120"
        );
    }
}
