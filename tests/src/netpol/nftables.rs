//! Running `nft`, and the bridge-family tables it lists and deletes.

use anyhow::{anyhow, bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn nft_binary() -> Option<PathBuf> {
    ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

pub(crate) fn nft(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let bin = nft_binary().ok_or_else(|| anyhow!("nft is not installed (the sandbox enforces NetworkPolicies with nftables); install Debian's nftables (prrte-config/setup.sh does)"))?;
    let mut c = Command::new(&bin);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .with_context(|| format!("running {}", bin.display()))?;
    if let Some(text) = stdin {
        use std::io::Write;
        let mut si = child.stdin.take().expect("piped");
        si.write_all(text.as_bytes()).context("writing to nft")?;
    }
    let out = child.wait_with_output().context("waiting for nft")?;
    if !out.status.success() {
        bail!(
            "`nft {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Names of the bridge-family nftables tables starting with `prefix` (for leftovers).
pub fn tables(prefix: &str) -> Vec<String> {
    if nft_binary().is_none() {
        return Vec::new();
    }
    let Ok(out) = nft(&["list", "tables", "bridge"], None) else {
        return Vec::new();
    };
    out.lines()
        .filter_map(|l| l.strip_prefix("table bridge "))
        .map(|t| t.trim().to_string())
        .filter(|t| t.starts_with(prefix))
        .collect()
}

/// Deletes a bridge-family table (cleanup after a killed sandbox).
pub fn delete_table(name: &str) -> Result<()> {
    if !tables(name).iter().any(|t| t == name) {
        return Ok(());
    }
    nft(&["delete", "table", "bridge", name], None).map(|_| ())
}
