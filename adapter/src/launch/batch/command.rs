//! The job's command: the hostfile its MPI reads written first, then the command run in its own
//! process group while the workers' links are watched.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::super::local::launcher_command;
use super::peers::{beat_until_gone, heartbeat, Attached};
use super::relay::{Relay, Seen};
use super::report::displays;
use super::route::Router;
use crate::agent::batch::shell_status;
use crate::agent::checked_config::AgentConfig;
use crate::agent::mpi::prepare::HostfileError;
use crate::agent::process::{Job, Reaper};
use crate::agent::rank_output::{prrte_launcher, with_output_tag};
use crate::discovery::Allocation;

/// Why the batch launcher cannot write the hostfile its MPI needs (it does not run the command).
#[derive(Debug, thiserror::Error)]
pub(super) enum HostfileNotWritten {
    #[error("{mpi} needs the job's pods for its hostfile, but discovery failed: {why}")]
    NoPods { mpi: String, why: String },
    #[error(transparent)]
    Write(#[from] HostfileError),
}

/// Writes the hostfile the image's MPI reads (`--mpi` with a launcher that needs one) from the
/// allocation. Without an allocation such a launcher would run the whole job in this pod, so
/// that is an error naming why.
pub(super) fn write_hostfile(
    config: &AgentConfig,
    alloc: Option<&Allocation>,
    why: &str,
) -> Result<(), HostfileNotWritten> {
    let Some(m) = &config.mpi else { return Ok(()) };
    if m.hostfile.is_none() {
        return Ok(());
    }
    let Some(alloc) = alloc else {
        return Err(HostfileNotWritten::NoPods {
            mpi: m
                .plan
                .found
                .version
                .clone()
                .unwrap_or_else(|| m.plan.found.kind.describe().into()),
            why: why.to_owned(),
        });
    };
    if let Some(path) = m.write_hostfile(&alloc.hosts())? {
        info!(hostfile = %path.display(), pods = alloc.nodes.len(), slots = alloc.nodes.iter().map(|n| n.slots).sum::<u32>(), "batch launcher: wrote the hostfile from discovery");
    }
    Ok(())
}

/// The command as the launcher runs it, and whether its output is relayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Prepared {
    pub command: Vec<String>,
    /// Relay its stdout and stderr (reading the first failing rank), and whether the job
    /// map's block is kept out of the log (the launcher's own `--display map`).
    pub relay: Option<bool>,
    /// Its output is tagged by rank (the launcher's `--output tag`): the relays take the tags
    /// off and send each rank's lines to its pod.
    pub tagged: bool,
}

/// For PRRTE's launcher where the components serve it (PRRTE 3.0.8): with `rank_output`,
/// `--output tag`, so that each line names its rank and goes to the log of the rank's pod too
/// (see [`crate::agent::rank_output`]; never over an `--output` of the command's own), and
/// `--display map` (unless the command displays something itself), so that a rank's pod is
/// known (see [`super::report`]). Any other command runs as given.
pub(super) fn prepare(command: Vec<String>, rank_output: bool, config: &AgentConfig) -> Prepared {
    let components = config
        .mpi
        .as_ref()
        .is_none_or(|m| m.plan.launch == crate::agent::mpi::Launch::Components);
    if !components || !command.first().is_some_and(|p| prrte_launcher(p)) {
        return Prepared {
            command,
            relay: None,
            tagged: false,
        };
    }
    let mut command = command;
    let mut tagged = false;
    if rank_output {
        match with_output_tag(&command) {
            Some(c) => {
                info!("batch launcher: each rank's output also goes to the log of the pod it runs in (mpirun --output tag, the tags taken off here)");
                command = c;
                tagged = true;
            }
            None => info!("batch launcher: the command sets --output itself: the ranks' output is only in this pod's log"),
        }
    }
    let strip_map = !displays(&command);
    if strip_map {
        command.splice(1..1, ["--display".to_owned(), "map".to_owned()]);
    }
    Prepared {
        command,
        relay: Some(strip_map),
        tagged,
    }
}

