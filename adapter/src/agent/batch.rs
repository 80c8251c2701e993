//! Batch mode (`prrte-k8s-agent --run -- mpirun -n 8 ./app`): the job is one command, and the
//! Kubernetes Job ends when it does.
//!
//! * **The launcher** (the agent of the pod with index 0, or `--batch-role launcher`) waits
//!   until its pod is ready, finds the job's other pods as `ras k8s` does (bounded by
//!   `--pods-timeout`; on failure it runs the command anyway and only logs why the others cannot
//!   be told), opens one authenticated connection to every other pod's agent and sends `attach`
//!   on it, then runs the command in its own process group with the agent's environment
//!   (plus `TMPDIR` and the secret file for the k8s PLM), stdin from `/dev/null` and
//!   stdout/stderr shared with the agent: they are the pod's log. When the command ends, it
//!   sends `finish {code}` on every attached connection (bounded), and the agent exits with
//!   the command's status (128 + N for a signal N). A SIGTERM to the agent stops the command's
//!   group (SIGTERM, SIGKILL after `--kill-grace`) and is reported the same way.
//! * **A worker** (every other agent) serves prted launches as usual and exits:
//!   - on `finish {code}`: at once with 0 if the command succeeded; otherwise with `code` after
//!     [`FAIL_DELAY`], so that the launcher pod's own failure (and its exit code) is what fails
//!     the Job;
//!   - when the launcher's attached connection ends without `finish` (its pod was evicted or
//!     killed): with 1 after [`LINK_GRACE`];
//!   - when no launcher attached within `--launcher-wait` seconds: with 1.
//!
//!   So a worker never waits forever, even without a Job controller to end it.
//!
//! While the command runs, the launcher notices a worker whose agent goes away (its attached
//! connection ends: the pod was evicted, deleted or killed). If the command then fails (mpirun
//! has lost a daemon), the launcher waits [`LOST_PEER_DELAY`] before it tells the other workers
//! and exits, so that the Job controller first sees the disrupted pod (and fails the Job for
//! its `DisruptionTarget`, naming it) rather than this pod's exit status, which is only a
//! consequence.
//!
//! After a successful command the launcher exits only once every told worker's pod is finished
//! (its connection closed and the pod's phase `Succeeded` or `Failed` in the API, bounded by
//! [`WORKER_EXIT_WAIT`]): with `successPolicy` on index 0 the Job controller stops every pod
//! still running when pod 0 succeeds, so a worker that exited a moment after pod 0 would be
//! deleted instead of being shown `Completed`.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::config::AgentConfig;
use super::process::{ExitStatus, Job, Reaper};
use crate::discovery::{self, DiscoveryConfig};
use crate::launch::{
    agent_name, connect_authenticated, recv_reply, send_request, LaunchOptions, LaunchTarget,
};
use crate::protocol::{FramedConn, Reply, Request, Session};

/// How long a worker whose launcher connection ended without `finish` waits before exiting.
pub const LINK_GRACE: Duration = Duration::from_secs(10);
/// How long a worker told that the command failed waits before exiting with its code.
pub const FAIL_DELAY: Duration = Duration::from_secs(3);
/// Bound on each connect, `attach` and `finish` exchange of the launcher.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// When the command failed after a worker's agent went away, how long the launcher waits before
/// it tells the others and exits (see the module documentation).
pub const LOST_PEER_DELAY: Duration = Duration::from_secs(5);
/// After a successful command, how long the launcher waits for the workers' pods to be
/// finished before it exits itself (see [`wait_workers_finished`]).
pub const WORKER_EXIT_WAIT: Duration = Duration::from_secs(20);

/// What a worker knows about its launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// No launcher has attached yet.
    Waiting,
    /// The launcher's connection `conn` (from `peer`) is attached.
    Attached { conn: u64, peer: SocketAddr },
    /// The attached connection ended without `finish`.
    Lost { peer: SocketAddr },
    /// The launcher said the command ended with `code`.
    Finished { code: i32 },
}

/// Batch state shared by the agent's tasks.
pub struct BatchState {
    link: watch::Sender<Link>,
    /// Cancelled when the agent should exit (with `exit_code`).
    done: CancellationToken,
    exit_code: Mutex<Option<i32>>,
}

