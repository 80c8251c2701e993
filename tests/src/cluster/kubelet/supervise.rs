//! Supervising a running pod: its exit, control messages, and the readiness probe.

use super::control::Ctl;
use super::pod::{Outcome, PodCtx};
use super::probe::{Probe, Readiness};
use super::status::set_cond;
use super::sync::lock;
use crate::api::defaults::now_rfc3339;
use serde_json::json;
use std::net::Ipv4Addr;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often a running pod is checked for having exited.
const EXIT_POLL: Duration = Duration::from_millis(50);

impl PodCtx {
    /// Waits for the container to end, a control message, and runs the readiness probe.
    pub(super) fn supervise(
        &self,
        rx: &Receiver<Ctl>,
        probe: Option<&Probe>,
        ip: Ipv4Addr,
    ) -> Outcome {
        let started = Instant::now();
        let mut next_probe = probe.map(|p| started + p.initial_delay);
        let mut readiness = Readiness::new(probe);
        loop {
            let wait = match next_probe {
                Some(t) => t.saturating_duration_since(Instant::now()).min(EXIT_POLL),
                None => EXIT_POLL,
            };
            match rx.recv_timeout(wait) {
                Ok(Ctl::Delete) | Ok(Ctl::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    return Outcome::Stop
                }
                Ok(Ctl::Evict(m, done)) => return Outcome::Evicted(m, done),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let exited = lock(&self.running)
                .as_mut()
                .and_then(|rp| rp.try_wait().ok().flatten());
            if let Some(e) = exited {
                return Outcome::Exited(e);
            }
            if let (Some(p), Some(t)) = (probe, next_probe) {
                if Instant::now() >= t {
                    let pass = self.probe_once(p, ip);
                    if let Some(r) = readiness.record(p, pass) {
                        self.report_ready(r);
                    }
                    next_probe = Some(Instant::now() + p.period);
                }
            }
        }
    }

    fn probe_once(&self, p: &Probe, ip: Ipv4Addr) -> bool {
        p.check(ip, |cmd| {
            let r = lock(&self.running);
            r.as_ref().map(|rp| rp.exec(cmd, &[]))
        })
    }

    /// The container's readiness changed to `r`.
    fn report_ready(&self, r: bool) {
        self.status(|st| {
            let now = now_rfc3339();
            set_cond(st, "Ready", r, &now);
            set_cond(st, "ContainersReady", r, &now);
            if let Some(c) = st.pointer_mut("/containerStatuses/0") {
                c["ready"] = json!(r);
            }
        });
    }
}
