//! Starting a container's process in its pod: PID 1 of fresh mount and PID namespaces inside
//! the pod's network, UTS and IPC namespaces, set up by the host-filesystem setup program
//! ([`super::mounts`]) or by the image init program ([`crate::runtime::container`]), then waiting until
//! it has become the container command.

use super::host::Tools;
use super::mounts::{INIT_ARG0, POD_INIT, PUNCH_FS};
use super::names::{DEFAULT_HOME, SYSTEM_PATH};
use super::process::{ContainerProcess, Started};
use super::procfs::{children_of, cmdline, ns_id, runtime_errors, tail_of, PidNs};
use super::sandbox::PodSandbox;
use super::spec::ContainerSpec;
use super::state::{lock, PodInner};
use crate::runtime::container::{Container, InitConfig, DEFAULT_PATH};
use anyhow::{bail, Context, Result};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long to wait for a container's PID 1 to appear and finish its setup.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One container to start in a pod whose sandbox is set up.
pub(super) struct Launch<'a> {
    pub(super) tools: &'a Tools,
    pub(super) sandbox: &'a PodSandbox,
    pub(super) spec: &'a ContainerSpec,
    /// The image container's settings, its memory volumes turned into `binds` (None: the
    /// host's filesystem).
    pub(super) image: Option<Container>,
    /// The container's bind mounts, sources resolved, `/etc/hosts` included.
    pub(super) binds: Vec<(PathBuf, PathBuf)>,
    /// Its files' directory (see [`PodSandbox::container_dir`]).
    pub(super) dir: PathBuf,
    /// "starting container NAME of pod POD (NETNS)", the context of every error.
    pub(super) what: String,
}

/// What PID 1 runs while it sets the container up, and where the container's files are.
struct Stage {
    /// The start of PID 1's command line until it `exec`s the container command.
    final_stage: Vec<u8>,
    /// The image init program's configuration (image containers only).
    config: Option<PathBuf>,
}

/// Starts the container's process, registers it with `inner` (so that a failed start is
/// cleaned up with the pod) and waits until its setup is done and the command runs.
pub(super) fn start_container(l: &Launch<'_>, inner: &Arc<Mutex<PodInner>>) -> Result<()> {
    let ctx = || l.what.clone();
    let workdir = l.spec.workdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let env = container_env(&l.spec.env);
    let log_path = &l.spec.log_path;
    let log = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(log_path)
        .with_context(|| format!("opening container log {}", log_path.display()))
        .with_context(ctx)?;
    // stderr of `ip netns exec`, `nsenter` and `unshare` themselves; the container's own
    // stderr is sent to the log by the setup program.
    let runtime_err_file = File::create(l.dir.join("runtime.err")).with_context(ctx)?;
    let ready = l.dir.join("ready");
    let mut cmd = outer_command(l.tools, l.sandbox);
    let stage = match &l.image {
        Some(image) => image_stage(&mut cmd, l, image, &workdir, &env, &ready).with_context(ctx)?,
        None => host_stage(&mut cmd, l, &workdir, &env, &ready),
    };
    cmd.env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(runtime_err_file);
    let child = cmd.spawn().with_context(ctx)?;
    let outer = child.id();
    let started = Started {
        name: l.spec.name.clone(),
        label: format!("container {} of pod {}", l.spec.name, l.sandbox.netns),
        dir: l.dir.clone(),
        env,
        workdir,
        config: stage.config,
        log_path: log_path.clone(),
    };
    lock(inner).register(ContainerProcess::new(started, child));
    wait_started(l, inner, outer, &ready, &stage.final_stage)
}

/// The container's environment: `env` in order, then `PATH`/`HOME` defaults if absent.
fn container_env(env: &[(String, String)]) -> Vec<(String, String)> {
    let mut v = env.to_vec();
    for (k, d) in [("PATH", DEFAULT_PATH), ("HOME", DEFAULT_HOME)] {
        if !v.iter().any(|(n, _)| n == k) {
            v.push((k.to_string(), d.to_string()));
        }
    }
    v
}

/// `ip netns exec NETNS nsenter --uts=.. --ipc=.. unshare ... --`: PID 1 of fresh mount and
/// PID namespaces inside the pod's network, UTS and IPC namespaces. Mount propagation is
/// "slave": the container's mounts never reach the host, while unmounts on the host (e.g. `ip
/// netns del` of other pods) still reach the container, so pods do not keep each other's
/// namespaces alive.
fn outer_command(tools: &Tools, sandbox: &PodSandbox) -> Command {
    let mut cmd = Command::new(&tools.ip);
    cmd.args(["netns", "exec", &sandbox.netns])
        .arg(&tools.nsenter)
        .arg(format!("--uts={}", sandbox.ns_file("uts").display()))
        .arg(format!("--ipc={}", sandbox.ns_file("ipc").display()))
        .arg("--")
        .arg(&tools.unshare)
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "slave",
            "--",
        ]);
    cmd
}

