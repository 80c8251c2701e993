//! The DVM URI file the agent publishes in its pod while a prted of the DVM runs (and the head's
//! prte writes in pod 0), read by `prrte-k8s dvm-uri|prun|pterm`.

use std::io;
use std::path::Path;

use tracing::{info, warn};

/// Writes `uri` (plus a newline) to `path` atomically: a temporary file in the same directory,
/// mode 0644, renamed over `path`, so readers see either the old or the new content in full.
pub fn write_dvm_uri_file(path: &Path, uri: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the DVM URI path names no file",
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        // The umask may have cleared bits of the mode given to open.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(uri.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Identity of a file the agent wrote (device and inode), so that it removes only that file and
/// never one somebody else put at the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of the file at `path` itself (a symbolic link is not followed).
    pub fn of(path: &Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// Writes the DVM URI file (creating its directory) and returns its identity; failures are
/// logged, not fatal: the job runs either way, only `prrte-k8s prun` in this pod needs the file.
pub(crate) fn publish_dvm_uri(path: &Path, uri: &str) -> Option<FileId> {
    if !publish_dvm_uri_dir(path) {
        return None;
    }
    match write_dvm_uri_file(path, uri) {
        Ok(()) => {
            info!(file = %path.display(), uri, "published the DVM URI");
            FileId::of(path)
        }
        Err(e) => {
            warn!(file = %path.display(), error = %e, "cannot write the DVM URI file; `prrte-k8s prun` will not find the DVM in this pod (set --dvm-uri-file to a writable place)");
            None
        }
    }
}

/// Creates the directory of the DVM URI file; logs and returns false if it cannot.
pub(crate) fn publish_dvm_uri_dir(path: &std::path::Path) -> bool {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = std::fs::create_dir_all(dir) {
            warn!(dir = %dir.display(), error = %e, "cannot create the DVM URI directory; `prrte-k8s prun` will not find the DVM in this pod (set --dvm-uri-file to a writable place)");
            return false;
        }
    }
    true
}

/// Removes the DVM URI file if it is still the file `written` (the one the agent wrote); with
/// `None`, whatever is there (only for a file the agent's own child wrote).
pub(crate) fn unpublish_dvm_uri(path: &Path, written: Option<FileId>) {
    if let Some(id) = written {
        match FileId::of(path) {
            Some(now) if now == id => {}
            Some(_) => {
                warn!(file = %path.display(), "the DVM URI file was replaced by someone else; leaving it");
                return;
            }
            None => return,
        }
    }
    match std::fs::remove_file(path) {
        Ok(()) => info!(file = %path.display(), "removed the DVM URI file"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(file = %path.display(), error = %e, "cannot remove the DVM URI file"),
    }
}
