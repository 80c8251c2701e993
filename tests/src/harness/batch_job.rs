//! A batch job the way a user runs one: `prrte-k8s manifest ... -- COMMAND | kubectl apply -f
//! -` against a sandbox cluster of its own (the example application image's pods), then
//! `kubectl` and the stored objects to follow it. The end-to-end batch tests share it.

use crate::api::resources::{JOBS, JOBSETS, PODS};
use crate::cluster::{Cluster, ClusterOptions};
use crate::harness::{self, TestDir};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The namespace the jobs run in.
pub const NS: &str = "default";
/// The example application image `make image` builds.
pub const APP: &str = "localhost/prrte-k8s-allreduce:latest";

/// A command's exit status, stdout and stderr, for failure messages.
pub fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `obj`'s condition of type `ty` when it is True.
pub fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == ty && c["status"] == "True"))
}

pub struct BatchJob {
    /// The name given to `prrte-k8s manifest --name`: the Job's, or the JobSet's.
    pub name: String,
    /// The Job whose pods these are (`batch.kubernetes.io/job-name`): `name`, or a JobSet's
    /// child Job `NAME-node-0`.
    pub job: String,
    pub cluster: Cluster,
    pub kubectl: PathBuf,
    /// The manifest as applied.
    pub yaml: String,
    pub dir: TestDir,
}

impl BatchJob {
    /// Starts a sandbox cluster and applies `prrte-k8s manifest --name NAME --pods N ARGS --
    /// COMMAND` through `kubectl apply -f -` (no COMMAND: an interactive job).
    pub async fn start(name: &str, pods: u32, args: &[&str], command: &[&str]) -> Result<BatchJob> {
        Self::start_edited(name, pods, args, command, |_, y| Ok(y)).await
    }