/// A container in an image's root filesystem: the init program with its configuration.
fn image_stage(
    cmd: &mut Command,
    l: &Launch<'_>,
    image: &Container,
    workdir: &Path,
    env: &[(String, String)],
    ready: &Path,
) -> Result<Stage> {
    let init = crate::runtime::container::init_binary()?;
    let config = l.dir.join("container.json");
    let ic = InitConfig {
        container: image.clone(),
        layer_dir: l.dir.join("layer"),
        workdir: workdir.to_path_buf(),
        env: env.to_vec(),
        command: l.spec.command.clone(),
        binds: l.binds.clone(),
        ready: ready.to_path_buf(),
    };
    fs::write(&config, serde_json::to_vec_pretty(&ic)?)
        .with_context(|| format!("writing {}", config.display()))?;
    cmd.arg(&init).arg("run").arg(&config);
    let mut final_stage = init.as_os_str().as_encoded_bytes().to_vec();
    final_stage.push(0);
    Ok(Stage {
        final_stage,
        config: Some(config),
    })
}

/// A container on the host's filesystem: the setup program, then `env -i -- NAME=VALUE...
/// command...`.
fn host_stage(
    cmd: &mut Command,
    l: &Launch<'_>,
    workdir: &Path,
    env: &[(String, String)],
    ready: &Path,
) -> Stage {
    let tools = l.tools;
    cmd.arg(&tools.sh)
        .arg("-c")
        .arg(POD_INIT.replace("PUNCH_FS", PUNCH_FS))
        .arg(INIT_ARG0)
        .arg(ready)
        .arg(workdir)
        .arg(&tools.env)
        .arg(l.binds.len().to_string());
    for (src, dst) in &l.binds {
        cmd.arg(src).arg(dst);
    }
    for (k, v) in env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.args(&l.spec.command);
    let mut final_stage = tools.env.as_os_str().as_encoded_bytes().to_vec();
    final_stage.extend_from_slice(b"\0-i\0--\0");
    Stage {
        final_stage,
        config: None,
    }
}

/// Finds PID 1 (the child of `unshare`, `outer`) and waits for its setup to finish: the ready
/// file says "ok" and PID 1 no longer runs `final_stage`. PID 1's host pid and PID namespace
/// stay unknown (0, None) when the container ended during startup before it was seen.
fn wait_started(
    l: &Launch<'_>,
    inner: &Arc<Mutex<PodInner>>,
    outer: u32,
    ready: &Path,
    final_stage: &[u8],
) -> Result<()> {
    let own_pidns = ns_id(std::process::id(), "pid");
    let deadline = Instant::now() + START_TIMEOUT;
    let mut pid1 = 0u32;
    loop {
        let exited = {
            let mut inner = lock(inner);
            let c = inner.container(&l.spec.name)?;
            c.poll_exit().with_context(|| l.what.clone())?.is_some()
        };
        if pid1 == 0 {
            if let Some(&p) = children_of(outer).first() {
                match PidNs::of(p) {
                    Some(ns) if Some(ns.id()) != own_pidns.as_deref() => {
                        pid1 = p;
                        let mut inner = lock(inner);
                        let c = inner.container(&l.spec.name)?;
                        (c.pid1, c.pidns) = (p, Some(ns));
                    }
                    _ => {}
                }
            }
        }
        let setup_done = fs::read_to_string(ready)
            .map(|s| s.trim() == "ok")
            .unwrap_or(false);
        if exited {
            if setup_done {
                return Ok(());
            }
            bail!(
                "{}: the container exited during setup{}",
                l.what,
                log_tails(l)
            );
        }
        if setup_done && pid1 != 0 {
            match cmdline(pid1) {
                Some(c) if !c.is_empty() && !c.starts_with(final_stage) => return Ok(()),
                _ => {}
            }
        }
        if Instant::now() > deadline {
            bail!(
                "{}: not set up after {:?}{}",
                l.what,
                START_TIMEOUT,
                log_tails(l)
            );
        }
        sleep(Duration::from_millis(5));
    }
}

/// "; log PATH:\nTAIL" and the runtime's errors, for a failed start.
fn log_tails(l: &Launch<'_>) -> String {
    let log = &l.spec.log_path;
    format!(
        "; log {}:\n{}{}",
        log.display(),
        tail_of(log, 4096),
        runtime_errors(&l.dir.join("runtime.err"))
    )
}
