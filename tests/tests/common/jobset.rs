//! A sandbox cluster of its own (with its JobSet controller) and kubectl on it, for the tests
//! that apply JobSets and run them with the inject image: applying, waiting for a JobSet's end,
//! its pods by replicated job, their logs, and a description of it all for failure messages.

use anyhow::{bail, Context, Result};
use sandbox::api::resources::{JOBSETS, PODS};
use sandbox::app_images::INJECT_IMAGE;
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::TestDir;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// kubectl's output, for messages.
pub fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A sandbox cluster of its own and kubectl on it; `ns` is where its JobSets are.
pub struct JobSetSandbox {
    pub cluster: Cluster,
    pub kubectl: PathBuf,
    pub dir: TestDir,
    pub ns: String,
    /// The replicated jobs whose pods [`JobSetSandbox::describe`] shows.
    pub replicated_jobs: Vec<String>,
    /// The container whose log [`JobSetSandbox::logs`] reads.
    pub container: String,
}

impl JobSetSandbox {
    /// Starts the cluster; fails, saying what to do, without the inject image or kubectl.
    pub async fn start(
        test: &str,
        ns: &str,
        replicated_jobs: &[&str],
        container: &str,
    ) -> Result<JobSetSandbox> {
        if sandbox::images::inspect(INJECT_IMAGE)?.is_none() {
            bail!("the image {INJECT_IMAGE} is not in the local store; run `make image`");
        }
        let kubectl =
            sandbox::harness::kubectl::find().context("no kubectl; run prrte-config/setup.sh")?;
        let dir = TestDir::new(test)?;
        let cluster = Cluster::start(ClusterOptions {
            dir: Some(dir.path().join("cluster")),
            ..Default::default()
        })
        .await?;
        Ok(JobSetSandbox {
            cluster,
            kubectl,
            dir,
            ns: ns.to_string(),
            replicated_jobs: replicated_jobs.iter().map(|s| s.to_string()).collect(),
            container: container.to_string(),
        })
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        sandbox::harness::kubectl::with_input(&self.kubectl, &self.cluster, args, stdin)
    }

    /// `kubectl ARGS` with `stdin`, which must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let out = self.kubectl(args, stdin)?;
        if !out.status.success() {
            bail!("kubectl {} failed: {}", args.join(" "), text(&out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until the JobSet has finished (`Completed` or `Failed`); its condition's type.
    /// `check` runs at every look and stops the wait with its error.
    pub fn wait_finished_checking(
        &self,
        name: &str,
        secs: u64,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            check()?;
            let js = self.cluster.store().get(&JOBSETS, &self.ns, name);
            let ended = js.as_ref().ok().and_then(|j| {
                j["status"]["conditions"].as_array()?.iter().find_map(|c| {
                    (c["status"] == "True" && (c["type"] == "Completed" || c["type"] == "Failed"))
                        .then(|| c["type"].as_str().unwrap_or("").to_string())
                })
            });
            if let Some(e) = ended {
                return Ok(e);
            }
            if Instant::now() >= deadline {
                bail!(
                    "JobSet {name} not finished within {secs} s\n{}",
                    self.describe(name)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the JobSet has finished (`Completed` or `Failed`); its condition's type.
    pub fn wait_finished(&self, name: &str, secs: u64) -> Result<String> {
        self.wait_finished_checking(name, secs, || Ok(()))
    }

    /// The JobSet's pods of the replicated job `rj`, by name.
    pub fn pods(&self, name: &str, rj: &str) -> Vec<Arc<Value>> {
        let mut pods: Vec<Arc<Value>> = self
            .cluster
            .store()
            .list(&PODS, Some(&self.ns), &Default::default())
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == name
                    && p["metadata"]["labels"][REPLICATED_JOB] == rj
            })
            .collect();
        pods.sort_by_key(|p| pod_name(p));
        pods
    }

    /// The log of the pod's container (or why it could not be read).
    pub fn logs(&self, pod: &str) -> String {
        match self.kubectl(&["logs", "-n", &self.ns, pod, "-c", &self.container], None) {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            Ok(o) => format!("(kubectl logs {pod} failed: {})", text(&o)),
            Err(e) => format!("(kubectl logs {pod}: {e:#})"),
        }
    }

    /// The JobSet's status and its pods' phases and logs.
    pub fn describe(&self, name: &str) -> String {
        let status = self
            .cluster
            .store()
            .get(&JOBSETS, &self.ns, name)
            .map(|j| serde_json::to_string_pretty(&j["status"]).unwrap_or_default());
        let pods: Vec<String> = self
            .replicated_jobs
            .iter()
            .flat_map(|rj| self.pods(name, rj))
            .map(|p| {
                let n = pod_name(&p);
                format!("== {n} {}\n{}", p["status"]["phase"], self.logs(&n))
            })
            .collect();
        format!("jobset status: {status:?}\npods:\n{}", pods.join("\n"))
    }
}

pub fn pod_name(p: &Value) -> String {
    p["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// The pod's host name (an Indexed Job's pod has one of its Job and index).
pub fn hostname(p: &Value) -> String {
    p["spec"]["hostname"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| pod_name(p))
}
