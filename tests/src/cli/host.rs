//! What the commands ask of the host: root, and whether a process is alive.

use anyhow::{bail, Result};
use std::path::Path;

pub(super) fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the sandbox needs root (it creates network namespaces and a bridge); run it with sudo or as root");
    }
    Ok(())
}

pub(super) fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}
