//! The state file: the running sandbox's API, network and pods, for the other commands; the
//! running sandbox it names, and the cleanup after one that died.

use super::host::pid_alive;
use crate::api::resources::PODS;
use crate::cluster::{self, Cluster};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What `state.json` holds.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct StateFile {
    pub pid: u32,
    pub url: String,
    pub kubeconfig: PathBuf,
    pub ca: PathBuf,
    pub gateway: String,
    pub network_prefix: String,
    pub node: String,
    pub pods: Vec<PodLine>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct PodLine {
    pub namespace: String,
    pub name: String,
    pub ip: String,
    pub index: String,
    pub phase: String,
    pub ready: bool,
    /// Where the pod's exec information is (absent unless the pod runs).
    pub exec: Option<PathBuf>,
}

pub(super) fn read_state(dir: &Path) -> Option<StateFile> {
    let text = std::fs::read(dir.join("state.json")).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The running sandbox's state, or a clear error.
pub(super) fn running(dir: &Path) -> Result<StateFile> {
    match read_state(dir) {
        Some(s) if pid_alive(s.pid) => Ok(s),
        Some(s) => bail!(
            "the sandbox in {} is not running (server pid {} is gone; see {}); run `prrte-k8s-sandbox down --state {}` to clean up",
            dir.display(),
            s.pid,
            dir.join("sandbox.log").display(),
            dir.display()
        ),
        None => bail!("no sandbox is running in {} (start one with `prrte-k8s-sandbox up --state {}`)", dir.display(), dir.display()),
    }
}

pub(super) fn cleanup_stale(dir: &Path, s: &StateFile) -> Result<()> {
    if !s.network_prefix.is_empty() {
        let l = crate::runtime::podnet::cleanup_leftovers(&s.network_prefix)
            .context("removing what a dead sandbox left behind")?;
        if !l.is_empty() {
            eprintln!("prrte-k8s-sandbox: removed leftovers of a dead sandbox: {l}");
        }
    }
    for f in ["state.json", "control.sock"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    Ok(())
}
fn pod_index(p: &Value) -> String {
    p.pointer("/metadata/annotations/batch.kubernetes.io~1job-completion-index")
        .or_else(|| p.pointer("/metadata/labels/apps.kubernetes.io~1pod-index"))
        .and_then(Value::as_str)
        .unwrap_or("-")
        .to_string()
}

pub(super) fn snapshot(c: &Cluster, dir: &Path) -> StateFile {
    let pods = c
        .store()
        .list(&PODS, None, &Default::default())
        .map(|l| l.items)
        .unwrap_or_default();
    let mut lines: Vec<PodLine> = pods
        .iter()
        .map(|p| {
            let ns = p["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let exec = c
                .pod_dir(&ns, &name)
                .map(|d| d.join("exec.json"))
                .filter(|p| p.is_file());
            PodLine {
                ip: p["status"]["podIP"].as_str().unwrap_or("").to_string(),
                index: pod_index(p),
                phase: p["status"]["phase"]
                    .as_str()
                    .unwrap_or("Pending")
                    .to_string(),
                ready: cluster::pod_ready(p),
                exec,
                namespace: ns,
                name,
            }
        })
        .collect();
    lines.sort_by(|a, b| {
        (a.namespace.as_str(), index_key(&a.index), a.name.as_str()).cmp(&(
            b.namespace.as_str(),
            index_key(&b.index),
            b.name.as_str(),
        ))
    });
    StateFile {
        pid: std::process::id(),
        url: c.api().url(),
        kubeconfig: dir.join("kubeconfig"),
        ca: c.api().ca_pem_path().to_path_buf(),
        gateway: c.network().gateway().to_string(),
        network_prefix: c.network().prefix(),
        node: c.node_name().to_string(),
        pods: lines,
    }
}

fn index_key(i: &str) -> u64 {
    i.parse().unwrap_or(u64::MAX)
}

pub(super) fn write_state(dir: &Path, s: &StateFile) {
    let tmp = dir.join("state.json.tmp");
    if std::fs::write(&tmp, serde_json::to_vec_pretty(s).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join("state.json"));
    }
}
