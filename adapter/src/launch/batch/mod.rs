//! Batch mode's launcher (the agent of the pod with index 0, or `--batch-role launcher`; see
//! [`crate::agent::batch`] for the whole of batch mode): it attaches to the other agents, runs the
//! job's command and tells them how it ended. In three steps: the links to the workers'
//! agents (`peers`: find, attach, heartbeats, `finish`), the command (`command`: the hostfile
//! its MPI reads, then the command while the links are watched), and after a success the
//! workers' pods seen finished (`pods`).

mod command;
mod peers;
mod pods;
mod relay;
mod report;
mod route;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::local::wait_health;
use crate::agent::batch::BatchState;
use crate::agent::checked_config::{AgentConfig, BatchConfig};
use crate::agent::process::Reaper;
use command::{prepare, run_watching, write_hostfile};
use peers::{attach_all, find_peers, finish_all};
use pods::wait_workers_finished;

/// When the command failed after a worker's agent went away, how long the launcher waits before
/// it tells the others and exits (see [`crate::agent::batch`]).
pub(crate) const LOST_PEER_DELAY: Duration = Duration::from_secs(5);

/// The launcher: attach to the other agents, run the command, tell them how it ended.
pub(crate) async fn run_launcher(
    config: AgentConfig,
    reaper: Arc<Reaper>,
    health: Option<SocketAddr>,
    batch: Arc<BatchState>,
    stop: CancellationToken,
) {
    let Some(BatchConfig::Launcher {
        command,
        pods_timeout,
        reason,
        workers_stay,
        rank_output,
    }) = config.batch.clone()
    else {
        return;
    };
    wait_health(health, &stop).await;
    if stop.is_cancelled() {
        batch.exit(143);
        return;
    }
    info!(%reason, "batch launcher: waiting for the job's pods");
    let peers = tokio::select! {
        p = find_peers(&config, pods_timeout) => p,
        _ = stop.cancelled() => { batch.exit(143); return; }
    };
    let (alloc, peers, failure) = match peers {
        Ok(p) => (Some(p.alloc), p.targets, String::new()),
        Err(e) => {
            warn!(error = %e, "batch launcher: cannot find the job's other pods; running the command anyway, but their agents will not be told when it ends (they give up after --launcher-wait)");
            (None, Vec::new(), e.to_string())
        }
    };
    if let Err(e) = write_hostfile(&config, alloc.as_ref(), &failure) {
        error!(error = %e, "batch launcher: not running the job's command");
        batch.exit(1);
        return;
    }
    let (namespace, selector) = alloc
        .as_ref()
        .map(|a| (a.namespace.clone(), a.selector.clone()))
        .unwrap_or_default();
    let mut links = attach_all(peers, &config).await;
    info!(workers = links.len(), command = ?command, "batch launcher: running the job's command");
    let prepared = prepare(command, rank_output, &config);
    let router = prepared.tagged.then(|| {
        let pods: Vec<&str> = links.iter().map(|l| l.target.pod.as_str()).collect();
        let (router, queues) = route::Router::new(alloc.as_ref(), &pods);
        for (l, q) in links.iter_mut().zip(queues) {
            l.output = Some(q);
        }
        router
    });
    let (code, lost) = run_watching(
        &prepared,
        router,
        &config,
        alloc.as_ref(),
        &reaper,
        &stop,
        &mut links,
    )
    .await;
    batch.decide(code);
    links.retain(|l| !lost.contains(&l.target.pod));
    // A worker that went away while the command ran and then succeeded (its ranks held on
    // through a preemption notice) was told to end: its pod ends Failed, which must reach the
    // Job controller before this pod's success does (else the Job would be complete).
    if code != 0 && !lost.is_empty() {
        warn!(code, pods = ?lost, "batch launcher: the command failed after worker pods went away; waiting {LOST_PEER_DELAY:?} before telling the others and exiting, so that their disruption, not this pod's exit status, is what fails the Job");
        tokio::select! {
            _ = tokio::time::sleep(LOST_PEER_DELAY) => {}
            _ = stop.cancelled() => {}
        }
    }
    let n = links.len();
    let told = finish_all(links, code).await;
    info!(
        code,
        told = told.len(),
        workers = n,
        "batch launcher: the job's command ended"
    );
    // Workers that stay up (`--workers-stay`) are not waited for: their pods do not end.
    if code == 0 && !workers_stay && !(told.is_empty() && lost.is_empty()) {
        tokio::select! {
            _ = wait_workers_finished(&namespace, &selector, told, lost) => {}
            _ = stop.cancelled() => {}
        }
    }
    batch.exit(code);
    match batch.exit_code() {
        Some(exit) if exit != code => warn!(
            code,
            exit,
            "batch launcher: this pod was told to end while the job's command ran: exiting with 128 + the signal, not the command's status, so that the Job does not count the run as a success"
        ),
        _ => info!(code, "batch launcher: exiting with the command's status"),
    }
}
