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
//! An agent whose pod is told to end (SIGTERM or SIGINT) before the job ended exits with 128 +
//! the signal even when the command, holding on through the preemption notice, then succeeds:
//! a preempted run is not the Job's success, and its pod ends `Failed`, so the Job's pod
//! failure policy fails the Job for the pod's `DisruptionTarget` (and a JobSet restarts it).
//!
//! While the command runs, the launcher notices a worker whose agent goes away (its attached
//! connection ends: the pod was evicted, deleted or killed). If the command then fails (mpirun
//! has lost a daemon), the launcher waits
//! [`LOST_PEER_DELAY`](super::batch_launcher::LOST_PEER_DELAY) before it tells the other workers
//! and exits, so that the Job controller first sees the disrupted pod (and fails the Job for
//! its `DisruptionTarget`, naming it) rather than this pod's exit status, which is only a
//! consequence.
//!
//! After a successful command the launcher exits only once every told worker's pod is finished
//! (its connection closed and the pod's phase `Succeeded` or `Failed` in the API, bounded by
//! [`WORKER_EXIT_WAIT`](super::batch_launcher::WORKER_EXIT_WAIT)): with `successPolicy` on
//! index 0 the Job controller stops every pod still running when pod 0 succeeds, so a worker
//! that exited a moment after pod 0 would be deleted instead of being shown `Completed`. It
//! waits the same way for the pod of every worker that went away while the command ran (told
//! to end, so ending `Failed`): the Job must see that failure before pod 0's success.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::checked_config::{AgentConfig, BatchConfig};
use super::exit_status::ExitStatus;
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

    pub(super) fn exit(&self, code: i32) {
        self.exit_code
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(code);
        self.done.cancel();
    }

    /// The job's command ended with `code`, the agent's exit status unless one was decided
    /// already; the agent exits later ([`BatchState::exit`]).
    pub(super) fn decide(&self, code: i32) {
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
        info!(%peer, code, "the job's command ended; this agent exits");
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

/// A worker: exits on `finish`, a lost launcher, or no launcher within `launcher_wait`.
pub(crate) async fn run_worker(
    batch: Arc<BatchState>,
    launcher_wait: Duration,
    stop: CancellationToken,
) {
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
        config.batch = Some(BatchConfig::Worker {
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

    #[test]
    fn a_pod_told_to_end_before_the_job_ended_does_not_succeed() {
        // Told to end while the command runs: its later success does not count.
        let b = BatchState::default();
        assert!(b.told_to_end(15));
        assert!(!b.done().is_cancelled(), "the command is not stopped by it");
        b.exit(0);
        assert_eq!(b.exit_code(), Some(143));
        // Told to end once the job had ended: its status stays.
        let b = BatchState::default();
        b.exit(0);
        assert!(!b.told_to_end(15));
        assert_eq!(b.exit_code(), Some(0));
        // ... also while the agent still waits to exit after the command's end.
        let b = BatchState::default();
        b.decide(0);
        assert!(!b.done().is_cancelled());
        assert!(!b.told_to_end(15));
        b.exit(0);
        assert_eq!(b.exit_code(), Some(0));
        let b = BatchState::default();
        assert!(b.told_to_end(2));
        assert_eq!(b.exit_code(), Some(130));
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
            metrics_listen: None,
            prted: "/bin/true".into(),
            secret: None,
            secret_file: "/nonexistent".into(),
            tmpdir: dir.to_owned(),
            kill_grace: Duration::from_secs(1),
            preempt_grace: Duration::ZERO,
            max_frame: 4096,
            pass_env: vec![],
            dvm_uri_file: dir.join("dvm.uri"),
            head: None,
            batch: None,
            cgroup: false,
            limits: Default::default(),
            heartbeat_timeout: None,
            mpi: None,
        }
    }
}
