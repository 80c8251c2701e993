//! Why an exec request is refused, and why the exec settings are wrong: each names the cause
//! and what to do.

use crate::agent::launch_policy::error::PolicyError;
use crate::agent::metrics::Refusal;
use crate::settings::agent::EXEC_ALLOW;
use crate::text::printable;

/// A refused exec request (nothing was started).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("exec request without a program (argv is empty)")]
    NoProgram,
    #[error("{what}: {reason}")]
    Template { what: String, reason: String },
    #[error("`{}` {why}: this agent's exec allowlist holds only {allowed} (a site admin adds \
             programs with --{} / {}; a shell is never run)",
            printable(program, 300), EXEC_ALLOW.flag, EXEC_ALLOW.var())]
    NotAllowed {
        program: String,
        why: &'static str,
        allowed: String,
    },
    #[error(
        "environment variable `{}` is not allowed in an exec request: {why}",
        printable(name, 200)
    )]
    Env { name: String, why: &'static str },
    #[error(
        "cd {}: not an absolute path of a directory in this pod",
        printable(dir, 300)
    )]
    Cwd { dir: String },
    #[error(transparent)]
    Arguments(#[from] PolicyError),
}

/// The reason `/metrics` counts a refused request under.
impl From<&ExecError> for Refusal {
    fn from(e: &ExecError) -> Self {
        match e {
            ExecError::NoProgram => Refusal::NoProgram,
            ExecError::Template { .. } => Refusal::Template,
            ExecError::NotAllowed { .. } => Refusal::NotAllowed,
            ExecError::Env { .. } => Refusal::Environment,
            ExecError::Cwd { .. } => Refusal::Cwd,
            ExecError::Arguments(_) => Refusal::Arguments,
        }
    }
}

/// Wrong exec settings of the agent (it refuses to start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecConfigError {
    #[error("--exec-dir {0}: must be an absolute path")]
    RelativeDir(String),
    #[error(
        "--exec-allow {entry}: give an absolute path or a bare name (found in --exec-dir {dir})"
    )]
    RelativeEntry { entry: String, dir: String },
    #[error(
        "--exec-allow {0}: a shell or `env` would run any program; allow the programs themselves"
    )]
    Shell(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_is_counted_under_its_reason() {
        let cwd = ExecError::Cwd { dir: "x".into() };
        assert_eq!(Refusal::from(&cwd), Refusal::Cwd);
        assert_eq!(Refusal::from(&ExecError::NoProgram), Refusal::NoProgram);
        let env = ExecError::Env {
            name: "LD_PRELOAD".into(),
            why: "x",
        };
        assert_eq!(Refusal::from(&env), Refusal::Environment);
    }
}
