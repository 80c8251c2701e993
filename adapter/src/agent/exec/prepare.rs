//! An exec request checked and turned into a command: the program from the allowlist, its
//! environment, its arguments (a launcher's daemon's against what its launcher sends) and its
//! working directory. Nothing is started here.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tracing::debug;

use super::allowlist::ExecPolicy;
use super::env::{check_env, EnvUse};
use super::error::ExecError;
use crate::agent::checked_config::AgentConfig;
use crate::agent::launch_policy::daemons::check_exec_daemon;
use crate::agent::launch_policy::error::Request;
use crate::agent::launch_policy::grammar::Ctx as ArgsCtx;
use crate::agent::metrics::AgentMetrics;
use crate::agent::process::Reaper;
use crate::agent::tracking::Tracking;
use crate::protocol::exec::expand;

/// An `exec` request.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub stdin: bool,
}

/// The agent's exec settings and the count of programs running.
#[derive(Debug)]
pub struct ExecState {
    pub policy: ExecPolicy,
    pub(super) running: AtomicUsize,
}

impl ExecState {
    pub fn new(policy: ExecPolicy) -> ExecState {
        ExecState {
            policy,
            running: AtomicUsize::new(0),
        }
    }
}

/// What one exec needs of the agent.
pub(crate) struct Ctx<'a> {
    pub config: &'a AgentConfig,
    pub reaper: &'a Arc<Reaper>,
    pub tracking: &'a Tracking,
    pub base_env: &'a [(OsString, OsString)],
    pub state: &'a ExecState,
    /// Where started programs, refusals and missed heartbeats are counted.
    pub metrics: &'a AgentMetrics,
}

/// A prepared command.
pub(crate) struct Prepared {
    pub program: PathBuf,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
}

/// Checks an exec request from `peer` against the allowlist, the environment rules and, for a
/// launcher's daemon, what its launcher sends, and expands its templates.
pub(crate) fn prepare(
    ctx: &Ctx<'_>,
    req: &ExecRequest,
    peer: SocketAddr,
) -> Result<Prepared, ExecError> {
    let Some(argv0) = req.argv.first() else {
        return Err(ExecError::NoProgram);
    };
    let mut env = agent_env(ctx);
    // The program is resolved first: an installation prefix the request names is taken only
    // when it is the allowlisted program's own.
    let argv0 = expand_in(&env, argv0, "argv[0]")?;
    let program = ctx.state.policy.resolve(&argv0)?;
    add_request_env(&mut env, &req.env, &program)?;
    let mut argv = vec![argv0];
    for (i, a) in req.argv.iter().enumerate().skip(1) {
        argv.push(expand_in(&env, a, &format!("argv[{i}]"))?);
    }
    let args = ArgsCtx {
        req: Request::Exec,
        peer: peer.ip(),
        rsh: ctx.state.policy.rsh.as_deref(),
        path: env.get("PATH").map(String::as_str),
        program: Some(&program),
        prrte: ctx.state.policy.prrte,
    };
    if let Some(checked) = check_exec_daemon(&argv, &args)? {
        argv.truncate(1);
        argv.extend(checked);
    }
    let cwd = match &req.cwd {
        Some(c) => {
            let c = expand_in(&env, c, "cwd")?;
            let p = PathBuf::from(&c);
            if !p.is_absolute() || !p.is_dir() {
                return Err(ExecError::Cwd { dir: c });
            }
            p
        }
        None => ctx.config.tmpdir.clone(),
    };
    Ok(Prepared {
        program,
        argv,
        env,
        cwd,
    })
}

fn expand_in(
    env: &BTreeMap<String, String>,
    template: &str,
    what: &str,
) -> Result<String, ExecError> {
    expand(template, |k| env.get(k).cloned()).map_err(|reason| ExecError::Template {
        what: what.into(),
        reason: reason.to_string(),
    })
}

/// The program's environment before the request's variables: the base environment and this
/// agent's secret file and port.
fn agent_env(ctx: &Ctx<'_>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = ctx
        .base_env
        .iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    env.insert(
        crate::settings::agent::SECRET_FILE.var().into(),
        ctx.config.secret_file.display().to_string(),
    );
    env.insert(
        crate::settings::agent::PORT.var().into(),
        ctx.config.listen.port().to_string(),
    );
    env
}

/// Adds the request's variables, in order and expanded, that [`check_env`] passes.
fn add_request_env(
    env: &mut BTreeMap<String, String>,
    request: &[(String, String)],
    program: &std::path::Path,
) -> Result<(), ExecError> {
    for (name, value) in request {
        let v = expand_in(env, value, &format!("environment variable `{name}`"))?;
        match check_env(name, &v, program)? {
            EnvUse::Pass(v) => {
                env.insert(name.clone(), v);
            }
            EnvUse::Ignore(why) => {
                debug!(variable = %crate::text::echo(name), why, "exec: not setting a variable of the request");
            }
        }
    }
    Ok(())
}

impl Prepared {
    /// The command: in its own process group, only the prepared environment, output piped,
    /// stdin piped if the client sends it (else `/dev/null`).
    pub(super) fn command(&self, stdin: bool) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg0(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(&self.env)
            .current_dir(&self.cwd)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        cmd
    }
}
