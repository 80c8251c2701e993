//! What an `exec` request may run: the allowlist, the environment it may set, and the
//! arguments a prted started this way may get.

use std::path::{Path, PathBuf};

use clap::Args;

use super::refusal::{ExecRefusal, ExecSettingsError};
use crate::protocol::exec::is_var_name;
use crate::settings::{agent, ArgExt};

/// The agent's exec settings (`prrte-k8s-agent --exec-allow ...`).
#[derive(Debug, Clone, Default, Args)]
pub struct ExecArgs {
    #[arg(long, setting = &agent::EXEC_ALLOW, value_delimiter = ',')]
    pub allow: Vec<String>,

    #[arg(long, setting = &agent::EXEC_DIR)]
    pub dir: Option<PathBuf>,

    #[arg(long, setting = &agent::MAX_EXEC)]
    pub max: usize,
}

/// Default of `--max-exec`.
pub(crate) const DEFAULT_MAX_EXEC: usize = agent::MAX_EXEC.default_u64() as usize;

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
}

impl ExecPolicy {
    /// Only `prted` (the agent's default).
    pub fn only(prted: &Path) -> ExecPolicy {
        ExecPolicy {
            allowed: vec![allowed(prted.to_owned())],
            max: DEFAULT_MAX_EXEC,
        }
    }

