//! Starting one container of a running pod: its image pulled (by its pull policy), what it
//! needs prepared, its process started in the pod's sandbox; a wait with the kubelet's reason
//! when something is missing.

use super::container_status::State;
use super::exec_info::ExecInfo;
use super::paths::{container_log, EXEC_INFO};
use super::prepare::{PrepareError, Prepared};
use super::probe::Readiness;
use super::worker::{PodFailure, Worker, PREPARE_RETRY};
use crate::api::defaults::now_rfc3339;
use crate::runtime::podnet::ContainerSpec;
use std::path::PathBuf;
use std::time::{Duration, Instant};

impl Worker<'_> {
    /// Starts container `i` (due now). A missing image or a missing Secret, ConfigMap or
    /// ServiceAccount keeps it waiting, to be tried again; a start the sandbox refuses is an
    /// exit (`StartError`) under the restart policy; a spec that cannot work fails the pod.
    pub(super) fn start(&mut self, i: usize) -> Result<(), PodFailure> {
        let attempts = self.sup[i].pull_attempts;
        if let Err((reason, message)) = self.ctx.pull(&mut self.pod.containers[i], attempts) {
            let sup = &mut self.sup[i];
            sup.pull_attempts += 1;
            let wait = sup.pull_backoff.next();
            self.wait_with(i, reason, message, wait, false);
            return Ok(());
        }
        self.sup[i].pull_attempts = 0;
        let c = &self.pod.containers[i];
        let prepared = match self
            .ctx
            .prepare_container(&self.pod, &self.prep, c, self.ip)
        {
            Ok(p) => p,
            Err(PrepareError::Fatal(m)) => return Err(PodFailure("CreateContainerError", m)),
            Err(PrepareError::Retry(m)) => {
                self.wait_with(i, "CreateContainerConfigError", m, PREPARE_RETRY, true);
                return Ok(());
            }
            Err(PrepareError::Config(reason, m)) => {
                self.wait_with(i, reason, m, PREPARE_RETRY, true);
                return Ok(());
            }
        };
        self.run_container(i, prepared);
        Ok(())
    }

    /// Container `i` waits with `reason` and `message`, to be tried again after `wait`; the
    /// message is an event when it is new (`event`).
    fn wait_with(&mut self, i: usize, reason: &str, message: String, wait: Duration, event: bool) {
        let sup = &mut self.sup[i];
        sup.due = Some(Instant::now() + wait);
        if event && sup.last_error != message {
            self.ctx
                .event("Warning", "Failed", &format!("Error: {message}"));
        }
        sup.last_error = message.clone();
        let st = &mut self.cs[i];
        let state = State::Waiting(reason.to_string(), message);
        if st.state != state {
            st.state = state;
            self.publish();
        }
    }

    /// Starts the prepared container `i` in the sandbox; it runs, or it ended at once.
    fn run_container(&mut self, i: usize, p: Prepared) {
        let c = &self.pod.containers[i];
        let mut mounts = p.mounts;
        if p.container.is_some() {
            if let Some(bind) = termination_bind(&self.ctx.dir, &c.name, &c.spec) {
                mounts.push(bind);
            }
        }
        let spec = ContainerSpec {
            name: c.name.clone(),
            command: p.command,
            env: p.env,
            workdir: p.workdir.clone(),
            bind_mounts: mounts,
            log_path: container_log(&self.ctx.dir, &c.name),
            image: p.container,
        };
        let name = c.name.clone();
        let started_at = now_rfc3339();
        self.sup[i].started_at = started_at.clone();
        self.sup[i].last_error.clear();
        self.cs[i].container_id = Some(format!(
            "sandbox://{}/{}/{}",
            self.sandbox.netns(),
            name,
            self.cs[i].restarts
        ));
        self.cs[i].image_id = c.image_id();
        if let Err(e) = self.sandbox.start_container(&spec) {
            let m = format!("{e:#}");
            self.ctx.event("Warning", "Failed", &format!("Error: {m}"));
            self.ended(i, None, Some(&m));
            return;
        }
        self.ctx
            .event("Normal", "Created", &format!("Created container {name}"));
        self.ctx
            .event("Normal", "Started", &format!("Started container {name}"));
        self.running(i, started_at);
        if name == self.pod.default_container() {
            self.write_exec_info(&name, p.workdir);
        }
        self.publish();
    }

    /// Container `i` runs since `started_at`: started (and ready) at once unless probes say
    /// otherwise.
    fn running(&mut self, i: usize, started_at: String) {
        let c = &self.pod.containers[i];
        let now = Instant::now();
        let sup = &mut self.sup[i];
        sup.due = None;
        sup.since = now;
        sup.startup_fails = 0;
        sup.readiness = Readiness::new(c.readiness.as_ref());
        sup.next_startup = c.startup.as_ref().map(|p| now + p.initial_delay);
        let started = c.startup.is_none();
        sup.next_readiness = c
            .readiness
            .as_ref()
            .filter(|_| started)
            .map(|p| now + p.initial_delay);
        sup.ever_started |= started;
        let st = &mut self.cs[i];
        st.state = State::Running(started_at);
        st.started = started;
        st.ready = started && c.readiness.is_none();
    }

    /// What `exec` from another process needs to enter container `name` (the pod's default).
    fn write_exec_info(&self, name: &str, workdir: Option<PathBuf>) {
        let info = ExecInfo {
            namespace: self.ctx.ns.clone(),
            name: self.ctx.name.clone(),
            uid: self.ctx.uid.clone(),
            pid: self.sandbox.container_pid(name).unwrap_or(0),
            ip: self.ip.to_string(),
            netns: self.sandbox.netns().to_string(),
            workdir: workdir
                .unwrap_or_else(|| PathBuf::from("/"))
                .to_string_lossy()
                .into_owned(),
            env: self.sandbox.container_env(name),
            container: self.sandbox.container_config(name),
        };
        let _ = std::fs::write(
            self.ctx.dir.join(EXEC_INFO),
            serde_json::to_vec_pretty(&info).unwrap_or_default(),
        );
    }
}

/// An image container's termination message file: an empty host file the container may write
/// (its user is not known here), bound at its `terminationMessagePath`, as the kubelet does.
/// A container that runs on the host has none (the path would be the host's).
fn termination_bind(
    dir: &std::path::Path,
    name: &str,
    spec: &serde_json::Value,
) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let path = spec["terminationMessagePath"]
        .as_str()
        .filter(|p| p.starts_with('/'))
        .unwrap_or("/dev/termination-log");
    let file = super::paths::termination_log(dir, name);
    let made = std::fs::create_dir_all(file.parent()?)
        .and_then(|()| std::fs::write(&file, b""))
        .and_then(|()| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)));
    match made {
        Ok(()) => Some((file, std::path::PathBuf::from(path))),
        Err(e) => {
            tracing::warn!("container {name}: no termination message file: {e}");
            None
        }
    }
}