    /// As [`BatchJob::start`], the rendered manifest first passed through `edit` (given the
    /// test's directory), as a user adds to it (a volume...) before applying it.
    pub async fn start_edited(
        name: &str,
        pods: u32,
        args: &[&str],
        command: &[&str],
        edit: impl FnOnce(&TestDir, String) -> Result<String>,
    ) -> Result<BatchJob> {
        if crate::images::inspect(APP)?.is_none() {
            bail!("the image {APP} is not in the local store; run `make image`");
        }
        let kubectl =
            crate::harness::kubectl::find().context("no kubectl; run prrte-config/setup.sh")?;
        let dir = TestDir::new(name)?;
        let cluster = Cluster::start(ClusterOptions {
            dir: Some(dir.path().join("cluster")),
            ..Default::default()
        })
        .await?;
        let yaml = edit(&dir, render(name, pods, args, command)?)?;
        let job = if yaml.contains("\nkind: JobSet\n") {
            format!("{name}-node-0")
        } else {
            name.to_string()
        };
        let job = BatchJob {
            name: name.to_string(),
            job,
            cluster,
            kubectl,
            yaml,
            dir,
        };
        // `... | kubectl apply -f -`
        let mut child = job
            .kubectl_cmd(&["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawn kubectl apply")?;
        child.stdin.take().unwrap().write_all(job.yaml.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl apply -f - failed: {}\nmanifest:\n{}",
                text(&out),
                job.yaml
            );
        }
        Ok(job)
    }
    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.env("KUBECONFIG", self.cluster.kubeconfig()).args(args);
        c
    }

    pub fn kubectl(&self, args: &[&str], limit: Duration) -> Result<Output> {
        harness::run_with_timeout(self.kubectl_cmd(args), limit)
    }

    /// `kubectl wait --for=condition=<condition> job/<name>` within `secs`; panics with the
    /// Job's status when the condition is not reached.
    pub fn wait_for_condition(&self, condition: &str, secs: u64) {
        let out = self
            .kubectl(
                &[
                    "wait",
                    &format!("--for=condition={condition}"),
                    &format!("job/{}", self.job),
                    &format!("--timeout={secs}s"),
                ],
                Duration::from_secs(secs + 20),
            )
            .unwrap();
        assert!(
            out.status.success(),
            "Job {} not {condition} within {secs} s: {}\n{}",
            self.job,
            text(&out),
            self.describe()
        );
    }

    /// The job's pods as stored, by completion index.
    pub fn pods(&self) -> Vec<Arc<Value>> {
        let mut pods: Vec<Arc<Value>> = self
            .cluster
            .store()
            .list(&PODS, Some(NS), &Default::default())
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == self.job.as_str()
            })
            .collect();
        pods.sort_by_key(|p| {
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap_or("")
                .parse::<u32>()
                .unwrap_or(u32::MAX)
        });
        pods
    }

    pub fn pod_name(p: &Value) -> String {
        p["metadata"]["name"].as_str().unwrap_or("").to_string()
    }

    pub fn describe(&self) -> String {
        let job = self
            .cluster
            .store()
            .get(&JOBS, NS, &self.job)
            .map(|j| serde_json::to_string_pretty(&j["status"]).unwrap_or_default());
        let pods: Vec<String> = self
            .pods()
            .iter()
            .map(|p| {
                let log = self
                    .cluster
                    .pod_log(NS, &Self::pod_name(p))
                    .and_then(|l| std::fs::read_to_string(l).ok())
                    .unwrap_or_default();
                format!(
                    "{} {} {}\n{}",
                    Self::pod_name(p),
                    p["status"]["phase"],
                    p.pointer("/status/containerStatuses/0/state")
                        .map(|s| s.to_string())
                        .unwrap_or_default(),
                    log
                )
            })
            .collect();
        let jobset = self
            .cluster
            .store()
            .get(&JOBSETS, NS, &self.name)
            .map(|j| format!("jobset status: {}\n", j["status"]))
            .unwrap_or_default();
        format!("{jobset}job status: {job:?}\npods:\n{}", pods.join("\n"))
    }

    /// Waits until every pod of the job reached `count` processes named `comm` in total.
    pub fn wait_for_procs(
        &self,
        comm: &str,
        per_pod: &[usize],
        limit: Duration,
    ) -> Result<Vec<u32>> {
        let deadline = Instant::now() + limit;
        loop {
            let pods = self.pods();
            let mut all = Vec::new();
            let mut ok = pods.len() == per_pod.len();
            for (i, p) in pods.iter().enumerate() {
                let pids: Vec<u32> = self
                    .cluster
                    .pod_host_pids(&Self::pod_name(p))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|pid| {
                        std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .is_ok_and(|c| c.trim_end() == comm)
                    })
                    .collect();
                ok &= pids.len() >= per_pod.get(i).copied().unwrap_or(0);
                all.extend(pids);
            }
            if ok {
                return Ok(all);
            }
            if Instant::now() >= deadline {
                bail!(
                    "not every pod runs its {comm} processes within {limit:?}:\n{}",
                    self.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Nothing of the job may be left running: every pod is gone or finished, and no process
    /// is left in any of them.
    pub fn assert_nothing_left(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let running: Vec<String> = self
                .pods()
                .iter()
                .filter(|p| {
                    !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                        || self
                            .cluster
                            .pod_host_pids(&Self::pod_name(p))
                            .is_ok_and(|v| !v.is_empty())
                })
                .map(|p| Self::pod_name(p))
                .collect();
            if running.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pods still running after {limit:?}: {running:?}\n{}",
                self.describe()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `prrte-k8s manifest --name NAME --pods N` with the example image (never pulled, the agents'
/// `--kill-grace` 2 s), `args`, then `-- COMMAND` if any: the manifest.
pub fn render(name: &str, pods: u32, args: &[&str], command: &[&str]) -> Result<String> {
    let pods = pods.to_string();
    let mut argv: Vec<&str> = vec!["manifest", "--name", name, "--pods", &pods];
    argv.extend([
        "--image",
        APP,
        "--image-pull-policy",
        "Never",
        "--env",
        "PRRTE_K8S_AGENT_KILL_GRACE=2",
    ]);
    argv.extend(args);
    if !command.is_empty() {
        argv.push("--");
        argv.extend(command);
    }
    let mut c = Command::new(harness::workspace_bin("prrte-k8s")?);
    c.args(&argv);
    let out = harness::run_with_timeout(c, Duration::from_secs(30))?;
    if !out.status.success() {
        bail!("prrte-k8s manifest failed: {}", text(&out));
    }
    Ok(String::from_utf8(out.stdout)?)
}
