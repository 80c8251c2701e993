//! `prrte-k8s install-runtime --to DIR`: copies the injected runtime (the bundle the static
//! `prrte-k8s` lives in: `bin/`, `lib/prte/`, `etc/`, `VERSION`) into `DIR`, the emptyDir the
//! application container mounts at `/opt/prrte-k8s`. It runs as the pod's user in the init
//! container of an image that has nothing else (no shell, no libc).
//!
//! Every file is written under a temporary name next to its place and renamed into it, so a
//! reader never sees half a file; modes are kept (without set-id bits); a symlink inside the
//! bundle (the two component names of one library) stays a symlink. Anything else (a symlink
//! leading out of the bundle, a device, a copy into the bundle itself) is refused naming the
//! file.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// What was installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The bundle's `VERSION` line, if it has one.
    pub version: Option<String>,
    pub files: usize,
    pub links: usize,
    pub bytes: u64,
}

/// Why the copy failed: the file and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct InstallError {
    pub path: PathBuf,
    pub why: String,
}

fn err(path: &Path, why: impl std::fmt::Display) -> InstallError {
    InstallError {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

/// The bundle a program at `exe` (`<bundle>/bin/prrte-k8s`) belongs to.
pub fn bundle_of(exe: &Path) -> Option<PathBuf> {
    Some(exe.parent()?.parent()?.to_owned())
}

/// Whether the relative `target` of a link at `rel` (relative to the bundle) stays inside it.
fn stays_inside(rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: i64 = rel
        .parent()
        .map(|p| p.components().count() as i64)
        .unwrap_or(0);
    for c in target.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            _ => return false,
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

/// A temporary name next to `dst`.
fn temp_name(dst: &Path) -> PathBuf {
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dst.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Copies the bundle `from` into `to` (see the module docs).
pub fn install(from: &Path, to: &Path) -> Result<Installed, InstallError> {
    let src = std::fs::canonicalize(from).map_err(|e| err(from, e))?;
    std::fs::create_dir_all(to).map_err(|e| err(to, format!("cannot create it: {e}")))?;
    let dst = std::fs::canonicalize(to).map_err(|e| err(to, e))?;
    if dst.starts_with(&src) || src.starts_with(&dst) {
        return Err(err(
            to,
            format!(
                "is {} the bundle {}; give an empty directory elsewhere (the pod's emptyDir)",
                if dst == src { "" } else { "inside or around" },
                src.display()
            ),
        ));
    }
    let mut done = Installed {
        version: std::fs::read_to_string(src.join("VERSION"))
            .ok()
            .and_then(|v| v.lines().next().map(|l| l.trim().to_owned()))
            .filter(|v| !v.is_empty()),
        files: 0,
        links: 0,
        bytes: 0,
    };
    copy_dir(&src, &dst, Path::new(""), &mut done)?;
    Ok(done)
}

fn copy_dir(src: &Path, dst: &Path, rel: &Path, done: &mut Installed) -> Result<(), InstallError> {
    let from = src.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&from)
        .map_err(|e| err(&from, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(&from, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let rel = rel.join(entry.file_name());
        let (s, d) = (src.join(&rel), dst.join(&rel));
        let meta = std::fs::symlink_metadata(&s).map_err(|e| err(&s, e))?;
        let mode = meta.mode() & 0o777;
        let ft = meta.file_type();
        if ft.is_dir() {
            std::fs::create_dir_all(&d).map_err(|e| err(&d, format!("cannot create it: {e}")))?;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode | 0o700))
                .map_err(|e| err(&d, e))?;
            copy_dir(src, dst, &rel, done)?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&s).map_err(|e| err(&s, e))?;
            if !stays_inside(&rel, &target) {
                return Err(err(
                    &s,
                    format!(
                        "a symlink to {} leads out of the bundle; only relative links inside it are copied",
                        target.display()
                    ),
                ));
            }
            let tmp = temp_name(&d);
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp).map_err(|e| err(&d, e))?;
            std::fs::rename(&tmp, &d).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                err(&d, e)
            })?;
            done.links += 1;
        } else if ft.is_file() {
            let tmp = temp_name(&d);
            let r = std::fs::copy(&s, &tmp)
                .and_then(|n| {
                    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
                    std::fs::rename(&tmp, &d)?;
                    Ok(n)
                })
                .map_err(|e| {
                    let _ = std::fs::remove_file(&tmp);
                    err(&d, e)
                })?;
            done.files += 1;
            done.bytes += r;
        } else {
            return Err(err(&s, "neither a file, a directory nor a symlink"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(root: &Path) {
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("lib/prte")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("bin/prrte-k8s-agent"), "agent").unwrap();
        std::fs::set_permissions(
            root.join("bin/prrte-k8s-agent"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        std::fs::write(root.join("lib/prte/prte_mca_ras_k8s.so"), "so").unwrap();
        std::os::unix::fs::symlink(
            "prte_mca_ras_k8s.so",
            root.join("lib/prte/prte_mca_plm_k8s.so"),
        )
        .unwrap();
        std::fs::write(root.join("etc/prte-mca-params.conf"), "ras = k8s\n").unwrap();
        std::fs::write(root.join("VERSION"), "prrte-k8s 0.1.0 abc\n").unwrap();
    }

    #[test]
    fn copies_files_links_and_modes() {
        let d = tempfile::tempdir().unwrap();
        let (src, dst) = (d.path().join("bundle"), d.path().join("rt"));
        bundle(&src);
        let done = install(&src, &dst).unwrap();
        assert_eq!(done.version.as_deref(), Some("prrte-k8s 0.1.0 abc"));
        assert_eq!((done.files, done.links), (4, 1));
        let m = std::fs::metadata(dst.join("bin/prrte-k8s-agent")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755, "modes kept, set-id bits not");
        assert_eq!(
            std::fs::read_link(dst.join("lib/prte/prte_mca_plm_k8s.so")).unwrap(),
            Path::new("prte_mca_ras_k8s.so")
        );
        assert_eq!(
            std::fs::read_to_string(dst.join("lib/prte/prte_mca_plm_k8s.so")).unwrap(),
            "so"
        );
        // Again over the first copy: the same result, no temporary files left.
        install(&src, &dst).unwrap();
        let leftovers: Vec<_> = walk(&dst)
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    fn walk(p: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(p).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                out.extend(walk(&path));
            }
            out.push(path);
        }
        out
    }

    #[test]
    fn refuses_links_out_and_copies_into_itself() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("bundle");
        bundle(&src);
        let e = install(&src, &src.join("sub")).unwrap_err().to_string();
        assert!(e.contains("the bundle"), "{e}");
        std::os::unix::fs::symlink("../../../etc/passwd", src.join("lib/prte/evil")).unwrap();
        let e = install(&src, &d.path().join("rt")).unwrap_err().to_string();
        assert!(
            e.contains("evil") && e.contains("leads out of the bundle"),
            "{e}"
        );
        assert!(stays_inside(
            Path::new("lib/prte/x"),
            Path::new("../../bin/a")
        ));
        assert!(!stays_inside(Path::new("lib/x"), Path::new("../../a")));
        assert!(!stays_inside(Path::new("x"), Path::new("/etc/passwd")));
    }

    #[test]
    fn a_destination_that_cannot_be_written_names_the_file() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("bundle");
        bundle(&src);
        let file = d.path().join("plainfile");
        std::fs::write(&file, "x").unwrap();
        let e = install(&src, &file.join("rt")).unwrap_err().to_string();
        assert!(
            e.contains("plainfile") && e.contains("cannot create"),
            "{e}"
        );
    }
}
