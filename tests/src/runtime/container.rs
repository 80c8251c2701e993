//! Containers: sandbox pods that run in an image's root filesystem.
//!
//! A container with an [`crate::runtime::podnet::ContainerSpec::image`] does not share the host's
//! filesystem. Its PID 1 starts as the small program `prrte-k8s-sandbox-init` (a binary of this
//! crate), which, inside the container's fresh mount and PID namespaces (in the pod's network,
//! UTS and IPC namespaces) and as root:
//!
//! 1. mounts an overlay with the image's root filesystem as the read-only lower layer and a
//!    per-start writable layer (so a restarted container starts from the image again);
//! 2. mounts `/proc`, a `/dev` tmpfs with the usual device nodes, `/dev/pts`, `/dev/shm`, a
//!    read-only `/sys`, then the pod's bind mounts (volumes, service account, `/etc/hosts`) and
//!    memory-backed volumes, creating missing mount points in the writable layer as a container
//!    runtime does;
//! 3. remounts the root read-only for `readOnlyRootFilesystem`, `pivot_root`s into it and
//!    detaches the old root, so nothing of the host's filesystem stays reachable;
//! 4. changes to the working directory, sets the supplementary groups, gid and uid, keeps only
//!    the allowed capabilities (bounding, permitted, effective; none for a non-root user),
//!    sets `no_new_privs` when privilege escalation is not allowed, and `exec`s the command.
//!
//! The same program, run with `exec`, enters a running container (its mount namespace, hence
//! its root) with the container's user and capabilities: what `kubectl exec` gives.

use anyhow::{anyhow, bail, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::unistd::{Gid, Uid};
use serde::{Deserialize, Serialize};
use std::ffi::{CString, OsStr};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// `PATH` given to pods (and to `exec`) whose environment does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// File name of the init program next to the test binaries (see [`init_binary`]).
pub const INIT_BIN: &str = "prrte-k8s-sandbox-init";

/// The capabilities a container runtime (containerd, CRI-O) gives a container by default.
pub const DEFAULT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// How a pod's container runs: the image root and the security settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// The image's root filesystem (a directory, e.g. what `buildah mount` gives); it is the
    /// read-only lower layer of the container's root and is never written.
    pub rootfs: PathBuf,
    /// Remount the container's root read-only (`readOnlyRootFilesystem`).
    pub read_only_root: bool,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Capabilities kept (`CAP_...` names). A non-root user gets none in its effective set.
    pub capabilities: Vec<String>,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privs: bool,
    /// Mount points (inside the container) of bind mounts that are read-only.
    pub read_only_mounts: Vec<PathBuf>,
    /// Memory-backed volumes (emptyDir with medium Memory).
    pub tmpfs: Vec<Tmpfs>,
}

/// A tmpfs mounted in the container: a memory-backed volume of the pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Tmpfs {
    /// The pod's volume: every container of the pod that mounts it gets the same tmpfs.
    #[serde(default)]
    pub volume: String,
    pub path: PathBuf,
    /// Mode of its root directory (e.g. 0o1777, or 0o2777 with an fsGroup).
    pub mode: u32,
    pub gid: u32,
}

/// Everything the init program needs; written as JSON into the pod's state directory.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct InitConfig {
    pub container: Container,
    /// Directory for the writable layer (`upper`, `work`) and the new root (`root`).
    pub layer_dir: PathBuf,
    pub workdir: PathBuf,
    /// Exactly the command's environment.
    pub env: Vec<(String, String)>,
    pub command: Vec<String>,
    /// (host source, path inside the container).
    pub binds: Vec<(PathBuf, PathBuf)>,
    /// File that gets "ok" right before the command is `exec`ed.
    pub ready: PathBuf,
}

/// The init program: `prrte-k8s-sandbox-init` next to the running executable (or in its parent
/// directory when that is cargo's `deps`), or `$PRRTE_K8S_SANDBOX_INIT`.
pub fn init_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PRRTE_K8S_SANDBOX_INIT").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut candidates = vec![dir.join(INIT_BIN)];
    if dir.ends_with("deps") {
        dir.pop();
        candidates.push(dir.join(INIT_BIN));
    }
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        anyhow!(
            "{} is not built (looked in {}); pods that run images need it: run `cargo build -p prrte-k8s-sandbox` (make test does)",
            INIT_BIN,
            candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Normalizes a capability name as Kubernetes writes it (`NET_ADMIN`) to `CAP_NET_ADMIN`.
pub fn cap_name(n: &str) -> String {
    let u = n.trim().to_ascii_uppercase();
    if u.starts_with("CAP_") {
        u
    } else {
        format!("CAP_{u}")
    }
}

/// Entry point of the init program; returns the exit code when it could not `exec`.
pub fn init_main(args: Vec<std::ffi::OsString>) -> i32 {
    let r = match args.first().and_then(|a| a.to_str()) {
        Some("run") if args.len() == 2 => run(Path::new(&args[1])),
        Some("exec") if args.len() >= 5 && args[3] == "--" => {
            let pid: u32 = match args[2].to_str().and_then(|s| s.parse().ok()) {
                Some(p) => p,
                None => {
                    eprintln!("{INIT_BIN}: bad pid {:?}", args[2]);
                    return 125;
                }
            };
            enter(Path::new(&args[1]), pid, &args[4..])
        }
        _ => Err(anyhow!(
            "usage: {INIT_BIN} run CONFIG | {INIT_BIN} exec CONFIG PID -- COMMAND..."
        )),
    };
    match r {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("{INIT_BIN}: {e:#}");
            // What a container runtime reports when the container could not be started.
            128
        }
    }
}

