//! Processes killed when a test ends, however it ends; a command's time limit; host pids by
//! name.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (with its process group) when dropped.
pub struct Guarded {
    child: Option<Child>,
    what: String,
}

impl Guarded {
    /// Spawn `cmd` in its own process group, stdout/stderr captured to files in `dir`.
    pub fn spawn(mut cmd: Command, what: &str, dir: &Path) -> Result<Guarded> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(dir.join(format!("{what}.out")))?;
        let err = std::fs::File::create(dir.join(format!("{what}.err")))?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().with_context(|| format!("spawn {what}"))?;
        Ok(Guarded {
            child: Some(child),
            what: what.to_string(),
        })
    }
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
    /// Wait up to `limit` for exit.
    pub fn wait_timeout(&mut self, limit: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().context("already reaped")?;
        loop {
            if let Some(st) = child.try_wait()? {
                return Ok(Some(st));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    /// Signal the whole process group (a command run through nsenter is a child of it).
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(c.id() as i32), sig);
        }
    }
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(None) = c.try_wait() {
                let pg = nix::unistd::Pid::from_raw(c.id() as i32);
                let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// Run a command to completion with a time limit; on timeout the process group is killed and
/// an error names the command.
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> Result<Output> {
    use std::os::unix::process::CommandExt;
    let desc = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = cmd.spawn().with_context(|| format!("spawn {desc}"))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => Ok(out?),
        Err(_) => {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let partial = rx
                .recv_timeout(Duration::from_secs(5))
                .ok()
                .and_then(|r| r.ok());
            let (o, e) = partial
                .map(|p| {
                    (
                        String::from_utf8_lossy(&p.stdout).into_owned(),
                        String::from_utf8_lossy(&p.stderr).into_owned(),
                    )
                })
                .unwrap_or_default();
            bail!(
                "timed out after {:?}: {desc}\nstdout:\n{o}\nstderr:\n{e}",
                limit
            )
        }
    }
}

/// Host pids whose command name is `comm` (e.g. "prted"), for leak checks.
pub fn pids_named(comm: &str) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(c) = std::fs::read_to_string(e.path().join("comm")) {
                if c.trim_end() == comm {
                    out.push(pid);
                }
            }
        }
    }
    out
}

/// Sets its flag when dropped: a sampling thread told to stop by the flag ends even when the
/// test body that would have set it panics (else `std::thread::scope` waits for it forever).
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
