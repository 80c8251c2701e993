//! Host tools (`ip`, `unshare`, `nsenter`, ...), the host-wide lock, and the state directory.

use super::names::{STATE_DIR, SYSTEM_PATH};
use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub(super) struct Tools {
    pub(super) ip: PathBuf,
    pub(super) unshare: PathBuf,
    pub(super) nsenter: PathBuf,
    pub(super) sh: PathBuf,
    pub(super) env: PathBuf,
}

pub(super) fn find_tool(name: &str) -> Option<PathBuf> {
    SYSTEM_PATH
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

pub(super) fn tools() -> Result<&'static Tools> {
    static TOOLS: OnceLock<std::result::Result<Tools, String>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let need = |n: &str| {
                find_tool(n).ok_or_else(|| {
                    format!(
                        "podnet needs `{n}` (iproute2 / util-linux / coreutils) in {SYSTEM_PATH}"
                    )
                })
            };
            // Used by the pod setup program.
            for n in [
                "mount", "findmnt", "stat", "readlink", "dirname", "mkdir", "ln",
            ] {
                need(n)?;
            }
            Ok(Tools {
                ip: need("ip")?,
                unshare: need("unshare")?,
                nsenter: need("nsenter")?,
                sh: need("sh")?,
                env: need("env")?,
            })
        })
        .as_ref()
        .map_err(|e| anyhow!("{e}"))
}

/// Runs a host tool, returns its stdout; a non-zero exit becomes an error carrying stderr.
pub(super) fn run(program: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "`{} {}` failed ({}): {}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn ip(args: &[&str]) -> Result<String> {
    run(&tools()?.ip, args)
}

/// `ip link del`, treating "already gone" as success.
pub(super) fn delete_link(name: &str) -> Result<()> {
    if !Path::new("/sys/class/net").join(name).exists() {
        return Ok(());
    }
    match ip(&["link", "del", "dev", name]) {
        Ok(_) => Ok(()),
        Err(_) if !Path::new("/sys/class/net").join(name).exists() => Ok(()),
        Err(e) => Err(e),
    }
}

/// `ip netns del`, treating "already gone" as success.
pub(super) fn delete_netns(name: &str) -> Result<()> {
    let path = Path::new("/run/netns").join(name);
    if !path.exists() {
        return Ok(());
    }
    match ip(&["netns", "del", name]) {
        Ok(_) => Ok(()),
        Err(_) if !path.exists() => Ok(()),
        Err(e) => Err(e),
    }
}

pub(super) fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "sandbox pods need root (network, mount, UTS and PID namespaces, bridges, veths); \
             run as root"
        );
    }
    Ok(())
}

/// Locks the file at `path` (created with its directory if missing; close-on-exec) as `how`.
fn lock_file(path: &Path, how: FlockArg) -> Result<Flock<File>> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    Flock::lock(file, how).map_err(|(_, e)| anyhow!("locking {}: {e}", path.display()))
}

/// Exclusive lock shared by every process that creates networks or network namespaces.
pub(super) fn host_lock() -> Result<Flock<File>> {
    lock_file(
        &Path::new(STATE_DIR).join("net.lock"),
        FlockArg::LockExclusive,
    )
}

/// Where the networks' owner locks live: `/run/prrte-k8s-sandbox/nets`.
pub(super) fn owner_lock_dir() -> PathBuf {
    Path::new(STATE_DIR).join("nets")
}

/// Where a network's owner lock lives: `/run/prrte-k8s-sandbox/nets/<prefix>.lock`.
pub(super) fn owner_lock_path(prefix: &str) -> PathBuf {
    owner_lock_dir().join(format!("{prefix}.lock"))
}

/// Takes the owner lock of the network named `prefix` (without waiting). The process holding
/// it owns everything named with the prefix; the kernel releases it when that process ends,
/// however it ends, which is how [`super::cleanup_dead_networks`] tells a live network from
/// what a killed one left. The file is opened close-on-exec: pods do not inherit it.
pub(super) fn take_owner_lock(prefix: &str) -> Result<Flock<File>> {
    lock_file(&owner_lock_path(prefix), FlockArg::LockExclusiveNonblock)
}

/// Whether a live process holds the owner lock of the network named `prefix`. A network with
/// no lock file has no owner (as the names made before owner locks existed).
pub(super) fn owner_alive(prefix: &str) -> bool {
    let path = owner_lock_path(prefix);
    let Ok(file) = OpenOptions::new().write(true).open(&path) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

pub(super) fn pods_state_dir() -> PathBuf {
    Path::new(STATE_DIR).join("pods")
}

pub(super) fn list_dir_names(dir: &str) -> Vec<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points below `dir` (not `dir` itself) in this process's mount namespace, from
/// `/proc/self/mountinfo` (whose octal escapes, e.g. `\040` for a space, are decoded).
pub(super) fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mount_path(m)))
        .filter(|m| m.starts_with(dir) && m != dir)
        .collect()
}

fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches everything mounted below `dir` (deepest first), so that `dir` can be removed.
pub(super) fn unmount_below(dir: &Path) -> Result<()> {
    let mut mounts = mounts_below(dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    let mut errors = Vec::new();
    for m in mounts {
        if let Err(e) = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH) {
            if e != nix::errno::Errno::EINVAL && e != nix::errno::Errno::ENOENT {
                errors.push(format!("unmounting {}: {e}", m.display()));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        bail!("{}", errors.join("; "))
    }
}
