//! The environment an `exec` request may set: exactly what the ssh-style launchers put in front
//! of their remote command, and no more.
//!
//! PRRTE's ssh launcher sends `PRTE_PREFIX`, `PMIX_PREFIX`, `LD_LIBRARY_PATH` and
//! `DYLD_LIBRARY_PATH`; Open MPI 4.x's rsh launcher `OPAL_PREFIX`, `PATH`, `LD_LIBRARY_PATH`
//! and `DYLD_LIBRARY_PATH`; Hydra (MPICH, Intel MPI) sends none (its proxies get their
//! environment over their own connection). Where programs and libraries come from stays the
//! pod's own setting: the search paths are never taken from the request, and an installation
//! prefix only when it is the program's own installation (as PRRTE's `PRTE_PREFIX` is: prted
//! finds its help files through it). Any other variable is refused with the reason, so nothing
//! a request sets can redirect parameter files, component directories or the loader
//! (`HOME`, `PRTE_SYSCONFDIR`, `PMIX_MCA_mca_base_param_file_path`, `LD_PRELOAD`, ...).

use std::path::Path;

use super::error::ExecError;
use crate::agent::launch_policy::path::{as_passed, canonical};
use crate::protocol::exec::is_var_name;

/// What happens to one variable of an exec request's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EnvUse {
    /// Set for the program, to this value (a prefix in its canonical form).
    Pass(String),
    /// Not set: the pod's own value decides (the reason, for the log).
    Ignore(&'static str),
}

/// Search paths launchers send; the pod's own apply.
const SEARCH_PATHS: &[&str] = &["PATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"];

/// Installation prefixes launchers send; taken only when they are the program's own.
const PREFIXES: &[&str] = &["PRTE_PREFIX", "PMIX_PREFIX", "OPAL_PREFIX"];

/// Checks one `name=value` of an exec request for `program`: passed, ignored (the pod's value
/// stays), or refused with the reason. `value` is the expanded value.
pub(crate) fn check_env(name: &str, value: &str, program: &Path) -> Result<EnvUse, ExecError> {
    if !is_var_name(name) {
        return Err(ExecError::Env {
            name: name.into(),
            why: "it is not a valid environment variable name",
        });
    }
    if SEARCH_PATHS.contains(&name) {
        return Ok(EnvUse::Ignore(
            "where programs and libraries come from is the pod's setting",
        ));
    }
    if PREFIXES.contains(&name) {
        return Ok(match own_prefix(value, program) {
            Some(p) => EnvUse::Pass(p),
            None => EnvUse::Ignore(
                "an installation prefix is taken only when it is the program's own, written as \
                 an absolute path without `.`, `..` or /proc",
            ),
        });
    }
    Err(ExecError::Env {
        name: name.into(),
        why: "ssh-style launchers set only PATH, LD_LIBRARY_PATH, DYLD_LIBRARY_PATH (the pod's \
              own apply) and PRTE_PREFIX, PMIX_PREFIX, OPAL_PREFIX (taken when they are the \
              program's own installation); other settings belong in the pod spec",
    })
}

/// `prefix` as the program gets it, if it is an installation directory that holds `program`
/// (not `/`), written so that the program resolves it as the agent does (see
/// [`crate::agent::launch_policy::path`]).
fn own_prefix(value: &str, program: &Path) -> Option<String> {
    let prefix = canonical(value).ok()?;
    let prog = std::fs::canonicalize(program).ok()?;
    (prefix != Path::new("/") && prog.starts_with(&prefix)).then(|| as_passed(value, &prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_launchers_send_is_admitted() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let prog = bin.join("prted");
        std::fs::write(&prog, "").unwrap();
        let own = d.path().to_str().unwrap();
        let own_canon = std::fs::canonicalize(d.path()).unwrap();
        let canon = own_canon.to_str().unwrap();
        assert_eq!(
            check_env("PRTE_PREFIX", canon, &prog).unwrap(),
            EnvUse::Pass(canon.into())
        );
        assert_eq!(
            check_env("OPAL_PREFIX", &format!("{canon}/"), &prog).unwrap(),
            EnvUse::Pass(format!("{canon}/"))
        );
        // Through a link: passed canonical.
        let link = own_canon.join("link");
        std::os::unix::fs::symlink(&own_canon, &link).unwrap();
        assert_eq!(
            check_env("PMIX_PREFIX", link.to_str().unwrap(), &prog).unwrap(),
            EnvUse::Pass(canon.into())
        );
        let _ = own;
        for (name, value) in [
            ("PATH", "/tmp"),
            ("LD_LIBRARY_PATH", "/tmp"),
            ("DYLD_LIBRARY_PATH", "/tmp"),
            ("PRTE_PREFIX", "/usr"),
            ("PMIX_PREFIX", "/"),
        ] {
            assert!(
                matches!(check_env(name, value, &prog).unwrap(), EnvUse::Ignore(_)),
                "{name}"
            );
        }
        // A prefix is checked where the agent stands but used where the request puts the
        // program: one through /proc/self (the program's working directory), `.` or `..` is
        // not taken.
        let ups = "../".repeat(16);
        for sneaky in [
            format!(
                "/proc/self/cwd/{ups}{}",
                own_canon.display().to_string().trim_start_matches('/')
            ),
            format!("/proc/self/root{}", own_canon.display()),
            format!("{}/bin/..", own_canon.display()),
            format!("{}/.", own_canon.display()),
        ] {
            assert!(
                matches!(
                    check_env("PMIX_PREFIX", &sneaky, &prog).unwrap(),
                    EnvUse::Ignore(_)
                ),
                "{sneaky}"
            );
        }
        for bad in [
            "HOME",
            "PRTE_SYSCONFDIR",
            "PMIX_SYSCONFDIR",
            "PRTE_LIBDIR",
            "PMIX_LIBDIR",
            "HWLOC_PLUGINS_PATH",
            "PMIX_MCA_mca_base_param_file_path",
            "PRTE_MCA_plm_ssh_agent",
            "LD_PRELOAD",
            "BASH_ENV",
            "PRRTE_K8S_SECRET_FILE",
            "FOO",
            "prte_prefix",
            "A-B",
            "1A",
        ] {
            let e = check_env(bad, "/x", &prog).unwrap_err();
            assert!(matches!(e, ExecError::Env { .. }), "{bad}: {e}");
        }
    }
}
