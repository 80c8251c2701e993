//! `prrte-k8s install-runtime --to DIR`: copies the injected runtime (the bundle the static
//! `prrte-k8s` lives in: `bin/`, `lib/prte/`, `etc/`, `VERSION`) into `DIR`, the emptyDir the
//! application container mounts at `/opt/prrte-k8s`. It runs as the pod's user in the init
//! container of an image that has nothing else (no shell, no libc).
//!
//! The target must be missing (it is made, its parent must exist), or an empty directory owned
//! by this user or by root (the kubelet makes an emptyDir root's, mode 0777), or one this
//! command installed into before (it holds [`MARKER`], written first: an init container run
//! again after a crash or a pod sandbox's restart finds its own files). A symlink as the
//! target, another user's directory, or anything else in it is refused. Inside it nothing is
//! reached through a path: every directory is opened from its parent's descriptor without
//! following a symlink (a link planted where a directory goes is refused), and every file is
//! written under a new temporary name next to its place (created exclusively, so never
//! through a link) and renamed into it, so a reader never sees half a file; modes are kept
//! (without set-id bits); a symlink inside the bundle (the two component names of one library)
//! stays a symlink. Anything else in the bundle (a symlink leading out of it, a device, a copy
//! into the bundle itself) is refused naming the file.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

/// The file that marks a directory this command installed into (written before anything
/// else).
pub const MARKER: &str = ".prrte-k8s-runtime";
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

/// A temporary name next to `name` (in the same directory).
fn temp_name(name: &std::ffi::OsStr) -> PathBuf {
    PathBuf::from(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ))
}

/// Opens the directory `name` of `at` without following a symlink (`shown` names it in
/// errors) and checks that it is owned by this user (or, for the target itself, by root).
fn open_dir(
    at: impl AsFd,
    name: &Path,
    shown: &Path,
    root_ok: bool,
) -> Result<OwnedFd, InstallError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(at, name, flags, Mode::empty()).map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => err(
            shown,
            "is a symlink or not a directory; give a directory itself (the pod's emptyDir)",
        ),
        e => err(shown, std::io::Error::from(e)),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| err(shown, std::io::Error::from(e)))?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me && !(root_ok && st.st_uid == 0) {
        return Err(err(
            shown,
            format!(
                "is owned by uid {}, not by this user (uid {me}){}; give a directory of your own \
                 (the pod's emptyDir)",
                st.st_uid,
                if root_ok { " nor root" } else { "" }
            ),
        ));
    }
    Ok(fd)
}

/// Makes the directory `name` in `at` (an existing one is taken if [`open_dir`] takes it).
fn make_dir(at: impl AsFd, name: &Path, shown: &Path, mode: u32) -> Result<(), InstallError> {
    match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(err(
            shown,
            format!("cannot create it: {}", std::io::Error::from(e)),
        )),
    }
}

/// Opens the target `to` (made if missing) and checks it may be installed into.
fn open_target(to: &Path) -> Result<OwnedFd, InstallError> {
    // Without a trailing `/`, which would make the kernel follow a symlink as the last part.
    let path: PathBuf = to.components().collect();
    make_dir(CWD, &path, to, 0o755)?;
    let fd = open_dir(CWD, &path, to, true)?;
    let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| err(to, std::io::Error::from(e)))?;
    let mut names = Vec::new();
    for entry in dir {
        let entry = entry.map_err(|e| err(to, std::io::Error::from(e)))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    let ours = names.iter().any(|n| n == MARKER)
        && rustix::fs::statat(&fd, MARKER, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_file());
    if !names.is_empty() && !ours {
        names.sort();
        names.truncate(3);
        return Err(err(
            to,
            format!(
                "is not empty (it holds {}); give an empty directory (the pod's emptyDir)",
                names.join(", ")
            ),
        ));
    }
    Ok(fd)
}

/// Writes `name` in `dir` with `mode`: under a new temporary name, created exclusively (never
/// through a symlink), then renamed into place. Returns the bytes written.
fn write_file(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    shown: &Path,
    mode: u32,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<u64>,
) -> Result<u64, InstallError> {
    let tmp = temp_name(name);
    // A leftover of an earlier run (or a link planted there) goes; unlinking never follows.
    let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, &tmp, flags, Mode::from_raw_mode(0o600))
        .map_err(|e| err(shown, std::io::Error::from(e)))?;
    let mut file = std::fs::File::from(fd);
    let done = fill(&mut file)
        .and_then(|n| {
            file.flush()?;
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
            rustix::fs::renameat(dir, &tmp, dir, name)?;
            Ok(n)
        })
        .map_err(|e| {
            let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
            err(shown, e)
        })?;
    Ok(done)
}

