//! What the workflow tests share (`prrte-k8s submit`, the Python module): a job whose pod-0
//! agent runs the DVM, its readiness in every pod, the results' JSON lines by index, and the
//! Python module's wheel.
use super::job::Job;
use super::output::wait_for_text;
use super::pod::JobSpec;
use super::setup::repo;
use crate::harness;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

impl<'a> JobSpec<'a> {
    /// `pods` pods of 2 CPUs whose pod-0 agent runs the DVM (`--dvm-head auto`), with the PRRTE
    /// prefix, the components and the job's secret in every pod's environment: what
    /// `prrte-k8s submit` and the Python module find the DVM and libpmix with.
    pub fn dvm_head(name: &'a str, pods: usize) -> Self {
        let mut spec = JobSpec::new(name, pods);
        spec.cpus = vec!["2"; pods];
        spec.agent_args = vec![vec!["--dvm-head".into(), "auto".into()]];
        spec.env.extend([
            (
                "PRRTE_K8S_PREFIX".into(),
                harness::prefix().display().to_string(),
            ),
            ("PRTE_PKGLIBDIR".into(), "@COMPONENTS@".into()),
            ("PRRTE_K8S_SECRET_FILE".into(), "@SECRET@".into()),
        ]);
        spec
    }
}

impl Job {
    /// Host pids of the live (not zombie) processes named `comm` in any pod.
    pub fn live_pids(&self, comm: &str) -> Result<Vec<u32>> {
        let mut live = Vec::new();
        for i in 0..self.pods.len() {
            live.extend(self.pids_in_pod(i, comm)?.into_iter().filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map(|s| !s.contains(") Z "))
                    .unwrap_or(false)
            }));
        }
        Ok(live)
    }

    /// Waits until the DVM's URI is published in every pod.
    pub fn wait_for_dvm(&self, limit: Duration) -> Result<()> {
        for i in 0..self.pods.len() {
            wait_for_text(&self.pod_tmp(i).join("dvm.uri"), "tcp4://", limit)?;
        }
        Ok(())
    }
}

/// The parseable result lines of `text`, by index; an index given twice is an error (every
/// task has exactly one result).
pub fn results_by_index(text: &str) -> Result<BTreeMap<usize, serde_json::Value>> {
    let mut by_index = BTreeMap::new();
    for l in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        let Some(i) = v["index"].as_u64() else {
            continue;
        };
        if by_index.insert(i as usize, v).is_some() {
            bail!("task {i} has more than one result");
        }
    }
    Ok(by_index)
}

/// The Python module's wheel, built with pip from the tree (or found in its cache) by
/// `adapter/python/build-wheel.sh`, as `make wheel` builds it but in the dev profile, whose
/// dependencies the test build has compiled already.
pub fn python_wheel() -> Result<PathBuf> {
    let script = repo().join("adapter/python/build-wheel.sh");
    let out = harness::run_with_timeout(
        {
            let mut c = std::process::Command::new("bash");
            c.arg(&script).env("PRRTE_K8S_WHEEL_PROFILE", "dev");
            c
        },
        Duration::from_secs(3000),
    )?;
    if !out.status.success() {
        bail!(
            "{} failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = String::from_utf8(out.stdout).context("the wheel's path")?;
    let wheel = PathBuf::from(path.trim());
    if !wheel.is_file() {
        bail!("{} printed no wheel: {path:?}", script.display());
    }
    Ok(wheel)
}
