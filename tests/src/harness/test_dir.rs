//! A private directory (and TMPDIR) per test, names no other test uses, files awaited.

use super::install::target_dir;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A private directory for one test (removed on drop) with its own TMPDIR for PRRTE/PMIx.
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new(test: &str) -> Result<TestDir> {
        let base = target_dir().join("test-dirs");
        std::fs::create_dir_all(&base)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{test}-"))
            .tempdir_in(&base)?;
        std::fs::create_dir_all(dir.path().join("tmp"))?;
        Ok(TestDir { dir })
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// The TMPDIR to give PRRTE/PMIx processes of this test.
    pub fn tmpdir(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }
    /// A fresh sub-directory (e.g. one TMPDIR per pod).
    pub fn sub(&self, name: &str) -> Result<PathBuf> {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }
    /// Write a random per-job secret (mode 0400) and return its path.
    pub fn secret(&self, name: &str) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let p = self.dir.path().join(name);
        let bytes: [u8; 32] = rand::random();
        std::fs::write(&p, hex::encode(bytes))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400))?;
        Ok(p)
    }
}

/// Waits until `path` exists (another process, e.g. a container, wrote it); panics after
/// `limit`.
pub fn wait_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `prefix` with a random suffix: a name no other test (or concurrent run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}
