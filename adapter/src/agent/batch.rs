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
//!     `FAIL_DELAY`, so that the launcher pod's own failure (and its exit code) is what fails
//!     the Job;
//!   - when the launcher's attached connection ends without `finish` (its pod was evicted or
//!     killed): with 1 after `LINK_GRACE`;
//!   - when no launcher attached within `--launcher-wait` seconds: with 1.
//!
//!   So a worker never waits forever, even without a Job controller to end it. With
//!   `--workers-stay` (an MPIJob's `cleanPodPolicy: None`) a worker told `finish` goes on
//!   serving instead, until its pod is told to end (then it exits with the command's status),
//!   and the launcher does not wait for the workers' pods to finish.
//!
//! An agent whose pod is told to end (SIGTERM or SIGINT) before the job ended exits with 128 +
//! the signal even when the command, holding on through the preemption notice, then succeeds:
//! a preempted run is not the Job's success, and its pod ends `Failed`, so the Job's pod
//! failure policy fails the Job for the pod's `DisruptionTarget` (and a JobSet restarts it).
//!
//! While the command runs, the launcher notices a worker whose agent goes away (its attached
//! connection ends: the pod was evicted, deleted or killed). If the command then fails (mpirun
//! has lost a daemon), the launcher waits
//! `crate::launch::batch::LOST_PEER_DELAY` before it tells the other workers
//! and exits, so that the Job controller first sees the disrupted pod (and fails the Job for
//! its `DisruptionTarget`, naming it) rather than this pod's exit status, which is only a
//! consequence.
//!
//! After a successful command the launcher exits only once every told worker's pod is finished
//! (its connection closed and the pod's phase `Succeeded` or `Failed` in the API, bounded by
//! `crate::launch::batch::pods::WORKER_EXIT_WAIT`): with `successPolicy` on
//! index 0 the Job controller stops every pod still running when pod 0 succeeds, so a worker
//! that exited a moment after pod 0 would be deleted instead of being shown `Completed`. It
//! waits the same way for the pod of every worker that went away while the command ran (told
//! to end, so ending `Failed`): the Job must see that failure before pod 0's success.

use std::io::{Stderr, Stdout};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::checked_config::{AgentConfig, BatchConfig};
use super::exit_status::ExitStatus;
use super::rank_output::{RankLog, Stream};
use crate::protocol::Reply;

/// How long a worker whose launcher connection ended without `finish` waits before exiting.
pub(crate) const LINK_GRACE: Duration = Duration::from_secs(10);
/// How long a worker told that the command failed waits before exiting with its code.
pub(crate) const FAIL_DELAY: Duration = Duration::from_secs(3);

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
pub(crate) struct BatchState {
    link: watch::Sender<Link>,
    /// Cancelled when the agent should exit (with `exit_code`).
    done: CancellationToken,
    exit_code: Mutex<Option<i32>>,
    /// The ranks' output the launcher sends, written to this agent's log.
    ranks: Mutex<RankLog<Stdout, Stderr>>,
}

