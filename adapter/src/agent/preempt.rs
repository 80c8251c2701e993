//! The preemption notice: when the agent's pod is told to end (SIGTERM, with the pod's
//! termination grace period, `--preempt-grace`, running) while a prted runs or a launcher
//! watches, the agent tells the launcher at once (`preempt {seconds}` on the connections that
//! launched prted or watch) and keeps prted and its ranks running until they end, the hold's
//! deadline passes or a second signal comes; then it stops them as always.
//!
//! The deadline leaves the agent its `--kill-grace` and one second more of the grace period to
//! stop everything before the kubelet's SIGKILL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// What the agent keeps of the grace period for stopping prted, besides `--kill-grace`.
const STOP_MARGIN: Duration = Duration::from_secs(1);

/// The notice's state, shared by the signal handler and the connections.
pub struct Preemption {
    /// `Some(deadline)` once the pod was told to end: the agent stops prted then.
    notice: watch::Sender<Option<Instant>>,
    /// Connections that watch (`watch` requests).
    watchers: AtomicUsize,
    /// Woken when a prted ends or a watcher goes away.
    changed: Notify,
    /// The signal that told the pod to end while its DVM was up (the agent exits 128 + it).
    told_to_end: OnceLock<i32>,
}

impl Preemption {
    pub fn new() -> Arc<Preemption> {
        Arc::new(Preemption {
            notice: watch::channel(None).0,
            watchers: AtomicUsize::new(0),
            changed: Notify::new(),
            told_to_end: OnceLock::new(),
        })
    }

    /// The pod is told to end by `signum` while its DVM is up: a prted the agent stops from now
    /// on is reported as ended by it (`exited` with `told_to_end`), not as PRRTE's own doing.
    /// The first signal counts.
    pub fn told_to_end(&self, signum: i32) {
        let _ = self.told_to_end.set(signum);
    }

    /// The signal of [`told_to_end`](Preemption::told_to_end), if the pod was told to end.
    pub fn ended_by(&self) -> Option<i32> {
        self.told_to_end.get().copied()
    }

    /// How long the agent holds prted after SIGTERM with this grace period and kill grace;
    /// `None` when there is nothing to hold for (no grace period configured, or too short).
    pub(crate) fn hold_for(grace: Duration, kill_grace: Duration) -> Option<Duration> {
        grace
            .checked_sub(kill_grace + STOP_MARGIN)
            .filter(|d| !d.is_zero())
    }

    /// Tells every connection: the agent stops prted at `deadline`.
    pub(crate) fn announce(&self, deadline: Instant) {
        self.notice.send_replace(Some(deadline));
    }

    /// The connections' view of the notice.
    pub fn subscribe(&self) -> watch::Receiver<Option<Instant>> {
        self.notice.subscribe()
    }

    /// Registers a watching connection until the guard is dropped.
    pub fn watch(self: &Arc<Self>) -> WatchGuard {
        self.watchers.fetch_add(1, Ordering::SeqCst);
        WatchGuard(self.clone())
    }

    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::SeqCst)
    }

    /// Something the hold waits for changed (a prted ended, a watcher left).
    pub(crate) fn poke(&self) {
        self.changed.notify_waiters();
    }

    /// Returns once `busy()` is false (checked at every `poke`).
    pub async fn idle(&self, busy: impl Fn() -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !busy() {
                return;
            }
            changed.await;
        }
    }
}

/// A connection's registration as a watcher.
pub(crate) struct WatchGuard(Arc<Preemption>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::SeqCst);
        self.0.poke();
    }
}

/// Whole seconds from now to `deadline` (what `preempt {seconds}` says).
pub(crate) fn seconds_left(deadline: Instant) -> u64 {
    deadline.saturating_duration_since(Instant::now()).as_secs()
}

/// Waits for the notice (its deadline); pending forever if the agent shuts down without one.
pub async fn notice(rx: &mut watch::Receiver<Option<Instant>>) -> Instant {
    let deadline = match rx.wait_for(Option::is_some).await {
        Ok(d) => *d,
        Err(_) => None,
    };
    match deadline {
        Some(d) => d,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_leaves_time_to_stop() {
        let s = Duration::from_secs;
        assert_eq!(Preemption::hold_for(s(30), s(5)), Some(s(24)));
        assert_eq!(Preemption::hold_for(s(0), s(5)), None);
        assert_eq!(Preemption::hold_for(s(6), s(5)), None);
        assert_eq!(Preemption::hold_for(s(3), s(0)), Some(s(2)));
    }

    #[tokio::test]
    async fn subscribers_see_the_deadline_and_idle_follows_watchers() {
        let p = Preemption::new();
        let mut rx = p.subscribe();
        let deadline = Instant::now() + Duration::from_secs(7);
        let g = p.watch();
        assert_eq!(p.watchers(), 1);
        p.announce(deadline);
        assert_eq!(notice(&mut rx).await, deadline);
        assert!((6..=7).contains(&seconds_left(deadline)));
        let p2 = p.clone();
        let idle = tokio::spawn(async move { p2.idle(|| p2.watchers() > 0).await });
        tokio::task::yield_now().await;
        assert!(!idle.is_finished());
        drop(g);
        tokio::time::timeout(Duration::from_secs(5), idle)
            .await
            .expect("idle once the watcher left")
            .unwrap();
    }
}
