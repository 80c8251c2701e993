//! The commands that talk to a running sandbox: `exec`, `kill`, `status`, `down`.

use super::host::{pid_alive, require_root};
use super::state::{cleanup_stale, read_state, running, PodLine, StateFile};
use crate::cluster::ExecInfo;
use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

fn find_pod<'a>(s: &'a StateFile, pod: &str) -> Result<&'a PodLine> {
    let (ns, name) = match pod.split_once('/') {
        Some((n, p)) => (Some(n), p),
        None => (None, pod),
    };
    let hits: Vec<&PodLine> = s
        .pods
        .iter()
        .filter(|p| p.name == name && ns.is_none_or(|n| n == p.namespace))
        .collect();
    match hits.as_slice() {
        [p] => Ok(p),
        [] => bail!(
            "no pod {pod:?} in this sandbox; pods: {}",
            s.pods
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => bail!("pod name {name:?} is in several namespaces; say NAMESPACE/{name}"),
    }
}

pub(super) fn exec(dir: &Path, pod: &str, argv: &[String]) -> Result<i32> {
    require_root()?;
    let s = running(dir)?;
    let p = find_pod(&s, pod)?;
    let path = p
        .exec
        .clone()
        .ok_or_else(|| anyhow!("pod {} is not running (phase {})", p.name, p.phase))?;
    let info: ExecInfo = serde_json::from_slice(
        &std::fs::read(&path)
            .with_context(|| format!("pod {} is not running (no {})", p.name, path.display()))?,
    )
    .with_context(|| format!("reading {}", path.display()))?;
    if !pid_alive(info.pid) {
        bail!("pod {} is not running any more", p.name);
    }
    let status = crate::runtime::podnet::exec_command(
        info.pid,
        Path::new(&info.workdir),
        info.container.as_deref(),
        argv,
    )
    .envs(info.env.iter().map(|(k, v)| (k, v)))
    .status()
    .context("running nsenter (util-linux)")?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

pub(super) fn kill(dir: &Path, pod: &str) -> Result<()> {
    let s = running(dir)?;
    let p = find_pod(&s, pod)?;
    let reply = control(
        dir,
        &format!("evict {}/{}", p.namespace, p.name),
        Duration::from_secs(60),
    )?;
    match reply.first().map(String::as_str) {
        Some("ok") => {
            println!("pod/{} evicted", p.name);
            Ok(())
        }
        Some(other) => bail!("{}", other.trim_start_matches("error: ")),
        None => bail!("the sandbox server closed the connection without an answer"),
    }
}

pub(super) fn status(dir: &Path) -> Result<()> {
    running(dir)?;
    let reply = control(dir, "status", Duration::from_secs(30))?;
    let s: StateFile =
        serde_json::from_str(&reply.join("\n")).context("reading the server's status")?;
    println!("kubeconfig: {}", s.kubeconfig.display());
    println!(
        "{:<40} {:<15} {:<6} {:<10} READY",
        "NAME", "IP", "INDEX", "PHASE"
    );
    for p in &s.pods {
        println!(
            "{:<40} {:<15} {:<6} {:<10} {}",
            p.name,
            if p.ip.is_empty() { "<none>" } else { &p.ip },
            p.index,
            p.phase,
            p.ready
        );
    }
    Ok(())
}

pub(super) fn down(dir: &Path) -> Result<()> {
    let Some(s) = read_state(dir) else {
        println!("no sandbox is running in {}", dir.display());
        return Ok(());
    };
    if pid_alive(s.pid) {
        // The server answers "ok", tears everything down and exits; the connection closes
        // when it is gone.
        let reply = control(dir, "down", Duration::from_secs(120));
        if let Err(e) = reply {
            eprintln!("prrte-k8s-sandbox: {e:#}; sending SIGTERM to {}", s.pid);
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(s.pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while pid_alive(s.pid) {
            if Instant::now() > deadline {
                bail!(
                    "the sandbox server (pid {}) did not exit within 60s; see {}",
                    s.pid,
                    dir.join("sandbox.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let left = crate::runtime::podnet::leftovers(&s.network_prefix);
    if !left.is_empty() {
        cleanup_stale(dir, &s)?;
        let again = crate::runtime::podnet::leftovers(&s.network_prefix);
        if !again.is_empty() {
            bail!("could not remove everything the sandbox made: {again}");
        }
    }
    for f in ["state.json", "control.sock"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    println!("sandbox in {} is down", dir.display());
    Ok(())
}

/// Sends one request line on the control socket and returns the reply lines.
fn control(dir: &Path, request: &str, timeout: Duration) -> Result<Vec<String>> {
    let sock = dir.join("control.sock");
    let mut s = UnixStream::connect(&sock)
        .with_context(|| format!("connecting to the sandbox server at {}", sock.display()))?;
    s.set_read_timeout(Some(timeout))?;
    writeln!(s, "{request}")?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("waiting for the sandbox server to answer {request:?}"))?;
    Ok(out.lines().map(String::from).collect())
}