impl Default for BatchState {
    fn default() -> Self {
        BatchState {
            link: watch::channel(Link::Waiting).0,
            done: CancellationToken::new(),
            exit_code: Mutex::new(None),
            ranks: Mutex::new(RankLog::new(std::io::stdout(), std::io::stderr())),
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

    pub(crate) fn exit(&self, code: i32) {
        self.exit_code
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(code);
        self.done.cancel();
    }

    /// The job's command ended with `code`, the agent's exit status unless one was decided
    /// already; the agent exits later ([`BatchState::exit`]).
    pub(crate) fn decide(&self, code: i32) {
        self.exit_code
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(code);
    }

    /// The agent's pod is told to end (the signal `signum`) before the job ended: whatever the
    /// command does from now on, the agent exits with 128 + `signum`, so that the pod ends
    /// `Failed` (an evicted or preempted pod whose container exits 0 is `Succeeded`, and a
    /// preempted run would count as the Job's success). Returns whether the job had not ended
    /// yet (else its status stays).
    pub(super) fn told_to_end(&self, signum: i32) -> bool {
        let mut code = self.exit_code.lock().unwrap_or_else(|p| p.into_inner());
        if code.is_some() {
            return false;
        }
        *code = Some(128 + signum);
        true
    }

    /// The worker's current view of its launcher.
    #[cfg(test)]
    pub fn link(&self) -> Link {
        self.link.borrow().clone()
    }

    /// Handles `attach` from connection `conn`.
    pub fn attach(&self, config: &AgentConfig, conn: u64, peer: SocketAddr) -> (Reply, String) {
        match &config.batch {
            Some(BatchConfig::Worker { .. }) => {}
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
            Some(BatchConfig::Worker { .. }) => {}
            _ => return not_a_worker(config, "finish"),
        }
        info!(%peer, code, "the job's command ended");
        // Every rank's output came before `finish` on this connection: its unfinished last
        // lines are all that is left.
        self.ranks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .finish();
        self.decide(code);
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
    pub(crate) fn connection_closed(&self, conn: u64) {
        let lost = self.link.send_if_modified(|l| match *l {
            Link::Attached { conn: c, peer } if c == conn => {
                *l = Link::Lost { peer };
                true
            }
            _ => false,
        });
        if lost {
            self.ranks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .finish();
        }
    }

    /// Handles `rank_output` on a connection (`attached`: the launcher's): writes the lines of
    /// rank `rank` to this agent's log; why not, if it cannot.
    pub(crate) fn rank_output(
        &self,
        attached: bool,
        rank: u32,
        fd: u8,
        data: &str,
    ) -> Result<(), String> {
        if !attached {
            return Err("`rank_output` comes on the batch launcher's attached connection".into());
        }
        let stream = Stream::from_fd(fd).ok_or_else(|| format!("no rank output on fd {fd}"))?;
        let bytes = crate::protocol::exec::decode_data(data).map_err(|e| e.to_string())?;
        self.ranks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rank, stream, &bytes);
        Ok(())
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
pub(crate) fn shell_status(status: ExitStatus) -> i32 {
    match status {
        ExitStatus::Code(c) => c,
        ExitStatus::Signal(s) => 128 + s,
    }
}

/// The agent's process exit code for a batch status (outside 0..=255: 1).
pub(crate) fn process_exit_code(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}

/// A worker: exits on `finish` (with `stay`, only once its pod is told to end), a lost
/// launcher, or no launcher within `launcher_wait`. Meanwhile the output of the ranks that run
/// in its pod, which the launcher sends before `finish`, goes to the pod's log (see
/// [`super::rank_output`]).
pub(crate) async fn run_worker(
    batch: Arc<BatchState>,
    launcher_wait: Duration,
    stay: bool,
    stop: CancellationToken,
) {
    if let Some(code) = worker_link(&batch, launcher_wait, stay, &stop).await {
        batch.exit(code);
    }
}

/// Follows the launcher's link to its end: the agent's exit status, or None when stopped.
async fn worker_link(
    batch: &BatchState,
    launcher_wait: Duration,
    stay: bool,
    stop: &CancellationToken,
) -> Option<i32> {
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
                        return Some(1);
                    }
                    _ = stop.cancelled() => return None,
                }
            }
            Link::Attached { .. } => {
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = stop.cancelled() => return None,
                }
            }
            Link::Lost { peer } => {
                warn!(%peer, "the batch launcher's connection ended without word of the job's end; exiting in {LINK_GRACE:?} unless it comes");
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = tokio::time::sleep(LINK_GRACE) => {
                        error!(%peer, "the batch launcher went away (its pod was evicted, deleted or killed?) without saying how the job ended; exiting with status 1");
                        return Some(1);
                    }
                    _ = stop.cancelled() => return None,
                }
            }
            Link::Finished { code } if stay => {
                info!(code, "the job's command ended; this agent stays up until its pod is deleted (--workers-stay)");
                stop.cancelled().await;
                return Some(code);
            }
            Link::Finished { code } => {
                if code != 0 {
                    // Let the launcher pod's failure be the one that fails the Job.
                    tokio::select! {
                        _ = tokio::time::sleep(FAIL_DELAY) => {}
                        _ = stop.cancelled() => {}
                    }
                }
                return Some(code);
            }
        }
    }
}

#[cfg(test)]
mod tests;
