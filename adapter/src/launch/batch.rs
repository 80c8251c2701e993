//! Batch mode's launcher (the agent of the pod with index 0, or `--batch-role launcher`; see
//! [`crate::agent::batch`] for the whole of batch mode): it attaches to the other agents, runs the
//! job's command and tells them how it ended.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::connect::{agent_name, connect_authenticated, recv_reply, send_request};
use super::error::AgentError;
use super::local::{launcher_command, wait_health};
use super::request::{LaunchOptions, LaunchTarget};
use crate::agent::batch::{shell_status, BatchState};
use crate::agent::checked_config::{AgentConfig, BatchConfig};
use crate::agent::mpi::prepare::HostfileError;
use crate::agent::process::{Job, Reaper};
use crate::discovery::{self, Allocation, DiscoveryConfig, DiscoveryError};
use crate::protocol::liveness::{Heartbeat, HeartbeatSender, Lost};
use crate::protocol::{FramedConn, Reply, Request, Session};

/// Bound on each connect, `attach` and `finish` exchange of the launcher.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// When the command failed after a worker's agent went away, how long the launcher waits before
/// it tells the others and exits (see [`crate::agent::batch`]).
pub(crate) const LOST_PEER_DELAY: Duration = Duration::from_secs(5);
/// After a successful command, how long the launcher waits for the workers' pods to be
/// finished before it exits itself (see [`wait_workers_finished`]).
pub(crate) const WORKER_EXIT_WAIT: Duration = Duration::from_secs(20);

/// Why the batch launcher could not find the job's other pods, or see them finished.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeersError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
    #[error("no Kubernetes API client within {0:?}")]
    NoClient(Duration),
}

/// One attached worker agent.
struct Attached {
    target: LaunchTarget,
    conn: FramedConn<TcpStream>,
    session: Session,
}

async fn attach_one(target: LaunchTarget, opts: &LaunchOptions) -> Result<Attached, AgentError> {
    let (mut conn, mut session) = connect_authenticated(&target, opts).await?;
    let who = agent_name(&target);
    send_request(
        &mut conn,
        &mut session,
        &Request::Attach {},
        "attach",
        &who,
        PEER_TIMEOUT,
    )
    .await?;
    let deadline = Instant::now() + PEER_TIMEOUT;
    match recv_reply(
        &mut conn,
        &mut session,
        "attach",
        &who,
        deadline,
        PEER_TIMEOUT,
    )
    .await?
    {
        Reply::Ack {} => Ok(Attached {
            target,
            conn,
            session,
        }),
        Reply::Failed { reason } | Reply::Error { reason } => Err(AgentError::RequestRefused {
            what: "attach",
            who,
            reason,
        }),
        other => Err(AgentError::Unexpected {
            what: "attach",
            who,
            reply: format!("{other:?}"),
        }),
    }
}

async fn finish_one(
    mut a: Attached,
    code: i32,
) -> Result<(LaunchTarget, FramedConn<TcpStream>), (LaunchTarget, AgentError)> {
    let who = agent_name(&a.target);
    let r = async {
        send_request(
            &mut a.conn,
            &mut a.session,
            &Request::Finish { code },
            "finish",
            &who,
            PEER_TIMEOUT,
        )
        .await?;
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            match recv_reply(
                &mut a.conn,
                &mut a.session,
                "finish",
                &who,
                deadline,
                PEER_TIMEOUT,
            )
            .await?
            {
                Reply::Ack {} => return Ok(()),
                Reply::Failed { reason } | Reply::Error { reason } => {
                    return Err(AgentError::RequestRefused {
                        what: "finish",
                        who: who.clone(),
                        reason,
                    })
                }
                _ => continue,
            }
        }
    }
    .await;
    match r {
        Ok(()) => Ok((a.target, a.conn)),
        Err(e) => Err((a.target, e)),
    }
}

/// The job's pods as discovery found them, and the other pods' agents.
struct Peers {
    alloc: Allocation,
    targets: Vec<LaunchTarget>,
}

