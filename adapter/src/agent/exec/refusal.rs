//! Why the agent's exec settings cannot be used ([`ExecSettingsError`]) and why an `exec`
//! request is refused ([`ExecRefusal`]); each displays as the sentence that is logged or sent
//! back, naming the cause and the remedy.

use std::path::PathBuf;

use crate::settings::agent;

/// An `--exec-dir` or `--exec-allow` the agent refuses to start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecSettingsError {
    #[error("--exec-dir {}: must be an absolute path", .0.display())]
    RelativeDir(PathBuf),
    #[error(
        "--exec-allow {entry}: give an absolute path or a bare name (found in --exec-dir {})",
        dir.display()
    )]
    NotAPathOrName { entry: String, dir: PathBuf },
    #[error(
        "--exec-allow {0}: a shell or `env` would run any program; allow the programs themselves"
    )]
    Shell(String),
}

/// A program or an environment variable an `exec` request may not use. Names are already
/// made printable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecRefusal {
    #[error("empty program name")]
    EmptyProgram,
    #[error(
        "`{program}` {why}: this agent's exec allowlist holds only {allowed} (a site admin adds \
         programs with --{flag} / {var}; a shell is never run)",
        flag = agent::EXEC_ALLOW.flag,
        var = agent::EXEC_ALLOW.var()
    )]
    NotAllowed {
        program: String,
        why: &'static str,
        /// The allowed paths.
        allowed: String,
    },
    #[error("`{0}` is not a valid environment variable name")]
    VariableName(String),
    #[error(
        "environment variable `{0}` is not allowed in an exec request: it changes what code a \
         program loads or runs"
    )]
    LoadsCode(String),
    #[error(
        "environment variable `{0}` is not allowed in an exec request: the agent's own settings \
         are not the launcher's to change"
    )]
    AgentSetting(String),
    #[error(
        "environment variable `{name}` is not allowed in an exec request: MCA parameter \
         `{param}` {why}"
    )]
    Parameter {
        name: String,
        param: String,
        why: &'static str,
    },
}

/// The agent answers a refused request with the reason as text (`failed {reason}`).
impl From<ExecRefusal> for String {
    fn from(e: ExecRefusal) -> String {
        e.to_string()
    }
}
