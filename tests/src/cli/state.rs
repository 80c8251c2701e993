//! The state file: the running sandbox's API, network and pods, for the other commands.

use super::{PodLine, StateFile};
use crate::api::resources::PODS;
use crate::cluster::{self, Cluster};
use serde_json::Value;
use std::path::Path;

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