/// Finds the job's pods (bounded), as `ras k8s` in this pod would (its `PRTE_MCA_ras_k8s_*`
/// settings, `ras_k8s_exclude_self` included, since the hostfile written from the allocation
/// stands in for it): the allocation, and the other pods' agents.
async fn find_peers(config: &AgentConfig, timeout: Duration) -> Result<Peers, PeersError> {
    let mut cfg = DiscoveryConfig::from_env(&|k| std::env::var(k).ok())?;
    cfg.timeout = timeout;
    let bound = timeout + Duration::from_secs(5);
    let alloc = match tokio::time::timeout(bound, discovery::discover(&cfg)).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(PeersError::NoAnswer(bound)),
    };
    let port = config.listen.port();
    let targets = alloc
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.is_self)
        .map(|(i, n)| LaunchTarget {
            id: i as u32,
            pod: n.pod.clone(),
            addr: SocketAddr::new(n.ip.into(), port),
        })
        .collect();
    Ok(Peers { alloc, targets })
}

/// Why the batch launcher cannot write the hostfile its MPI needs (it does not run the command).
#[derive(Debug, thiserror::Error)]
enum HostfileNotWritten {
    #[error("{mpi} needs the job's pods for its hostfile, but discovery failed: {why}")]
    NoPods { mpi: String, why: String },
    #[error(transparent)]
    Write(#[from] HostfileError),
}

/// Writes the hostfile the image's MPI reads (`--mpi` with a launcher that needs one) from the
/// allocation. Without an allocation such a launcher would run the whole job in this pod, so
/// that is an error naming why.
fn write_hostfile(
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

/// Waits (at most `limit`) until every pod in `pods` of `namespace` (all matched by
/// `selector`) is finished: phase `Succeeded` or `Failed`, or gone. Follows one watch of the
/// selected pods, so a pod's end is seen as soon as its kubelet reports it. Returns the pods
/// still not finished.
pub(crate) async fn wait_pods_finished(
    kubeconfig: Option<&std::path::Path>,
    namespace: &str,
    selector: &str,
    pods: Vec<String>,
    limit: Duration,
) -> Result<Vec<String>, PeersError> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::{watcher, Event};
    use kube::runtime::WatchStreamExt;
    use kube::Api;
    let mut left = Unfinished::new(pods);
    if left.is_empty() {
        return Ok(Vec::new());
    }
    let deadline = tokio::time::Instant::now() + limit;
    let api = tokio::time::timeout_at(
        deadline,
        crate::discovery::client::connect(kubeconfig, PEER_TIMEOUT),
    )
    .await
    .map_err(|_| PeersError::NoClient(limit))??;
    let pods_api: Api<Pod> = Api::namespaced(api.client, namespace);
    let config = crate::discovery::wait::watch_config(selector, limit);
    let events = watcher(pods_api, config).default_backoff();
    let mut events = std::pin::pin!(events);
    let finished = |p: &Pod| {
        matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    };
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    while !left.is_empty() {
        match tokio::time::timeout_at(deadline, events.next()).await {
            // The deadline, or a watcher that ended: what is left is not seen finished.
            Err(_) | Ok(None) => break,
            Ok(Some(Ok(Event::Init))) => left.listing(),
            Ok(Some(Ok(Event::InitApply(p) | Event::Apply(p)))) => {
                left.seen(&name(&p), finished(&p))
            }
            Ok(Some(Ok(Event::InitDone))) => left.listed(),
            Ok(Some(Ok(Event::Delete(p)))) => left.seen(&name(&p), true),
            // The watcher backs off and lists again.
            Ok(Some(Err(e))) => {
                warn!(error = %e, "batch launcher: watching the worker pods; retrying")
            }
        }
    }
    Ok(left.into_names())
}

/// The pods not yet seen finished, as a watch of them shows them: a pod that a (re)list does
/// not hold is gone, hence finished.
#[derive(Debug)]
struct Unfinished {
    left: std::collections::BTreeSet<String>,
    /// The pods of the list under way (from `Init` to `InitDone`).
    listing: Option<std::collections::BTreeSet<String>>,
}

impl Unfinished {
    fn new(pods: Vec<String>) -> Unfinished {
        Unfinished {
            left: pods.into_iter().collect(),
            listing: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    /// A (re)list begins.
    fn listing(&mut self) {
        self.listing = Some(Default::default());
    }

    /// Pod `name` as a list or an event shows it.
    fn seen(&mut self, name: &str, finished: bool) {
        if let Some(l) = &mut self.listing {
            l.insert(name.to_string());
        }
        if finished {
            self.left.remove(name);
        }
    }

    /// The list is complete: the pods it did not hold are gone.
    fn listed(&mut self) {
        if let Some(l) = self.listing.take() {
            self.left.retain(|n| l.contains(n));
        }
    }

    fn into_names(self) -> Vec<String> {
        self.left.into_iter().collect()
    }
}

/// After `finish {0}`: waits until the API shows the pod of each told worker finished, and
/// the pods of the workers that went away (`lost`: evicted or deleted, still ending) too,
/// within [`WORKER_EXIT_WAIT`]; meanwhile it logs when every told worker's agent has closed
/// its connection (it exits at once). Only logs what it cannot confirm.
async fn wait_workers_finished(
    namespace: &str,
    selector: &str,
    told: Vec<(LaunchTarget, FramedConn<TcpStream>)>,
    lost: Vec<String>,
) {
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::now() + WORKER_EXIT_WAIT;
    let mut pods: Vec<String> = told.iter().map(|(t, _)| t.pod.clone()).collect();
    pods.extend(lost);
    let closed = async {
        futures::future::join_all(told.into_iter().map(|(t, mut conn)| async move {
            // Anything but a frame means the connection ended.
            loop {
                match tokio::time::timeout_at(
                    deadline,
                    crate::protocol::recv_frame(&mut conn, None),
                )
                .await
                {
                    Ok(Ok(_)) => continue,
                    Ok(Err(_)) => return,
                    Err(_) => {
                        warn!(pod = %t.pod, "batch launcher: a worker's agent did not exit within {WORKER_EXIT_WAIT:?} of being told the job succeeded");
                        return;
                    }
                }
            }
        }))
        .await;
        info!(
            waited_ms = t0.elapsed().as_millis() as u64,
            "batch launcher: every told worker's agent has closed its connection"
        );
    };
    // The same client configuration as discovery: $KUBECONFIG, else in-cluster. The watch
    // starts at once: its list is done by the time the agents have exited.
    let finished = wait_pods_finished(None, namespace, selector, pods, WORKER_EXIT_WAIT);
    let mut finished = std::pin::pin!(finished);
    let finished = tokio::select! {
        // Every pod finished: whatever connection is still open no longer matters.
        r = &mut finished => r,
        () = closed => finished.await,
    };
    match finished {
        Ok(left) if left.is_empty() => {
            info!(
                waited_ms = t0.elapsed().as_millis() as u64,
                "batch launcher: every worker pod is finished"
            )
        }
        Ok(left) => {
            warn!(pods = ?left, "batch launcher: worker pods not shown finished within {WORKER_EXIT_WAIT:?}; exiting anyway")
        }
        Err(e) => {
            warn!(error = %e, "batch launcher: cannot check that the worker pods finished; exiting anyway")
        }
    }
}

/// Attaches to the agents of `peers`; those it cannot attach to are logged and left out (they
/// give up by themselves).
async fn attach_all(peers: Vec<LaunchTarget>, config: &AgentConfig) -> Vec<Attached> {
    let opts = LaunchOptions {
        secret: config.secret.clone(),
        connect_timeout: PEER_TIMEOUT,
        request_timeout: PEER_TIMEOUT,
        ..Default::default()
    };
    let attempts = futures::future::join_all(peers.into_iter().map(|t| attach_one(t, &opts))).await;
    let mut links = Vec::new();
    for a in attempts {
        match a {
            Ok(l) => links.push(l),
            Err(e) => {
                warn!(error = %e, "batch launcher: cannot attach to a worker's agent; it will give up by itself")
            }
        }
    }
    links
}

/// Runs the command; returns its status and the pods of the workers whose agents went away
/// meanwhile.
async fn run_watching(
    command: &[String],
    config: &AgentConfig,
    alloc: Option<&Allocation>,
    reaper: &Reaper,
    stop: &CancellationToken,
    links: &mut [Attached],
) -> (i32, Vec<String>) {
    let lost: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let code = {
        // While the command runs, notice a worker whose agent goes away: a worker sends nothing
        // unasked but `pong`s, so any end of its connection means its pod was evicted, deleted
        // or killed, and its silence that its pod is cut off.
        let beat = heartbeat();
        let watch = async {
            futures::future::join_all(links.iter_mut().map(|l| {
                let lost = &lost;
                async move {
                    let why = beat_until_gone(l, beat).await;
                    warn!(pod = %l.target.pod, %why, "batch launcher: a worker's agent went away while the job's command runs");
                    lost.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(l.target.pod.clone());
                }
            }))
            .await;
            std::future::pending::<()>().await
        };
        tokio::select! {
            c = run_command(command, config, alloc, reaper, stop) => c,
            () = watch => unreachable!("the watch never ends"),
        }
    };
    (code, lost.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// The batch launcher's heartbeats: `PRTE_MCA_plm_k8s_heartbeat_*` (the site's parameter
/// file sets no environment, so the defaults unless the pod's environment sets them).
fn heartbeat() -> Heartbeat {
    Heartbeat::from_env(&|k| std::env::var(k).ok()).unwrap_or_else(|e| {
        warn!(error = %e, "batch launcher: using the default heartbeats");
        Heartbeat::default()
    })
}

/// Pings the attached worker every interval and returns why it is gone: its connection ended,
/// or it was silent for longer than `beat` allows (its pod cut off from the network).
async fn beat_until_gone(l: &mut Attached, beat: Heartbeat) -> String {
    let mut beats = HeartbeatSender::start(beat);
    loop {
        tokio::select! {
            biased;
            frame = crate::protocol::recv_frame(&mut l.conn, None) => match frame {
                // Every frame is opened, so the session stays in step for `finish`.
                Ok(f) => match l.session.open(&f) {
                    Ok(_) => beats.heard(),
                    Err(e) => return format!("it sent a frame that does not open: {e}"),
                },
                Err(_) => return "its connection ended (its pod evicted, deleted or killed?)".into(),
            },
            _ = beats.due() => match beats.beat(&mut l.conn, &mut l.session, PEER_TIMEOUT).await {
                Ok(()) => {}
                Err(e @ Lost::Silent(_)) => {
                    return format!("it was {e}: its pod is cut off from the network, stopped or stalled")
                }
                Err(Lost::Send(_)) => {
                    return "a heartbeat could not be sent (its connection ended)".into()
                }
            },
        }
    }
}

/// Sends `finish {code}` to every attached worker; returns the told ones and their connections
/// (the others are logged).
async fn finish_all(links: Vec<Attached>, code: i32) -> Vec<(LaunchTarget, FramedConn<TcpStream>)> {
    let results = futures::future::join_all(links.into_iter().map(|l| finish_one(l, code))).await;
    let mut told = Vec::new();
    for r in results {
        match r {
            Ok(t) => told.push(t),
            Err((t, e)) => {
                warn!(pod = %t.pod, error = %e, "batch launcher: cannot tell a worker that the job ended")
            }
        }
    }
    told
}

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
    let (code, lost) = run_watching(
        &command,
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
    if code == 0 && !(told.is_empty() && lost.is_empty()) {
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

/// Runs the command to its end (or until `stop`); its status as a shell reports it.
async fn run_command(
    command: &[String],
    config: &AgentConfig,
    alloc: Option<&Allocation>,
    reaper: &Reaper,
    stop: &CancellationToken,
) -> i32 {
    let Some((exe, args)) = command.split_first() else {
        return 127;
    };
    let hosts = alloc.map(Allocation::hosts);
    let mut cmd = launcher_command(exe, args, config, hosts.as_deref());
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
    let (pid, exit_rx) = match reaper.spawn(&mut cmd) {
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
    shell_status(status)
}

#[cfg(test)]
mod tests {
    use super::Unfinished;

    #[test]
    fn a_pod_is_left_until_it_is_seen_finished_or_gone() {
        let mut u = Unfinished::new(vec!["w-1".into(), "w-2".into(), "w-3".into()]);
        u.listing();
        u.seen("w-1", true);
        u.seen("w-2", false);
        // w-3 is not in the list: it is gone.
        u.listed();
        assert_eq!(names_of(&u), ["w-2"]);
        u.seen("w-2", false);
        assert!(!u.is_empty());
        u.seen("w-2", true);
        assert!(u.is_empty());
        assert!(u.into_names().is_empty());
    }

    #[test]
    fn a_relist_forgets_only_pods_it_does_not_hold() {
        let mut u = Unfinished::new(vec!["w-1".into(), "w-2".into()]);
        // Events outside a list do not make the pods they do not name gone.
        u.seen("w-1", false);
        u.listed();
        assert_eq!(names_of(&u), ["w-1", "w-2"]);
        // A relist that holds w-2 only: w-1 was deleted meanwhile.
        u.listing();
        u.seen("w-2", false);
        u.listed();
        assert_eq!(u.into_names(), ["w-2"]);
    }

    fn names_of(u: &Unfinished) -> Vec<&str> {
        u.left.iter().map(String::as_str).collect()
    }
}