enum Never {}

fn read_config(path: &Path) -> Result<InitConfig> {
    let text = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))
}

/// `path` (inside the container) as a host path below `root`, with the symbolic links of the
/// image resolved inside `root` as the container will see them (an absolute link such as
/// Debian's `/var/run -> /run` points into the image, never into the host's filesystem); `..`
/// stops at the root.
fn inside(root: &Path, path: &Path) -> Result<PathBuf> {
    let mut pending: std::collections::VecDeque<std::ffi::OsString> =
        std::collections::VecDeque::new();
    let push_all =
        |pending: &mut std::collections::VecDeque<std::ffi::OsString>, p: &Path, front: bool| {
            let parts: Vec<std::ffi::OsString> = p
                .components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_os_string()),
                    Component::ParentDir => Some("..".into()),
                    _ => None,
                })
                .collect();
            if front {
                for part in parts.into_iter().rev() {
                    pending.push_front(part);
                }
            } else {
                pending.extend(parts);
            }
        };
    push_all(&mut pending, path, false);
    let mut resolved: Vec<std::ffi::OsString> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let mut candidate = root.to_path_buf();
        candidate.extend(&resolved);
        candidate.push(&part);
        match fs::symlink_metadata(&candidate) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    bail!(
                        "too many levels of symbolic links resolving {} in the image",
                        path.display()
                    );
                }
                let target = fs::read_link(&candidate)
                    .with_context(|| format!("reading link {}", candidate.display()))?;
                if target.is_absolute() {
                    resolved.clear();
                }
                push_all(&mut pending, &target, true);
            }
            _ => resolved.push(part),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(&resolved);
    Ok(out)
}

/// Creates a mount point for `src` at `dst` (a directory for a directory, else a file).
fn mount_point(dst: &Path, dir: bool) -> Result<()> {
    if dir {
        fs::create_dir_all(dst)
            .with_context(|| format!("creating mount point {}", dst.display()))?;
    } else if !dst.exists() {
        if let Some(p) = dst.parent() {
            fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
        }
        fs::File::create(dst).with_context(|| format!("creating mount point {}", dst.display()))?;
    }
    Ok(())
}

