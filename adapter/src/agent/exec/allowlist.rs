//! What an `exec` request may run: the allowlist of programs, and the `prrte-k8s-rsh`
//! installed with this agent (the only program a daemon started this way may start others
//! with).

use std::path::{Path, PathBuf};

use crate::agent::config::ExecArgs;

use super::error::{ExecConfigError, ExecError};
use crate::agent::launch_policy::path::{canonical, PathProblem};
use crate::profile::{self, Profile};
use crate::settings::agent;

/// Default of `--max-exec`.
pub(crate) const DEFAULT_MAX_EXEC: usize = agent::MAX_EXEC.default_u64() as usize;

/// The file name of the ssh-compatible client daemons start other daemons with.
pub(crate) const RSH_NAME: &str = "prrte-k8s-rsh";

/// Programs that would run any other program.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "busybox", "env",
];

/// One allowed program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// Its absolute path as configured.
    pub path: PathBuf,
    /// Its file name (what a request may name it by).
    pub name: String,
}

/// The checked exec settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPolicy {
    pub allowed: Vec<Allowed>,
    pub max: usize,
    /// The `prrte-k8s-rsh` of this agent's installation (next to its executable), if any.
    pub rsh: Option<PathBuf>,
    /// The profile of the image's PRRTE, whose prted grammar an exec'd prted is checked
    /// against: as the agent's detection found it, else the components' PRRTE's.
    pub prrte: &'static Profile,
}

/// The `prrte-k8s-rsh` next to the running executable, if there is one.
pub(crate) fn installed_rsh() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let rsh = exe.parent()?.join(RSH_NAME);
    rsh.is_file().then_some(rsh)
}

impl ExecPolicy {
    /// Only `prted` (the agent's default).
    pub fn only(prted: &Path) -> ExecPolicy {
        ExecPolicy {
            allowed: vec![allowed(prted.to_owned())],
            max: DEFAULT_MAX_EXEC,
            rsh: installed_rsh(),
            prrte: profile::COMPONENTS,
        }
    }

    /// From the agent's arguments; `prted` (the agent's `--prted`) is always allowed.
    pub fn from_args(args: &ExecArgs, prted: &Path) -> Result<ExecPolicy, ExecConfigError> {
        let mut policy = ExecPolicy::only(prted);
        policy.max = args.max.max(1);
        let dir = match &args.dir {
            Some(d) if !d.is_absolute() => {
                return Err(ExecConfigError::RelativeDir(d.display().to_string()))
            }
            Some(d) => d.clone(),
            None => prted.parent().map(Path::to_owned).unwrap_or_default(),
        };
        let entries = args
            .allow
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty());
        for entry in entries {
            let path = if entry.starts_with('/') {
                PathBuf::from(entry)
            } else if entry.contains('/') {
                return Err(ExecConfigError::RelativeEntry {
                    entry: entry.into(),
                    dir: dir.display().to_string(),
                });
            } else {
                dir.join(entry)
            };
            if SHELLS.contains(&file_name(&path).as_str()) {
                return Err(ExecConfigError::Shell(entry.into()));
            }
            if !policy.allowed.iter().any(|a| a.path == path) {
                policy.allowed.push(allowed(path));
            }
        }
        Ok(policy)
    }

    /// The allowed paths, for messages.
    pub fn describe(&self) -> String {
        self.allowed
            .iter()
            .map(|a| a.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The program to run for a request's `argv[0]`, or why not.
    pub fn resolve(&self, argv0: &str) -> Result<PathBuf, ExecError> {
        let refuse = |why| {
            Err(ExecError::NotAllowed {
                program: argv0.into(),
                why,
                allowed: self.describe(),
            })
        };
        if argv0.is_empty() {
            return Err(ExecError::NoProgram);
        }
        if !argv0.contains('/') {
            return match self.allowed.iter().find(|a| a.name == argv0) {
                Some(a) => Ok(a.path.clone()),
                None => refuse("is not on the allowlist"),
            };
        }
        if !argv0.starts_with('/') {
            return refuse("is a relative path");
        }
        let wanted = Path::new(argv0);
        if let Some(a) = self.allowed.iter().find(|a| a.path == wanted) {
            return Ok(a.path.clone());
        }
        // The same file under another name (a symlinked prefix such as a venv link), written
        // so that it names the same file for the program as for the agent.
        let canon = match canonical(argv0) {
            Ok(c) => c,
            Err(PathProblem::Missing(_)) => {
                return refuse("does not exist in this pod and is not on the allowlist")
            }
            Err(_) => return refuse("has a `.` or `..` component or leads through /proc"),
        };
        match self
            .allowed
            .iter()
            .find(|a| std::fs::canonicalize(&a.path).is_ok_and(|c| c == canon))
        {
            Some(a) => Ok(a.path.clone()),
            None => refuse("is not on the allowlist"),
        }
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn allowed(path: PathBuf) -> Allowed {
    Allowed {
        name: file_name(&path),
        path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path, allow: &[&str]) -> Result<ExecPolicy, ExecConfigError> {
        let args = ExecArgs {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            dir: Some(dir.to_owned()),
            max: 4,
        };
        ExecPolicy::from_args(&args, Path::new("/opt/p/bin/prted"))
    }

    #[test]
    fn allowlist_resolves_names_and_paths_only() {
        let d = tempfile::tempdir().unwrap();
        let proxy = d.path().join("hydra_pmi_proxy");
        std::fs::write(&proxy, "").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        let p = policy(d.path(), &["hydra_pmi_proxy", "/usr/bin/true"]).unwrap();
        assert_eq!(p.resolve("prted").unwrap(), Path::new("/opt/p/bin/prted"));
        assert_eq!(
            p.resolve("/opt/p/bin/prted").unwrap(),
            Path::new("/opt/p/bin/prted")
        );
        assert_eq!(p.resolve("hydra_pmi_proxy").unwrap(), proxy);
        assert_eq!(p.resolve(proxy.to_str().unwrap()).unwrap(), proxy);
        assert_eq!(
            p.resolve(link.join("hydra_pmi_proxy").to_str().unwrap())
                .unwrap(),
            proxy
        );
        assert_eq!(p.resolve("true").unwrap(), Path::new("/usr/bin/true"));
        let via_proc = format!("/proc/self/root{}", proxy.display());
        let dotted = format!(
            "{}/../{}",
            link.display(),
            proxy.strip_prefix("/").unwrap().display()
        );
        for bad in [&via_proc, &dotted] {
            let e = p.resolve(bad).unwrap_err().to_string();
            assert!(e.contains("/proc"), "{e}");
        }
        for bad in ["sh", "/bin/sh", "bin/prted", "./prted", "/opt/p/bin/prte"] {
            let e = p.resolve(bad).unwrap_err().to_string();
            assert!(
                e.contains("allowlist") && e.contains("/opt/p/bin/prted"),
                "{e}"
            );
        }
        assert_eq!(p.resolve(""), Err(ExecError::NoProgram));
        assert!(matches!(
            policy(d.path(), &["/bin/sh"]),
            Err(ExecConfigError::Shell(_))
        ));
        assert!(policy(d.path(), &["env"]).is_err());
        assert!(policy(d.path(), &["bin/x"])
            .unwrap_err()
            .to_string()
            .contains("absolute"));
        let only = ExecPolicy::only(Path::new("/opt/p/bin/prted"));
        assert!(only.resolve("hydra_pmi_proxy").is_err());
    }
}