impl Default for BatchState {
    fn default() -> Self {
        BatchState {
            link: watch::channel(Link::Waiting).0,
            done: CancellationToken::new(),
            exit_code: Mutex::new(None),
        }
    }
}

impl BatchState {
    /// Completes when the agent should exit.
    pub fn done(&self) -> CancellationToken {
        self.done.clone()
    }

    /// The exit status batch mode decided on, if any.
    pub fn exit_code(&self) -> Option<i32> {
        *self.exit_code.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn exit(&self, code: i32) {
        self.exit_code
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(code);
        self.done.cancel();
    }

    /// The worker's current view of its launcher.
    pub fn link(&self) -> Link {
        self.link.borrow().clone()
    }

    /// Handles `attach` from connection `conn`.
    pub fn attach(&self, config: &AgentConfig, conn: u64, peer: SocketAddr) -> (Reply, String) {
        match &config.batch {
            Some(super::BatchConfig::Worker { .. }) => {}
            _ => return not_a_worker(config, "attach"),
        }
        let mut refused = None;
        self.link.send_modify(|l| match l {
            Link::Finished { .. } => refused = Some("the job has already finished".to_owned()),
            _ => *l = Link::Attached { conn, peer },
        });
        match refused {
            Some(reason) => (
                Reply::Failed {
                    reason: reason.clone(),
                },
                format!("refused: {reason}"),
            ),
            None => {
                info!(%peer, "the batch launcher attached; waiting for the job's command to end");
                (Reply::Ack {}, "attached".to_owned())
            }
        }
    }

    /// Handles `finish {code}` from connection `conn`.
    pub fn finish(&self, config: &AgentConfig, peer: SocketAddr, code: i32) -> (Reply, String) {
        match &config.batch {
            Some(super::BatchConfig::Worker { .. }) => {}
            _ => return not_a_worker(config, "finish"),
        }
        info!(%peer, code, "the job's command ended; this agent exits");
        self.link.send_modify(|l| {
            if !matches!(l, Link::Finished { .. }) {
                *l = Link::Finished { code }
            }
        });
        (
            Reply::Ack {},
            format!("finishing (command exit status {code})"),
        )
    }

    /// A connection ended: if it was the attached launcher's, the launcher is lost.
    pub fn connection_closed(&self, conn: u64) {
        self.link.send_if_modified(|l| match *l {
            Link::Attached { conn: c, peer } if c == conn => {
                *l = Link::Lost { peer };
                true
            }
            _ => false,
        });
    }
}

fn not_a_worker(config: &AgentConfig, what: &str) -> (Reply, String) {
    let reason = match &config.batch {
        None => {
            format!("this agent does not run in batch mode (--run); `{what}` is for batch workers")
        }
        Some(_) => format!("this agent is the batch launcher; `{what}` is for batch workers"),
    };
    (
        Reply::Failed {
            reason: reason.clone(),
        },
        format!("refused: {reason}"),
    )
}

/// The exit status of a process as a shell reports it (128 + N for signal N).
pub fn shell_status(status: ExitStatus) -> i32 {
    match status {
        ExitStatus::Code(c) => c,
        ExitStatus::Signal(s) => 128 + s,
    }
}

/// The agent's process exit code for a batch status (outside 0..=255: 1).
pub fn process_exit_code(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}

/// A worker: exits on `finish`, a lost launcher, or no launcher within `launcher_wait`.
pub async fn run_worker(batch: Arc<BatchState>, launcher_wait: Duration, stop: CancellationToken) {
    let mut rx = batch.link.subscribe();
    let wait_until = tokio::time::Instant::now() + launcher_wait;
    loop {
        let link = rx.borrow_and_update().clone();
        match link {
            Link::Waiting => {
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = tokio::time::sleep_until(wait_until) => {
                        error!("no batch launcher attached within {launcher_wait:?} (--launcher-wait): the agent of the pod with index 0 never ran the job's command here, or its pod is gone; exiting with status 1");
                        batch.exit(1);
                        return;
                    }
                    _ = stop.cancelled() => return,
                }
            }
            Link::Attached { .. } => {
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = stop.cancelled() => return,
                }
            }
            Link::Lost { peer } => {
                warn!(%peer, "the batch launcher's connection ended without word of the job's end; exiting in {LINK_GRACE:?} unless it comes");
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = tokio::time::sleep(LINK_GRACE) => {
                        error!(%peer, "the batch launcher went away (its pod was evicted, deleted or killed?) without saying how the job ended; exiting with status 1");
                        batch.exit(1);
                        return;
                    }
                    _ = stop.cancelled() => return,
                }
            }
            Link::Finished { code } => {
                if code != 0 {
                    // Let the launcher pod's failure be the one that fails the Job.
                    tokio::select! {
                        _ = tokio::time::sleep(FAIL_DELAY) => {}
                        _ = stop.cancelled() => {}
                    }
                }
                batch.exit(code);
                return;
            }
        }
    }
}

