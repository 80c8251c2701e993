//! What a container runs: its command and working directory under Kubernetes' rules (against
//! the image's ENTRYPOINT, CMD and WORKDIR), and in an image its root filesystem and security
//! settings; on the host's filesystem, a command the host can execute.

use super::env::expand;
use super::error::{fatal, PrepareError};
use super::prepared::Prepared;
use super::volumes::Mounts;
use crate::cluster::kubelet::containers::PodContainer;
use crate::cluster::security::Security;
use crate::images::MountedImage;
use crate::runtime::container::Container;
use std::path::{Path, PathBuf};

type Env = Vec<(String, String)>;

/// What container `c` runs, with its environment `env` and `mounts` (`security`: what it runs
/// as, for a container that runs an image).
pub(super) fn prepared(
    c: &PodContainer,
    security: Option<Security>,
    env: Env,
    mounts: Mounts,
) -> Result<Prepared, PrepareError> {
    let list = |k: &str| -> Vec<String> {
        c.spec[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| expand(x.as_str().unwrap_or(""), &env))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (command, args) = (list("command"), list("args"));
    match (&c.rootfs, security) {
        (Some(mi), Some(sec)) => in_image(c, mi, sec, command, args, env, mounts),
        _ => on_host(c, command, args, env, mounts.binds),
    }
}

/// A container in the image `mi`'s root filesystem, as user `sec`.
fn in_image(
    c: &PodContainer,
    mi: &MountedImage,
    sec: Security,
    command: Vec<String>,
    args: Vec<String>,
    mut env: Env,
    mounts: Mounts,
) -> Result<Prepared, PrepareError> {
    // Kubernetes' rules: command replaces ENTRYPOINT (and drops CMD), args replaces CMD.
    let (mut command, args) = match (command.is_empty(), args.is_empty()) {
        (false, _) => (command, args),
        (true, false) => (mi.config.entrypoint.clone(), args),
        (true, true) => (mi.config.entrypoint.clone(), mi.config.cmd.clone()),
    };
    command.extend(args);
    if command.is_empty() {
        return Err(PrepareError::Config(
            "CreateContainerError",
            format!("failed to create container {}: no command specified (neither the pod nor image {} sets one)", c.spec["name"].as_str().unwrap_or(""), mi.config.resolved),
        ));
    }
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push((
            "HOME".into(),
            sec.home.clone().unwrap_or_else(|| "/".into()),
        ));
    }
    let workdir = c.spec["workingDir"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or(Some(mi.config.workdir.as_str()).filter(|s| !s.is_empty()))
        .map(PathBuf::from);
    let container = Container {
        rootfs: mi.rootfs.clone(),
        read_only_root: sec.read_only_root,
        uid: sec.uid,
        gid: sec.gid,
        groups: sec.groups,
        capabilities: sec.capabilities,
        no_new_privs: sec.no_new_privs,
        read_only_mounts: mounts.read_only,
        tmpfs: mounts.tmpfs,
    };
    Ok(Prepared {
        command,
        env,
        workdir,
        mounts: mounts.binds,
        container: Some(container),
    })
}

/// A container on the host's filesystem: it needs a command, and one the host can execute.
fn on_host(
    c: &PodContainer,
    mut command: Vec<String>,
    args: Vec<String>,
    env: Env,
    mounts: Vec<(PathBuf, PathBuf)>,
) -> Result<Prepared, PrepareError> {
    let cname = c.spec["name"].as_str().unwrap_or("");
    command.extend(args);
    if command.is_empty() {
        return Err(fatal(format!(
            "container {cname} has no command: sandbox pods run host programs, not images, so spec.containers[].command is required"
        )));
    }
    // As a container runtime would, refuse to start what cannot be executed.
    let path_var = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| crate::runtime::podnet::DEFAULT_PATH.to_string());
    if !executable_exists(&command[0], &path_var) {
        return Err(fatal(format!(
            "failed to start container {cname}: exec: {:?}: executable file not found in $PATH ({path_var}); sandbox pods run programs of the host filesystem",
            command[0]
        )));
    }
    let workdir = c.spec["workingDir"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    Ok(Prepared {
        command,
        env,
        workdir,
        mounts,
        container: None,
    })
}

/// Whether `cmd` is an executable file, found through `path` unless it has a '/'.
fn executable_exists(cmd: &str, path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        return ok(Path::new(cmd));
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .any(|d| ok(&Path::new(d).join(cmd)))
}