/// Copies the bundle `from` into `to` (see the module docs).
pub fn install(from: &Path, to: &Path) -> Result<Installed, InstallError> {
    let src = std::fs::canonicalize(from).map_err(|e| err(from, e))?;
    let target = open_target(to)?;
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
    write_file(&target, MARKER.as_ref(), &to.join(MARKER), 0o644, |f| {
        f.write_all(b"installed by prrte-k8s install-runtime\n")
            .map(|()| 0)
    })?;
    copy_dir(&src, &target, to, Path::new(""), &mut done)?;
    Ok(done)
}

/// Copies the bundle's directory `rel` (below `src`) into the open directory `dir` (`to/rel`).
fn copy_dir(
    src: &Path,
    dir: &OwnedFd,
    to: &Path,
    rel: &Path,
    done: &mut Installed,
) -> Result<(), InstallError> {
    let from = src.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&from)
        .map_err(|e| err(&from, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(&from, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let rel = rel.join(&name);
        let (s, d) = (src.join(&rel), to.join(&rel));
        let meta = std::fs::symlink_metadata(&s).map_err(|e| err(&s, e))?;
        let mode = meta.mode() & 0o777;
        let ft = meta.file_type();
        if ft.is_dir() {
            make_dir(dir, name.as_ref(), &d, 0o700)?;
            let sub = open_dir(dir, name.as_ref(), &d, false)?;
            rustix::fs::fchmod(&sub, Mode::from_raw_mode(mode | 0o700))
                .map_err(|e| err(&d, std::io::Error::from(e)))?;
            copy_dir(src, &sub, to, &rel, done)?;
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
            let tmp = temp_name(&name);
            let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
            rustix::fs::symlinkat(&target, dir, &tmp)
                .and_then(|()| rustix::fs::renameat(dir, &tmp, dir, &name))
                .map_err(|e| {
                    let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
                    err(&d, std::io::Error::from(e))
                })?;
            done.links += 1;
        } else if ft.is_file() {
            let mut input = std::fs::File::open(&s).map_err(|e| err(&s, e))?;
            done.bytes += write_file(dir, &name, &d, mode, |out| std::io::copy(&mut input, out))?;
            done.files += 1;
        } else {
            return Err(err(&s, "neither a file, a directory nor a symlink"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

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

    /// The target itself: a symlink (even written with a trailing `/`), a directory holding
    /// something else, or another user's directory is refused, and nothing is written there
    /// (the copy followed the link, filled the directory, and took anyone's directory).
    #[test]
    fn the_target_must_be_an_empty_directory_of_this_user() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("bundle");
        bundle(&src);
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = d.path().join("link");
        symlink(&elsewhere, &link).unwrap();
        for to in [link.clone(), PathBuf::from(format!("{}/", link.display()))] {
            let e = install(&src, &to).unwrap_err().to_string();
            assert!(e.contains("link") && e.contains("is a symlink"), "{e}");
        }
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        let full = d.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("app.conf"), "x").unwrap();
        let e = install(&src, &full).unwrap_err().to_string();
        assert!(e.contains("not empty") && e.contains("app.conf"), "{e}");
        assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
        // Made if missing (its parent must exist).
        install(&src, &d.path().join("new")).unwrap();
        let e = install(&src, &d.path().join("no/such"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot create it"), "{e}");
        if nix::unistd::geteuid().is_root() {
            let theirs = d.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), None).unwrap();
            let e = install(&src, &theirs).unwrap_err().to_string();
            assert!(e.contains("owned by uid 4242"), "{e}");
            assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
        }
    }

    /// Links planted in a directory installed into before (an init container run again) are
    /// never followed: one where a directory goes is refused (the copy went through it into
    /// another directory, changing its mode), one at a file's temporary name or at its place
    /// is replaced, the file it pointed at untouched.
    #[test]
    fn links_planted_in_the_target_are_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("bundle");
        bundle(&src);
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let victim_mode = std::fs::metadata(&victim).unwrap().mode();
        let rt = d.path().join("rt");
        install(&src, &rt).unwrap();
        std::fs::remove_dir_all(rt.join("bin")).unwrap();
        symlink(&elsewhere, rt.join("bin")).unwrap();
        let e = install(&src, &rt).unwrap_err().to_string();
        assert!(e.contains("bin") && e.contains("is a symlink"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        let m = std::fs::metadata(&elsewhere).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        std::fs::remove_file(rt.join("bin")).unwrap();
        let tmp = format!(".VERSION.tmp-{}", std::process::id());
        symlink(&victim, rt.join(tmp)).unwrap();
        std::fs::remove_file(rt.join("etc/prte-mca-params.conf")).unwrap();
        symlink(&victim, rt.join("etc/prte-mca-params.conf")).unwrap();
        install(&src, &rt).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::metadata(&victim).unwrap().mode(), victim_mode);
        for f in ["VERSION", "etc/prte-mca-params.conf"] {
            let m = std::fs::symlink_metadata(rt.join(f)).unwrap();
            assert!(m.file_type().is_file(), "{f}");
        }
        assert_eq!(
            std::fs::read_to_string(rt.join("VERSION")).unwrap(),
            "prrte-k8s 0.1.0 abc\n"
        );
    }
}
