//! What the launches the agent starts itself share (the DVM head's prte, see [`super::head`],
//! and batch mode's command, see [`super::batch`]): they wait until the pod is Ready, and their
//! command is set up the same way.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::agent::checked_config::AgentConfig;
use crate::hostfile::Host;

/// How long the agent waits for its own health endpoint before it starts its launcher anyway.
const HEALTH_WAIT: Duration = Duration::from_secs(30);

/// Whether `GET /healthz` at `addr` answers 200.
async fn health_ok(addr: SocketAddr) -> bool {
    let probe = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf.starts_with(b"HTTP/1.1 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Ok(true))
    )
}

/// Waits (bounded) until the agent's health endpoint serves, so that the pod is Ready before
/// prte's discovery looks for ready pods.
pub(crate) async fn wait_health(addr: Option<SocketAddr>, stop: &CancellationToken) {
    let Some(mut addr) = addr else { return };
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let deadline = Instant::now() + HEALTH_WAIT;
    while !health_ok(addr).await {
        if Instant::now() >= deadline {
            warn!(%addr, "the agent's health endpoint does not answer; starting the DVM head anyway");
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// The command of a launcher the agent runs itself, `program` with `args`: in its own process
/// group, stdin from `/dev/null`, stdout and stderr the agent's (the pod's log), the agent's
/// environment plus `TMPDIR` (`--tmpdir`), unless set the agent's secret file and port for
/// the k8s PLM ([`AgentConfig::launcher_env`]), and with `--mpi` what the image's MPI needs
/// ([`crate::agent::mpi::prepare`]; `hosts` are the job's pods where they are known).
pub(crate) fn launcher_command<S: AsRef<OsStr>>(
    program: impl AsRef<OsStr>,
    args: impl IntoIterator<Item = S>,
    config: &AgentConfig,
    hosts: Option<&[Host]>,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("TMPDIR", &config.tmpdir)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .process_group(0);
    // The k8s PLM's settings only for a PRRTE that loads the components: a launcher through
    // prrte-k8s-rsh would pass them on to its daemons (PRRTE 5's ssh launcher forwards every
    // PRTE_MCA_ variable onto prted's command line), where the agent rightly refuses them.
    let components = config
        .mpi
        .as_ref()
        .is_none_or(|m| m.plan.launch == crate::agent::mpi::Launch::Components);
    if components {
        for (name, value) in config.launcher_env(|k| std::env::var_os(k).is_some()) {
            cmd.env(name, value);
        }
    }
    if let Some(hold) =
        crate::agent::preempt::Preemption::hold_for(config.preempt_grace, config.kill_grace)
    {
        cmd.env(
            crate::agent::child_env::PREEMPT_SECONDS,
            hold.as_secs().to_string(),
        );
    }
    if let Some(m) = &config.mpi {
        for (name, value) in m.command_env(hosts, |k| std::env::var_os(k)) {
            cmd.env(name, value);
        }
    }
    cmd
}
