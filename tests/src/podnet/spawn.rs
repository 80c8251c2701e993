//! Starting a container's process in its pod: PID 1 of fresh UTS, mount and PID namespaces
//! inside the pod's network namespace, set up by the host-filesystem setup program
//! ([`super::mounts`]) or by the image init program ([`crate::container`]), then waiting until
//! it has become the container command.

use super::host::Tools;
use super::mounts::{INIT_ARG0, POD_INIT, PUNCH_FS};
use super::names::{DEFAULT_HOME, SYSTEM_PATH};
use super::pod::RunningContainer;
use super::process::ContainerProcess;
use super::procfs::{children_of, cmdline, ns_id, runtime_errors, tail_of};
use super::sandbox::PodSandbox;
use super::spec::ContainerSpec;
use super::state::{lock, PodInner};
use crate::container::{Container, InitConfig, DEFAULT_PATH};
use anyhow::{bail, Context, Result};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long to wait for a container's PID 1 to appear and finish its setup.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One container to start in a pod whose sandbox is connected.
pub(super) struct Launch<'a> {
    pub(super) tools: &'a Tools,
    pub(super) sandbox: &'a PodSandbox,
    pub(super) hostname: &'a str,
    pub(super) spec: &'a ContainerSpec,
    /// The container's bind mounts, sources resolved, `/etc/hosts` included.
    pub(super) binds: Vec<(PathBuf, PathBuf)>,
    /// "starting pod NAME (NETNS)", the context of every error.
    pub(super) what: &'a str,
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
pub(super) fn start_container(
    l: &Launch<'_>,
    inner: &Arc<Mutex<PodInner>>,
) -> Result<RunningContainer> {
    let ctx = || l.what.to_string();
    let workdir = l.spec.workdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let env = container_env(&l.spec.env);
    let log_path = &l.spec.log_path;
    let log = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(log_path)
        .with_context(|| format!("opening pod log {}", log_path.display()))
        .with_context(ctx)?;
    // stderr of `ip netns exec` and `unshare` themselves; the pod's own stderr is sent to
    // the log by the setup program.
    let runtime_err = l.sandbox.file("runtime.err");
    let runtime_err_file = File::create(&runtime_err).with_context(ctx)?;
    let ready = l.sandbox.file("ready");
    let mut cmd = outer_command(l.tools, &l.sandbox.netns);
    let stage = match &l.spec.image {
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
    let index = {
        let mut inner = lock(inner);
        let p = ContainerProcess::new(&l.sandbox.netns, child, runtime_err);
        inner.containers.push(p);
        inner.containers.len() - 1
    };
    let (pid1, pidns) = wait_started(l, inner, index, outer, &ready, &stage.final_stage)?;
    Ok(RunningContainer {
        pid1,
        pidns,
        env,
        workdir,
        config: stage.config,
        log_path: log_path.clone(),
    })
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

/// `ip netns exec NETNS unshare ... --`: PID 1 of fresh UTS, mount and PID namespaces inside
/// the pod's network namespace. Mount propagation is "slave": the pod's mounts never reach the
/// host, while unmounts on the host (e.g. `ip netns del` of other pods) still reach the pod, so
/// pods do not keep each other's network namespaces alive.
fn outer_command(tools: &Tools, netns: &str) -> Command {
    let mut cmd = Command::new(&tools.ip);
    cmd.args(["netns", "exec", netns])
        .arg(&tools.unshare)
        .args([
            "--uts",
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
    let init = crate::container::init_binary()?;
    let config = l.sandbox.file("container.json");
    let ic = InitConfig {
        container: image.clone(),
        layer_dir: l.sandbox.file("layer"),
        hostname: l.hostname.to_string(),
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
        .arg(l.hostname)
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
/// file says "ok" and PID 1 no longer runs `final_stage`. Returns PID 1's host pid and PID
/// namespace (0 and "" when the container ended during startup before it was seen).
fn wait_started(
    l: &Launch<'_>,
    inner: &Arc<Mutex<PodInner>>,
    index: usize,
    outer: u32,
    ready: &Path,
    final_stage: &[u8],
) -> Result<(u32, String)> {
    let own_pidns = ns_id(std::process::id(), "pid");
    let deadline = Instant::now() + START_TIMEOUT;
    let (mut pid1, mut pidns) = (0u32, String::new());
    loop {
        let exited = {
            let mut inner = lock(inner);
            let c = &mut inner.containers[index];
            c.poll_exit().with_context(|| l.what.to_string())?.is_some()
        };
        if pid1 == 0 {
            if let Some(&p) = children_of(outer).first() {
                match ns_id(p, "pid") {
                    Some(ns) if Some(&ns) != own_pidns.as_ref() => {
                        (pid1, pidns) = (p, ns.clone());
                        let mut inner = lock(inner);
                        inner.containers[index].pid1 = p;
                        inner.containers[index].pidns = Some(ns);
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
                return Ok((pid1, pidns));
            }
            bail!("{}: the pod exited during setup{}", l.what, log_tails(l));
        }
        if setup_done && pid1 != 0 {
            match cmdline(pid1) {
                Some(c) if !c.is_empty() && !c.starts_with(final_stage) => {
                    return Ok((pid1, pidns))
                }
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
        runtime_errors(&l.sandbox.file("runtime.err"))
    )
}