/// Runs the command; returns its status and the pods of the workers whose agents went away
/// meanwhile. With a `router`, each worker is sent its ranks' output meanwhile.
pub(super) async fn run_watching(
    command: &Prepared,
    router: Option<Router>,
    config: &AgentConfig,
    alloc: Option<&Allocation>,
    reaper: &Reaper,
    stop: &CancellationToken,
    links: &mut [Attached],
) -> (i32, Vec<String>) {
    let lost: Mutex<Vec<String>> = Mutex::new(Vec::new());
    // While the command runs, notice a worker whose agent goes away: a worker sends nothing
    // unasked but `pong`s, so any end of its connection means its pod was evicted, deleted
    // or killed, and its silence that its pod is cut off. Once the command has ended, each
    // link's task stops between two frames (`done`), so the connection stays in step.
    let beat = heartbeat();
    let done = CancellationToken::new();
    let watch = futures::future::join_all(links.iter_mut().map(|l| {
        let (lost, done) = (&lost, &done);
        async move {
            if let Some(why) = beat_until_gone(l, beat, done).await {
                warn!(pod = %l.target.pod, %why, "batch launcher: a worker's agent went away while the job's command runs");
                lost.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(l.target.pod.clone());
            }
        }
    }));
    let run = async {
        let code = run_command(command, router.map(Arc::new), config, alloc, reaper, stop).await;
        done.cancel();
        code
    };
    let (code, _) = tokio::join!(run, watch);
    (code, lost.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// Runs the command to its end (or until `stop`); its status as a shell reports it.
async fn run_command(
    prepared: &Prepared,
    router: Option<Arc<Router>>,
    config: &AgentConfig,
    alloc: Option<&Allocation>,
    reaper: &Reaper,
    stop: &CancellationToken,
) -> i32 {
    let Some((exe, args)) = prepared.command.split_first() else {
        return 127;
    };
    let hosts = alloc.map(Allocation::hosts);
    let mut cmd = launcher_command(exe, args, config, hosts.as_deref());
    if prepared.relay.is_some() {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    // The job's launcher allocates and launches through the Kubernetes components. Set here,
    // for this command only, never in the pod's environment: every prted inherits that, and a
    // prted told to use `plm k8s` (which only the launcher can select) has no PLM and exits.
    // prterun itself never forwards `plm` to the daemons it starts. With `--mpi` the plan of
    // the image's MPI decides (it sets these for an Open MPI 5 the components serve).
    if config.mpi.is_none() {
        for (name, value) in [("PRTE_MCA_ras", "k8s"), ("PRTE_MCA_plm", "k8s")] {
            if std::env::var_os(name).is_none() {
                cmd.env(name, value);
            }
        }
    }
    let (pid, exit_rx, mut child) = match reaper.spawn_child(&mut cmd) {
        Ok(x) => x,
        Err(e) => {
            error!(command = %exe, error = %e, "cannot run the job's command");
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let relay = prepared.relay.and_then(|strip| {
        Some(Relay::start(
            child.stdout.take()?,
            child.stderr.take()?,
            strip,
            router.filter(|_| prepared.tagged),
        ))
    });
    let started = Instant::now();
    let mut job = Job::new(pid, exit_rx);
    let status = tokio::select! {
        s = job.wait_exit() => {
            // Stop whatever the command left in its process group.
            job.terminate(config.kill_grace, reaper).await;
            s
        }
        _ = stop.cancelled() => {
            warn!(pid, "the agent is stopping: stopping the job's command");
            job.terminate(config.kill_grace, reaper).await
        }
    };
    info!(pid, %status, ran_ms = started.elapsed().as_millis() as u64, "the job's command ended");
    let code = shell_status(status);
    if let Some(relay) = relay {
        let seen = relay.finish().await;
        if code != 0 {
            if let Some(seen) = seen {
                report_failure(&seen, alloc);
            }
        }
    }
    code
}

/// Where Kubernetes takes a container's termination message from (the default
/// `terminationMessagePath`; the kubelet makes the file).
const TERMINATION_LOG: &str = "/dev/termination-log";

/// Logs the first failing rank with its pod and writes it as the container's termination
/// message, which the MPIJob's `Failed` condition quotes.
fn report_failure(seen: &Seen, alloc: Option<&Allocation>) {
    let node = seen.failure.node.as_deref().or(seen.mapped.as_deref());
    let pod = node.and_then(|n| {
        alloc?
            .nodes
            .iter()
            .find(|p| p.hostname == n || p.pod == n)
            .map(|p| p.pod.as_str())
    });
    let text = seen.failure.describe(pod);
    warn!(failure = %text, "batch launcher: the first rank to fail");
    let path = std::path::Path::new(TERMINATION_LOG);
    if path.is_file() {
        if let Err(e) = std::fs::write(path, &text) {
            warn!(error = %e, "batch launcher: cannot write the termination message {TERMINATION_LOG}");
        }
    }
}
