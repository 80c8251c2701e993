//! A pod being deleted, as the kubelet stops it: its containers get SIGTERM (the regular and
//! init containers first, the native sidecars once those have ended) and the pod's grace
//! period to end; whatever still runs when it is over gets SIGKILL. Nothing starts or restarts
//! meanwhile. The pod ends Succeeded if every regular container exited 0, else Failed.

use super::container_status::State;
use super::containers::Kind;
use super::worker::Worker;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

impl Worker<'_> {
    /// The pod is being deleted with grace period `grace` (seconds): a first call stops its
    /// containers, a later one can only bring the SIGKILL forward.
    pub(super) fn terminate(&mut self, grace: i64) {
        let by = Instant::now() + Duration::from_secs(grace.max(0) as u64);
        if let Some(old) = self.stop_by {
            self.stop_by = Some(old.min(by));
            return;
        }
        self.stop_by = Some(by);
        self.terminal = true;
        for sup in &mut self.sup {
            (sup.due, sup.next_readiness, sup.next_startup) = (None, None, None);
        }
        self.stop(false);
    }

    /// SIGTERM to the running sidecars (`sidecars`) or to the other running containers, the
    /// last first.
    fn stop(&mut self, sidecars: bool) {
        for i in (0..self.cs.len()).rev() {
            let c = &self.pod.containers[i];
            if (c.kind == Kind::Sidecar) != sidecars || !self.cs[i].is_running() {
                continue;
            }
            self.ctx.event(
                "Normal",
                "Killing",
                &format!("Stopping container {}", c.name),
            );
            if let Err(e) = self.sandbox.signal_container(&c.name, Signal::SIGTERM) {
                tracing::warn!(pod = %self.ctx.name, "SIGTERM to container {}: {e:#}", c.name);
            }
        }
    }

    fn any_running(&self, sidecars: bool) -> bool {
        (0..self.cs.len()).any(|i| {
            self.cs[i].is_running() && (self.pod.containers[i].kind == Kind::Sidecar) == sidecars
        })
    }

    /// While the pod is being deleted: true once none of its containers runs any more (its
    /// last status is written then).
    pub(super) fn terminated(&mut self) -> bool {
        let Some(by) = self.stop_by else {
            return false;
        };
        if !self.sidecars_stopping && !self.any_running(false) {
            self.sidecars_stopping = true;
            self.stop(true);
        }
        if Instant::now() >= by && (self.any_running(false) || self.any_running(true)) {
            let m = "the grace period is over: the containers still running are killed";
            self.ctx.event("Normal", "Killing", m);
            self.kill_running();
        }
        if self.any_running(false) || self.any_running(true) {
            return false;
        }
        let succeeded = self
            .pod
            .containers
            .iter()
            .zip(&self.cs)
            .filter(|(c, _)| c.kind == Kind::Regular)
            .all(|(_, st)| matches!(&st.state, State::Terminated(t) if t["exitCode"] == 0));
        let phase = if succeeded { "Succeeded" } else { "Failed" };
        self.write_status(Some(phase), |_, _| {});
        true
    }
}
