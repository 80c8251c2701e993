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

fn sha256_of(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|b| hex::encode(Sha256::digest(&b)))
}

/// The verified CRD files of [`TRAINER_VERSION`], in [`TRAINER_CRDS`]' order: from the
/// cache, else downloaded (with `curl`), checked and cached.
pub fn trainer_crds() -> Result<Vec<PathBuf>> {
    let base = format!(
        "https://raw.githubusercontent.com/kubeflow/trainer/{TRAINER_VERSION}/manifests/base/crds"
    );
    verified(&cache_dir(), &base, TRAINER_CRDS)
}

/// `files` (name, sha256) kept verified in `dir`: each taken from there if its checksum
/// matches, else fetched from `base/name` and kept only if it matches.
fn verified(dir: &Path, base: &str, files: &[(&str, &str)]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (file, sha) in files {
        let cached = dir.join(file);
        if sha256_of(&cached).as_deref() != Some(*sha) {
            download(&format!("{base}/{file}"), &cached, sha)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file is fetched and kept when its checksum matches, read from the cache after that,
    /// and refused (nothing kept) when it does not.
    #[test]
    fn only_verified_files_are_kept() {
        let src = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.yaml"), "kind: A\n").unwrap();
        let sha = hex::encode(Sha256::digest(b"kind: A\n"));
        let base = format!("file://{}", src.path().display());
        let files = [("a.yaml", sha.as_str())];
        let got = verified(cache.path(), &base, &files).unwrap();
        assert_eq!(std::fs::read_to_string(&got[0]).unwrap(), "kind: A\n");
        std::fs::remove_file(src.path().join("a.yaml")).unwrap();
        verified(cache.path(), &base, &files).expect("read from the cache");
        std::fs::write(src.path().join("b.yaml"), "kind: B\n").unwrap();
        let e = verified(cache.path(), &base, &[("b.yaml", sha.as_str())]).unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        assert!(!cache.path().join("b.yaml").exists());
        assert!(!cache.path().join("b.part").exists());
    }
}
