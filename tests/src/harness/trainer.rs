//! Kubeflow Trainer's CustomResourceDefinitions as it publishes them (`manifests/base/crds` at
//! a release tag), for installing in a sandbox: downloaded from GitHub by their pinned URL,
//! checked against their sha256 and kept in a cache outside the source tree, keyed by version
//! (`/var/cache/prrte-k8s/sources/trainer-v2.3.0/`, or under `$PRRTE_K8S_CACHE`), so the
//! second run reads them from there. A file whose checksum does not match is never used.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The Trainer release the CRDs come from.
pub const TRAINER_VERSION: &str = "v2.3.0";

/// The CRDs of [`TRAINER_VERSION`]: file name (under `manifests/base/crds/`) and sha256.
pub const TRAINER_CRDS: &[(&str, &str)] = &[
    (
        "trainer.kubeflow.org_trainjobs.yaml",
        "a742cafc5b5582640c7e0b7467c024fc237256fbca5ba0a9f0531dfb66d64416",
    ),
    (
        "trainer.kubeflow.org_trainingruntimes.yaml",
        "69b8dbdf60a18e28cddcc2b8dfc4ce72a943e14b531b9389d593118faee4919f",
    ),
    (
        "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        "ec84dc3388fcdbe8c61d3c247a773d14458dd9438e995bea8e50d2a18080eef9",
    ),
];

/// Where the verified files are kept.
pub fn cache_dir() -> PathBuf {
    let root = std::env::var_os("PRRTE_K8S_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/prrte-k8s"));
    root.join("sources")
        .join(format!("trainer-{TRAINER_VERSION}"))
}

/// The URL a CRD file of [`TRAINER_VERSION`] is downloaded from.
pub fn url(file: &str) -> String {
    format!("https://raw.githubusercontent.com/kubeflow/trainer/{TRAINER_VERSION}/manifests/base/crds/{file}")
}

fn sha256_of(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|b| hex::encode(Sha256::digest(&b)))
}

/// The verified CRD files of [`TRAINER_VERSION`], in [`TRAINER_CRDS`]' order: from the
/// cache, else downloaded (with `curl`), checked and cached.
pub fn trainer_crds() -> Result<Vec<PathBuf>> {
    let dir = cache_dir();
    let mut out = Vec::new();
    for (file, sha) in TRAINER_CRDS {
        let cached = dir.join(file);
        if sha256_of(&cached).as_deref() != Some(*sha) {
            download(&url(file), &cached, sha)?;
        }
        out.push(cached);
    }
    Ok(out)
}

fn download(url: &str, dest: &Path, sha: &str) -> Result<()> {
    let dir = dest.parent().context("a cache file has a directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let part = dest.with_extension("part");
    let mut curl = Command::new("curl");
    curl.args(["-fsSL", "--retry", "3", "-o"])
        .arg(&part)
        .arg(url);
    let got = super::run_with_timeout(curl, Duration::from_secs(120))
        .with_context(|| format!("running curl for {url}"))?;
    if !got.status.success() {
        let _ = std::fs::remove_file(&part);
        bail!(
            "downloading {url} failed ({}): {}; put the file, sha256 {sha}, at {}",
            got.status,
            String::from_utf8_lossy(&got.stderr).trim(),
            dest.display()
        );
    }
    let actual = sha256_of(&part).unwrap_or_default();
    if actual != sha {
        let _ = std::fs::remove_file(&part);
        bail!("checksum mismatch for {url}: got {actual}, expected {sha}");
    }
    std::fs::rename(&part, dest).with_context(|| format!("keeping {}", dest.display()))
}