fn bind(src: &Path, dst: &Path, read_only: bool) -> Result<()> {
    mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .with_context(|| format!("bind-mounting {} on {}", src.display(), dst.display()))?;
    if read_only {
        mount(
            None::<&str>,
            dst,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .with_context(|| format!("making {} read-only", dst.display()))?;
    }
    Ok(())
}

fn mount_fs(fstype: &str, dst: &Path, flags: MsFlags, data: &str) -> Result<()> {
    fs::create_dir_all(dst).with_context(|| format!("creating {}", dst.display()))?;
    mount(Some(fstype), dst, Some(fstype), flags, Some(data))
        .with_context(|| format!("mounting {fstype} on {}", dst.display()))
}

/// Sets up the container's root and `exec`s its command (PID 1 of the pod).
fn run(config: &Path) -> Result<Never> {
    // stdout is the pod log; so is stderr from here on (the runtime's own stderr goes elsewhere).
    nix::unistd::dup2(1, 2).context("pointing stderr at the log")?;
    let cfg = read_config(config)?;
    let c = &cfg.container;
    let mut ready = fs::File::create(&cfg.ready)
        .with_context(|| format!("creating {}", cfg.ready.display()))?;
    // Nothing done here may reach the host (unshare made the mounts slaves already).
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .context("making / a slave mount")?;
    let root = mount_root(&cfg)?;
    mount_system(&root, &cfg)?;
    mount_volumes(&root, &cfg)?;
    let workdir = inside(&root, &cfg.workdir)?;
    if !workdir.is_dir() {
        // As runc does: a missing working directory is created (owned by root).
        fs::create_dir_all(&workdir)
            .with_context(|| format!("creating working directory {}", cfg.workdir.display()))?;
    }
    if c.read_only_root {
        mount(
            None::<&str>,
            &root,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .context("making the container root read-only")?;
    }
    enter_root(&root, &cfg.workdir)?;
    let program = lookup(&cfg.command, &cfg.env)?;
    drop_privileges(c)?;
    ready
        .write_all(b"ok")
        .and_then(|_| ready.flush())
        .context("writing the ready file")?;
    drop(ready);
    exec(&program, &cfg.command, &cfg.env)
}

/// The container's root: an overlay of a per-start writable layer on the image's root
/// filesystem (the read-only lower layer), at `layer_dir`/root.
fn mount_root(cfg: &InitConfig) -> Result<PathBuf> {
    let c = &cfg.container;
    let root = cfg.layer_dir.join("root");
    let upper = cfg.layer_dir.join("upper");
    let work = cfg.layer_dir.join("work");
    for d in [&root, &upper, &work] {
        fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    if !c.rootfs.is_dir() {
        bail!(
            "the image root filesystem {} is missing",
            c.rootfs.display()
        );
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        c.rootfs.display(),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        &root,
        Some("overlay"),
        MsFlags::empty(),
        Some(opts.as_str()),
    )
    .with_context(|| format!("mounting the container root (overlay {opts})"))?;
    Ok(root)
}

/// The kernel's file systems in `root`: `/proc`, a read-only `/sys`, a `/dev` tmpfs with the
/// usual devices and links, `/dev/pts`, and `/dev/shm` unless a volume provides it.
fn mount_system(root: &Path, cfg: &InitConfig) -> Result<()> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_fs("proc", &root.join("proc"), nosuid, "")?;
    mount_fs("sysfs", &root.join("sys"), nosuid | MsFlags::MS_RDONLY, "")?;
    let dev = root.join("dev");
    mount_fs(
        "tmpfs",
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME,
        "mode=755,size=65536k",
    )?;
    for n in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = Path::new("/dev").join(n);
        if host.exists() {
            let d = dev.join(n);
            mount_point(&d, false)?;
            bind(&host, &d, false)?;
        }
    }
    for (l, t) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        std::os::unix::fs::symlink(t, dev.join(l)).with_context(|| format!("creating /dev/{l}"))?;
    }
    mount_fs(
        "devpts",
        &dev.join("pts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    )?;
    let shm_is_volume = cfg
        .container
        .tmpfs
        .iter()
        .any(|t| t.path == Path::new("/dev/shm"))
        || cfg.binds.iter().any(|(_, d)| d == Path::new("/dev/shm"));
    if !shm_is_volume {
        mount_fs("tmpfs", &dev.join("shm"), nosuid, "mode=1777,size=65536k")?;
    }
    Ok(())
}

/// Volumes and files the kubelet provides, in order, then the memory-backed volumes.
fn mount_volumes(root: &Path, cfg: &InitConfig) -> Result<()> {
    let c = &cfg.container;
    for (src, dst) in &cfg.binds {
        let target = inside(root, dst)?;
        let meta = fs::metadata(src)
            .with_context(|| format!("bind source {} of {}", src.display(), dst.display()))?;
        mount_point(&target, meta.is_dir())?;
        bind(src, &target, c.read_only_mounts.iter().any(|p| p == dst))?;
    }
    for t in &c.tmpfs {
        let target = inside(root, &t.path)?;
        mount_fs(
            "tmpfs",
            &target,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            &format!("mode={:o},gid={}", t.mode, t.gid),
        )?;
    }
    Ok(())
}

/// Into the new root, in `workdir`; the old one is detached, so no host path stays reachable.
fn enter_root(root: &Path, workdir: &Path) -> Result<()> {
    nix::unistd::chdir(root).with_context(|| format!("changing to {}", root.display()))?;
    nix::unistd::pivot_root(".", ".").context("pivot_root into the container root")?;
    umount2(".", MntFlags::MNT_DETACH).context("detaching the host's root")?;
    nix::unistd::chdir("/").context("changing to /")?;
    nix::unistd::chdir(workdir)
        .with_context(|| format!("changing to working directory {}", workdir.display()))
}

/// Enters the running container whose PID 1 is `pid` (this process is in its PID, network and
/// UTS namespaces already) and `exec`s `argv` as the container's user, with this process's
/// environment.
fn enter(config: &Path, pid: u32, argv: &[std::ffi::OsString]) -> Result<Never> {
    let cfg = read_config(config)?;
    let ns = fs::File::open(format!("/proc/{pid}/ns/mnt"))
        .with_context(|| format!("opening the mount namespace of pid {pid}"))?;
    let root = fs::File::open(format!("/proc/{pid}/root"))
        .with_context(|| format!("opening the root of pid {pid}"))?;
    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNS)
        .context("entering the container's mount namespace")?;
    nix::unistd::fchdir(std::os::fd::AsRawFd::as_raw_fd(&root))
        .context("changing to the container root")?;
    nix::unistd::chroot(".").context("chroot into the container root")?;
    if nix::unistd::chdir(&cfg.workdir).is_err() {
        nix::unistd::chdir("/").context("changing to /")?;
    }
    let argv: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let env: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let program = lookup(&argv, &env)?;
    drop_privileges(&cfg.container)?;
    exec(&program, &argv, &env)
}

/// Resolves the command's program in the container's `PATH`, as a runtime does before `exec`.
fn lookup(command: &[String], env: &[(String, String)]) -> Result<PathBuf> {
    let cmd = command
        .first()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| anyhow!("no command to run"))?;
    let ok = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        if ok(Path::new(cmd)) {
            return Ok(PathBuf::from(cmd));
        }
        bail!("exec: {cmd:?}: no such file or directory (or not executable) in the image");
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(DEFAULT_PATH);
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(cmd))
        .find(|p| ok(p))
        .ok_or_else(|| anyhow!("exec: {cmd:?}: executable file not found in $PATH ({path})"))
}