/// One attached worker agent.
struct Attached {
    target: LaunchTarget,
    conn: FramedConn<TcpStream>,
    session: Session,
}

async fn attach_one(target: LaunchTarget, opts: &LaunchOptions) -> Result<Attached, String> {
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
        Reply::Failed { reason } | Reply::Error { reason } => {
            Err(format!("{who} refused attach: {reason}"))
        }
        other => Err(format!("{who} answered attach with {other:?}")),
    }
}

async fn finish_one(
    mut a: Attached,
    code: i32,
) -> Result<(LaunchTarget, FramedConn<TcpStream>), (LaunchTarget, String)> {
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
                    return Err(format!("{who} refused finish: {reason}"))
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

/// Finds the other pods of the job (bounded), as `ras k8s` does; also their namespace.
async fn find_peers(
    config: &AgentConfig,
    timeout: Duration,
) -> Result<(String, Vec<LaunchTarget>), String> {
    let cfg = DiscoveryConfig {
        timeout,
        ..Default::default()
    };
    let bound = timeout + Duration::from_secs(5);
    let alloc = match tokio::time::timeout(bound, discovery::discover(&cfg)).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no answer within {bound:?}")),
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
    Ok((alloc.namespace, targets))
}

/// Waits (at most `limit`) until every pod in `pods` of `namespace` is finished: phase
/// `Succeeded` or `Failed`, or gone. Returns the pods still not finished.
pub async fn wait_pods_finished(
    kubeconfig: Option<&std::path::Path>,
    namespace: &str,
    mut pods: Vec<String>,
    limit: Duration,
) -> Result<Vec<String>, String> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    let deadline = tokio::time::Instant::now() + limit;
    let api = tokio::time::timeout_at(
        deadline,
        crate::discovery::client::connect(kubeconfig, PEER_TIMEOUT),
    )
    .await
    .map_err(|_| format!("no Kubernetes API client within {limit:?}"))?
    .map_err(|e| e.to_string())?;
    let pods_api: Api<Pod> = Api::namespaced(api.client, namespace);
    loop {
        let mut left = Vec::new();
        for name in pods {
            let finished = match tokio::time::timeout_at(deadline, pods_api.get_opt(&name)).await {
                Ok(Ok(None)) => true,
                Ok(Ok(Some(p))) => matches!(
                    p.status.and_then(|s| s.phase).as_deref(),
                    Some("Succeeded" | "Failed")
                ),
                // An API error or the deadline: try again (or give up below).
                Ok(Err(_)) | Err(_) => false,
            };
            if !finished {
                left.push(name);
            }
        }
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(left);
        }
        pods = left;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// After `finish {0}`: waits until each told worker's agent has closed its connection (it
/// exits at once) and then until the API shows its pod finished, all within
/// [`WORKER_EXIT_WAIT`]. Only logs what it cannot confirm.
async fn wait_workers_finished(namespace: &str, told: Vec<(LaunchTarget, FramedConn<TcpStream>)>) {
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::now() + WORKER_EXIT_WAIT;
    let pods: Vec<String> = told.iter().map(|(t, _)| t.pod.clone()).collect();
    futures::future::join_all(told.into_iter().map(|(t, mut conn)| async move {
        // Anything but a frame means the connection ended.
        loop {
            match tokio::time::timeout_at(deadline, crate::protocol::recv_frame(&mut conn, None))
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
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    // The same client configuration as discovery: $KUBECONFIG, else in-cluster.
    match wait_pods_finished(None, namespace, pods, left).await {
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

/// The launcher: attach to the other agents, run the command, tell them how it ended.
pub async fn run_launcher(
    config: AgentConfig,
    reaper: Arc<Reaper>,
    health: Option<SocketAddr>,
    batch: Arc<BatchState>,
    stop: CancellationToken,
) {
    let Some(super::BatchConfig::Launcher {
        command,
        pods_timeout,
        reason,
    }) = config.batch.clone()
    else {
        return;
    };
    super::head::wait_health(health, &stop).await;
    if stop.is_cancelled() {
        batch.exit(143);
        return;
    }
    info!(%reason, "batch launcher: waiting for the job's pods");
    let peers = tokio::select! {
        p = find_peers(&config, pods_timeout) => p,
        _ = stop.cancelled() => { batch.exit(143); return; }
    };
    let (namespace, peers) = match peers {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "batch launcher: cannot find the job's other pods; running the command anyway, but their agents will not be told when it ends (they give up after --launcher-wait)");
            (String::new(), Vec::new())
        }
    };
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
    info!(workers = links.len(), command = ?command, "batch launcher: running the job's command");
    let lost: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let code = {
        // While the command runs, notice a worker whose agent goes away: a worker sends nothing
        // unasked, so any end of its connection means its pod was evicted, deleted or killed.
        let watch = async {
            futures::future::join_all(links.iter_mut().map(|l| {
                let lost = &lost;
                async move {
                    while crate::protocol::recv_frame(&mut l.conn, None).await.is_ok() {}
                    warn!(pod = %l.target.pod, "batch launcher: a worker's agent went away while the job's command runs (its pod evicted, deleted or killed?)");
                    lost.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(l.target.pod.clone());
                }
            }))
            .await;
            std::future::pending::<()>().await
        };
        tokio::select! {
            c = run_command(&command, &config, &reaper, &stop) => c,
            () = watch => unreachable!("the watch never ends"),
        }
    };
    let lost = lost.into_inner().unwrap_or_else(|p| p.into_inner());
    links.retain(|l| !lost.contains(&l.target.pod));
    if code != 0 && !lost.is_empty() {
        warn!(code, pods = ?lost, "batch launcher: the command failed after worker pods went away; waiting {LOST_PEER_DELAY:?} before telling the others and exiting, so that their disruption, not this pod's exit status, is what fails the Job");
        tokio::select! {
            _ = tokio::time::sleep(LOST_PEER_DELAY) => {}
            _ = stop.cancelled() => {}
        }
    }
    let n = links.len();
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
    info!(
        code,
        told = told.len(),
        workers = n,
        "batch launcher: the job's command ended"
    );
    if code == 0 && !told.is_empty() {
        tokio::select! {
            _ = wait_workers_finished(&namespace, told) => {}
            _ = stop.cancelled() => {}
        }
    }
    info!(code, "batch launcher: exiting with the command's status");
    batch.exit(code);
}

/// Runs the command to its end (or until `stop`); its status as a shell reports it.
async fn run_command(
    command: &[String],
    config: &AgentConfig,
    reaper: &Reaper,
    stop: &CancellationToken,
) -> i32 {
    let Some((exe, args)) = command.split_first() else {
        return 127;
    };
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("TMPDIR", &config.tmpdir)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .process_group(0);
    for (name, value) in config.launcher_env(|k| std::env::var_os(k).is_some()) {
        cmd.env(name, value);
    }
    // The job's launcher allocates and launches through the Kubernetes components. Set here,
    // for this command only, never in the pod's environment: every prted inherits that, and a
    // prted told to use `plm k8s` (which only the launcher can select) has no PLM and exits.
    // prterun itself never forwards `plm` to the daemons it starts.
    for (name, value) in [("PRTE_MCA_ras", "k8s"), ("PRTE_MCA_plm", "k8s")] {
        if std::env::var_os(name).is_none() {
            cmd.env(name, value);
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
    use super::*;

    #[test]
    fn statuses_as_a_shell_reports_them() {
        assert_eq!(shell_status(ExitStatus::Code(3)), 3);
        assert_eq!(shell_status(ExitStatus::Signal(9)), 137);
        assert_eq!(process_exit_code(3), 3);
        assert_eq!(process_exit_code(300), 1);
        assert_eq!(process_exit_code(-1), 1);
    }

    #[test]
    fn link_state_follows_attach_close_and_finish() {
        let d = tempfile::tempdir().unwrap();
        let mut config = test_config(d.path());
        let b = BatchState::default();
        let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        // Not in batch mode: refused.
        assert!(matches!(b.attach(&config, 1, peer).0, Reply::Failed { .. }));
        config.batch = Some(super::super::BatchConfig::Worker {
            launcher_wait: Duration::from_secs(1),
        });
        assert_eq!(b.attach(&config, 1, peer).0, Reply::Ack {});
        assert_eq!(b.link(), Link::Attached { conn: 1, peer });
        b.connection_closed(2);
        assert_eq!(
            b.link(),
            Link::Attached { conn: 1, peer },
            "another connection"
        );
        b.connection_closed(1);
        assert_eq!(b.link(), Link::Lost { peer });
        assert_eq!(b.finish(&config, peer, 3).0, Reply::Ack {});
        assert_eq!(b.link(), Link::Finished { code: 3 });
        assert!(matches!(b.attach(&config, 3, peer).0, Reply::Failed { .. }));
        b.finish(&config, peer, 0);
        assert_eq!(
            b.link(),
            Link::Finished { code: 3 },
            "the first word counts"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn worker_exits_on_finish_lost_launcher_or_none() {
        let stop = CancellationToken::new();
        let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        // Finished with success: at once, 0.
        let b = Arc::new(BatchState::default());
        b.link.send_replace(Link::Finished { code: 0 });
        run_worker(b.clone(), Duration::from_secs(600), stop.clone()).await;
        assert_eq!(b.exit_code(), Some(0));
        // Finished with failure: after the delay, with the code.
        let b = Arc::new(BatchState::default());
        b.link.send_replace(Link::Finished { code: 3 });
        let t0 = tokio::time::Instant::now();
        run_worker(b.clone(), Duration::from_secs(600), stop.clone()).await;
        assert_eq!(b.exit_code(), Some(3));
        assert!(t0.elapsed() >= FAIL_DELAY);
        // Launcher lost: 1 after the grace period.
        let b = Arc::new(BatchState::default());
        b.link.send_replace(Link::Lost { peer });
        let t0 = tokio::time::Instant::now();
        run_worker(b.clone(), Duration::from_secs(600), stop.clone()).await;
        assert_eq!(b.exit_code(), Some(1));
        assert!(t0.elapsed() >= LINK_GRACE && t0.elapsed() < LINK_GRACE * 2);
        // Nobody attached: 1 after launcher_wait.
        let b = Arc::new(BatchState::default());
        let t0 = tokio::time::Instant::now();
        run_worker(b.clone(), Duration::from_secs(42), stop.clone()).await;
        assert_eq!(b.exit_code(), Some(1));
        assert!(t0.elapsed() >= Duration::from_secs(42));
        // Attached, then finish arrives later.
        let b = Arc::new(BatchState::default());
        b.link.send_replace(Link::Attached { conn: 1, peer });
        let w = tokio::spawn(run_worker(b.clone(), Duration::from_secs(1), stop.clone()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            b.exit_code(),
            None,
            "an attached worker waits past launcher_wait"
        );
        b.link.send_replace(Link::Finished { code: 0 });
        w.await.unwrap();
        assert_eq!(b.exit_code(), Some(0));
    }

    fn test_config(dir: &std::path::Path) -> AgentConfig {
        AgentConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            health_listen: None,
            prted: "/bin/true".into(),
            secret: None,
            secret_file: "/nonexistent".into(),
            tmpdir: dir.to_owned(),
            kill_grace: Duration::from_secs(1),
            max_frame: 4096,
            pass_env: vec![],
            dvm_uri_file: dir.join("dvm.uri"),
            head: None,
            batch: None,
            cgroup: false,
            limits: Default::default(),
        }
    }
}
