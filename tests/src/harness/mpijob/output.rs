//! Reading what the job's programs printed.
use crate::harness::TestDir;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

pub fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `allreduce` lines of an MPI run: (rank, size, host, ok).
pub fn allreduce_lines(stdout: &str) -> Vec<(usize, usize, String, bool)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("allreduce "))
        .map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .unwrap_or("")
                    .to_string()
            };
            (
                field("rank").parse().unwrap_or(usize::MAX),
                field("size").parse().unwrap_or(0),
                field("host"),
                l.ends_with(" OK"),
            )
        })
        .collect()
}

/// Wait until a file holds `needle` in a complete line (bounded); its complete lines.
pub fn wait_for_text(path: &Path, needle: &str, limit: Duration) -> Result<String> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let t = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines count: a file read while its writer is at it may end mid-line.
        let whole = t.rfind('\n').map_or("", |end| &t[..=end]);
        if whole.contains(needle) {
            return Ok(whole.to_string());
        }
        if std::time::Instant::now() >= deadline {
            bail!(
                "{:?} not seen in {} within {limit:?}; it holds:\n{t}",
                needle,
                path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A small executable script in the test directory.
pub fn script(dir: &TestDir, name: &str, body: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.path().join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n"))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    Ok(p)
}