fn drop_privileges(c: &Container) -> Result<()> {
    use caps::{CapSet, Capability};
    let keep: Vec<Capability> = c
        .capabilities
        .iter()
        .map(|n| {
            n.parse::<Capability>()
                .map_err(|_| anyhow!("unknown capability {n}"))
        })
        .collect::<Result<_>>()?;
    let groups: Vec<Gid> = c.groups.iter().map(|&g| Gid::from_raw(g)).collect();
    nix::unistd::setgroups(&groups).context("setting the supplementary groups")?;
    let g = Gid::from_raw(c.gid);
    nix::unistd::setresgid(g, g, g).with_context(|| format!("setting gid {}", c.gid))?;
    for cap in caps::all() {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .with_context(|| format!("dropping {cap} from the bounding set"))?;
        }
    }
    caps::clear(None, CapSet::Inheritable).context("clearing the inheritable capabilities")?;
    caps::clear(None, CapSet::Ambient).context("clearing the ambient capabilities")?;
    let u = Uid::from_raw(c.uid);
    // Switching away from uid 0 clears the permitted and effective sets.
    nix::unistd::setresuid(u, u, u).with_context(|| format!("setting uid {}", c.uid))?;
    if c.uid == 0 {
        // Only what this process has can be kept (e.g. privileged on a host without some).
        let have =
            caps::read(None, CapSet::Permitted).context("reading the permitted capabilities")?;
        let set: caps::CapsHashSet = keep.iter().copied().filter(|c| have.contains(c)).collect();
        caps::set(None, CapSet::Effective, &set).context("setting the effective capabilities")?;
        caps::set(None, CapSet::Permitted, &set).context("setting the permitted capabilities")?;
    }
    if c.no_new_privs {
        nix::sys::prctl::set_no_new_privs().context("setting no_new_privs")?;
    }
    Ok(())
}

fn cstring(s: &[u8]) -> Result<CString> {
    CString::new(s).map_err(|_| anyhow!("{:?} contains a NUL byte", String::from_utf8_lossy(s)))
}

fn exec(program: &Path, argv: &[String], env: &[(String, String)]) -> Result<Never> {
    let prog = cstring(OsStr::as_bytes(program.as_os_str()))?;
    let args: Vec<CString> = argv
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<Result<_>>()?;
    let envp: Vec<CString> = env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
        .collect::<Result<_>>()?;
    let e = nix::unistd::execve(&prog, &args, &envp).err();
    Err(anyhow!(
        "exec {}: {}",
        program.display(),
        e.map(|e| e.to_string()).unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("run/x")).unwrap();
        fs::create_dir_all(r.join("etc")).unwrap();
        std::os::unix::fs::symlink("/run", r.join("var-run")).unwrap();
        std::os::unix::fs::symlink("../../../../etc", r.join("run/up")).unwrap();
        std::os::unix::fs::symlink("loop", r.join("loop")).unwrap();
        assert_eq!(inside(r, Path::new("/a/b")).unwrap(), r.join("a/b"));
        assert_eq!(inside(r, Path::new("/a/../../etc")).unwrap(), r.join("etc"));
        // Absolute links resolve inside the root, not on the host.
        assert_eq!(
            inside(r, Path::new("/var-run/x/new")).unwrap(),
            r.join("run/x/new")
        );
        assert_eq!(
            inside(r, Path::new("/run/up/passwd")).unwrap(),
            r.join("etc/passwd")
        );
        assert!(inside(r, Path::new("/loop/x")).is_err());
    }

    #[test]
    fn capability_names() {
        assert_eq!(cap_name("net_admin"), "CAP_NET_ADMIN");
        assert_eq!(cap_name("CAP_KILL"), "CAP_KILL");
        for n in DEFAULT_CAPABILITIES {
            assert!(n.parse::<caps::Capability>().is_ok(), "{n}");
        }
    }
}