    /// From the agent's arguments; `prted` (the agent's `--prted`) is always allowed.
    pub fn from_args(args: &ExecArgs, prted: &Path) -> Result<ExecPolicy, ExecSettingsError> {
        let mut policy = ExecPolicy::only(prted);
        policy.max = args.max.max(1);
        let dir = match &args.dir {
            Some(d) if !d.is_absolute() => return Err(ExecSettingsError::RelativeDir(d.clone())),
            Some(d) => d.clone(),
            None => prted.parent().map(Path::to_owned).unwrap_or_default(),
        };
        for entry in args
            .allow
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
        {
            let path = if entry.starts_with('/') {
                PathBuf::from(entry)
            } else if entry.contains('/') {
                return Err(ExecSettingsError::NotAPathOrName {
                    entry: entry.to_owned(),
                    dir,
                });
            } else {
                dir.join(entry)
            };
            if [
                "sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "busybox", "env",
            ]
            .contains(&file_name(&path).as_str())
            {
                return Err(ExecSettingsError::Shell(entry.to_owned()));
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
    pub fn resolve(&self, argv0: &str) -> Result<PathBuf, ExecRefusal> {
        let refuse = |why: &'static str| {
            Err(ExecRefusal::NotAllowed {
                program: crate::text::printable(argv0, 300),
                why,
                allowed: self.describe(),
            })
        };
        if argv0.is_empty() {
            return Err(ExecRefusal::EmptyProgram);
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
        // The same file under another name (a symlinked prefix such as a venv link).
        let Ok(canon) = std::fs::canonicalize(wanted) else {
            return refuse("does not exist in this pod and is not on the allowlist");
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

/// What happens to one variable of an exec request's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EnvUse {
    /// Set for the program.
    Pass,
    /// Not set: the pod's own value decides (the reason, for the log).
    Ignore(&'static str),
}

/// Variables launchers put in front of the remote command that name where code comes from;
/// the pod's own settings apply instead of the launcher's.
const IGNORED: &[&str] = &["PATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"];

/// Variables that change what a program or its interpreter loads and runs.
const REFUSED: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "IFS",
    "SHELLOPTS",
    "PS4",
    "GCONV_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PERL5LIB",
    "PERL5OPT",
    "NODE_OPTIONS",
];

/// Checks one `name=value` of an exec request: passed, ignored (the pod's value stays), or
/// refused with the reason.
pub(crate) fn check_env(name: &str) -> Result<EnvUse, ExecRefusal> {
    let shown = crate::text::printable(name, 200);
    if !is_var_name(name) {
        return Err(ExecRefusal::VariableName(shown));
    }
    if IGNORED.contains(&name) || name.ends_with("_PREFIX") || name.ends_with("PKGLIBDIR") {
        return Ok(EnvUse::Ignore(
            "where programs and libraries come from is the pod's setting",
        ));
    }
    if name.starts_with("LD_") || REFUSED.contains(&name) {
        return Err(ExecRefusal::LoadsCode(shown));
    }
    if name.starts_with("PRRTE_K8S_") {
        return Err(ExecRefusal::AgentSetting(shown));
    }
    for marker in ["PRTE_MCA_", "PMIX_MCA_", "OMPI_MCA_", "OPAL_MCA_"] {
        if let Some(param) = name.strip_prefix(marker) {
            if let Some(why) = super::super::launch_policy::refused_mca(param) {
                return Err(ExecRefusal::Parameter {
                    name: shown,
                    param: param.to_owned(),
                    why,
                });
            }
        }
    }
    Ok(EnvUse::Pass)
}

/// Checks the arguments of a PRRTE daemon (`prted`, `prte`) started through exec: the rules of
/// launch requests ([`super::super::launch_policy::check_launch`]), except that PRRTE's own ssh
/// launcher may tell it to start further daemons through `prrte-k8s-rsh` (`plm ssh`,
/// `plm_ssh_agent prrte-k8s-rsh`), as it does for its tree spawn.
pub(crate) fn check_daemon_args(args: &[String]) -> Result<(), String> {
    let mut kept: Vec<String> = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if matches!(a, "--prtemca" | "-prtemca" | "--mca" | "-mca") {
            if let (Some(name), Some(value)) = (args.get(i + 1), args.get(i + 2)) {
                let n = name.to_ascii_lowercase();
                let n = n.strip_prefix("prte_").unwrap_or(&n);
                let first = value.split_whitespace().next().unwrap_or("");
                let ok = match n {
                    "plm" => matches!(value.as_str(), "ssh" | "rsh"),
                    "plm_ssh_agent" | "plm_rsh_agent" => {
                        !first.is_empty()
                            && Path::new(first)
                                .file_name()
                                .is_some_and(|f| f == "prrte-k8s-rsh")
                            && value.split_whitespace().skip(1).all(|w| w.starts_with('-'))
                    }
                    _ => false,
                };
                if ok {
                    // Placeholders keep the indices in the policy's messages right.
                    kept.extend(["--x-allowed".into(), "-".into(), "-".into()]);
                    i += 3;
                    continue;
                }
            }
        }
        kept.push(args[i].clone());
        i += 1;
    }
    let none: Vec<(String, String)> = Vec::new();
    super::super::launch_policy::check_launch(&kept, none.iter().map(|(k, v)| (k, v)))
        .map_err(|e| e.to_string().replace("launch request", "exec request"))
}

/// Whether a resolved program is a PRRTE daemon whose arguments [`check_daemon_args`] checks.
pub(crate) fn is_prrte_daemon(path: &Path) -> bool {
    matches!(file_name(path).as_str(), "prted" | "prte")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path, allow: &[&str]) -> Result<ExecPolicy, String> {
        let args = ExecArgs {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            dir: Some(dir.to_owned()),
            max: 4,
        };
        ExecPolicy::from_args(&args, Path::new("/opt/p/bin/prted")).map_err(|e| e.to_string())
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
        for bad in [
            "sh",
            "/bin/sh",
            "bin/prted",
            "./prted",
            "/opt/p/bin/prte",
            "",
        ] {
            let e = p.resolve(bad).unwrap_err().to_string();
            assert!(!e.is_empty(), "{bad}");
            if !bad.is_empty() {
                assert!(
                    e.contains("allowlist") && e.contains("/opt/p/bin/prted"),
                    "{e}"
                );
            }
        }
        assert!(policy(d.path(), &["/bin/sh"])
            .unwrap_err()
            .contains("shell"));
        assert!(policy(d.path(), &["env"]).is_err());
        assert!(policy(d.path(), &["bin/x"])
            .unwrap_err()
            .contains("absolute"));
        let only = ExecPolicy::only(Path::new("/opt/p/bin/prted"));
        assert!(only.resolve("hydra_pmi_proxy").is_err());
    }

    #[test]
    fn exec_env_is_filtered() {
        assert_eq!(check_env("HYDRA_X").unwrap(), EnvUse::Pass);
        assert_eq!(check_env("PRTE_MCA_ess").unwrap(), EnvUse::Pass);
        for ignored in [
            "PATH",
            "LD_LIBRARY_PATH",
            "PRTE_PREFIX",
            "OPAL_PREFIX",
            "PRTE_PKGLIBDIR",
        ] {
            assert!(
                matches!(check_env(ignored).unwrap(), EnvUse::Ignore(_)),
                "{ignored}"
            );
        }
        for bad in [
            "LD_PRELOAD",
            "BASH_ENV",
            "PRRTE_K8S_SECRET_FILE",
            "PRTE_MCA_plm_ssh_agent",
            "A-B",
            "1A",
        ] {
            assert!(check_env(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn daemon_args_admit_only_the_rsh_tree_spawn() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        check_daemon_args(&v(&[
            "--prtemca",
            "ess",
            "env",
            "--prtemca",
            "plm",
            "ssh",
            "--prtemca",
            "plm_ssh_agent",
            "/usr/bin/prrte-k8s-rsh",
            "--tree-spawn",
        ]))
        .unwrap();
        check_daemon_args(&v(&["--prtemca", "plm_ssh_agent", "prrte-k8s-rsh -x"])).unwrap();
        for bad in [
            v(&["--prtemca", "plm_ssh_agent", "/bin/sh"]),
            v(&["--prtemca", "plm_ssh_agent", "prrte-k8s-rsh /bin/sh"]),
            v(&["--prtemca", "plm", "k8s"]),
            v(&["--prtemca", "prte_launch_agent", "/tmp/x"]),
            v(&["--prefix", "/tmp"]),
        ] {
            let e = check_daemon_args(&bad).unwrap_err();
            assert!(e.contains("not allowed"), "{bad:?}: {e}");
        }
    }
}
