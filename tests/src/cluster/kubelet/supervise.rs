//! Supervising a pod's running containers: their startup and readiness probes.

use super::container_status::State;
use super::worker::Worker;
use std::time::Instant;

impl Worker<'_> {
    /// Runs the probes that are due: a container's startup probe until it passes (after its
    /// failure threshold the container is killed, and restarted by the restart policy), then
    /// its readiness probe.
    pub(super) fn probe(&mut self) {
        for i in 0..self.cs.len() {
            if !matches!(self.cs[i].state, State::Running(_)) {
                continue;
            }
            if self.cs[i].started {
                self.readiness(i);
            } else {
                self.startup(i);
            }
        }
    }

    fn startup(&mut self, i: usize) {
        let now = Instant::now();
        let (Some(p), Some(t)) = (&self.pod.containers[i].startup, self.sup[i].next_startup) else {
            return;
        };
        if now < t {
            return;
        }
        let name = self.pod.containers[i].name.clone();
        let pass = p.check(self.ip, |cmd| self.sandbox.exec_in(&name, cmd, &[]).ok());
        let sup = &mut self.sup[i];
        sup.next_startup = Some(Instant::now() + p.period);
        if !pass {
            sup.startup_fails += 1;
            if sup.startup_fails >= p.failure_threshold {
                sup.next_startup = None;
                let m = format!("Container {name} failed startup probe, will be restarted");
                self.ctx.event("Warning", "Unhealthy", &m);
                let _ = self.sandbox.kill_container(&name);
            }
            return;
        }
        sup.next_startup = None;
        sup.ever_started = true;
        let readiness = self.pod.containers[i].readiness.as_ref();
        sup.next_readiness = readiness.map(|p| (sup.since + p.initial_delay).max(now));
        let st = &mut self.cs[i];
        st.started = true;
        st.ready = readiness.is_none();
        self.publish();
    }

    fn readiness(&mut self, i: usize) {
        let (Some(p), Some(t)) = (
            &self.pod.containers[i].readiness,
            self.sup[i].next_readiness,
        ) else {
            return;
        };
        if Instant::now() < t {
            return;
        }
        let name = &self.pod.containers[i].name;
        let pass = p.check(self.ip, |cmd| self.sandbox.exec_in(name, cmd, &[]).ok());
        let sup = &mut self.sup[i];
        sup.next_readiness = Some(Instant::now() + p.period);
        if let Some(r) = sup.readiness.record(p, pass) {
            self.cs[i].ready = r;
            self.publish();
        }
    }
}
