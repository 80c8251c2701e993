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

/// Exclusive lock shared by every process that creates networks or network namespaces.
pub(super) fn host_lock() -> Result<Flock<File>> {
    fs::create_dir_all(STATE_DIR).with_context(|| format!("creating {STATE_DIR}"))?;
    let path = Path::new(STATE_DIR).join("net.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", path.display()))
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
