//! Paths a request hands to a program (an installation prefix, the program a daemon starts
//! others with, a daemon's own directory). The agent checks them where it stands, but the
//! program resolves them where the request put it: `/proc/self/cwd/..` is the agent's working
//! directory to the agent and the request's `cwd` to the program, and `/proc/self` (or
//! `/dev/fd`, which leads there) names another process in each. So such a path is taken only
//! when it is absolute, has no `.` or `..` component and does not lead through `/proc`, and the
//! program gets its canonical form: exactly the file the agent checked.

use std::path::{Path, PathBuf};

/// Why a path is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathProblem {
    #[error("it is not an absolute path")]
    Relative,
    #[error("it has a `.` or `..` component")]
    DotComponent,
    #[error("it leads through /proc, which names another process in the program")]
    Proc,
    #[error("it does not exist in this pod ({0})")]
    Missing(String),
}

/// The canonical form of `value`, or why it is refused (see the module docs).
pub(crate) fn canonical(value: &str) -> Result<PathBuf, PathProblem> {
    if !value.starts_with('/') {
        return Err(PathProblem::Relative);
    }
    if value.split('/').any(|c| c == "." || c == "..") {
        return Err(PathProblem::DotComponent);
    }
    // Every leading part, resolved, stays out of /proc (`/dev/fd` leads there).
    let mut prefix = PathBuf::from("/");
    for c in Path::new(value).components().skip(1) {
        prefix.push(c);
        let resolved = std::fs::canonicalize(&prefix)
            .map_err(|e| PathProblem::Missing(format!("{}: {e}", prefix.display())))?;
        if resolved.starts_with("/proc") {
            return Err(PathProblem::Proc);
        }
    }
    std::fs::canonicalize(value).map_err(|e| PathProblem::Missing(e.to_string()))
}

/// `value` as the program gets it: as written when that is already its canonical form (up to
/// repeated or trailing slashes), else the canonical form.
pub(crate) fn as_passed(value: &str, canonical: &Path) -> String {
    if Path::new(value).components().eq(canonical.components()) {
        value.to_owned()
    } else {
        canonical.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_absolute_paths_outside_proc_pass() {
        let d = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(real.join("bin")).unwrap();
        let link = real.join("link");
        std::os::unix::fs::symlink(real.join("bin"), &link).unwrap();
        let r = real.display();
        assert_eq!(canonical(&format!("{r}/bin")), Ok(real.join("bin")));
        assert_eq!(canonical(&format!("{r}//bin/")), Ok(real.join("bin")));
        assert_eq!(canonical(&format!("{r}/link")), Ok(real.join("bin")));
        assert_eq!(
            as_passed(&format!("{r}//bin/"), &real.join("bin")),
            format!("{r}//bin/")
        );
        assert_eq!(
            as_passed(&format!("{r}/link"), &real.join("bin")),
            format!("{r}/bin")
        );
        let proc_link = real.join("fd");
        std::os::unix::fs::symlink("/dev/fd", &proc_link).unwrap();
        for (bad, why) in [
            ("bin".to_string(), PathProblem::Relative),
            (format!("{r}/bin/.."), PathProblem::DotComponent),
            (format!("{r}/./bin"), PathProblem::DotComponent),
            (format!("/proc/self/cwd{r}"), PathProblem::Proc),
            (format!("/proc/self/root{r}"), PathProblem::Proc),
            ("/dev/fd/0".to_string(), PathProblem::Proc),
            (format!("{r}/fd/0"), PathProblem::Proc),
        ] {
            assert_eq!(canonical(&bad), Err(why), "{bad}");
        }
        assert!(matches!(
            canonical(&format!("{r}/nothing")),
            Err(PathProblem::Missing(_))
        ));
    }
}
