//! A started job of agent pods and PRRTE runs in them.
use super::output::text;
use super::pod::{agent_pod, JobSpec};
use super::setup::{k8s_args, rbac_yaml, NS};
use crate::cluster::{Cluster, ClusterOptions};
use crate::harness::{self, TestDir};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

pub struct Job {
    pub name: String,
    pub dir: TestDir,
    pub cluster: Cluster,
    pub components: PathBuf,
    pub secret: PathBuf,
    /// Pod names in index order.
    pub pods: Vec<String>,
    /// Pod hostnames in index order.
    pub hostnames: Vec<String>,
}

/// What every job of agent pods starts from: its test directory, the components, the job's
/// secret, the agent and prted to run, and a sandbox cluster with the job's RBAC applied.
pub(super) struct Base {
    pub(super) dir: TestDir,
    pub(super) components: PathBuf,
    pub(super) secret: PathBuf,
    pub(super) agent: PathBuf,
    pub(super) prted: PathBuf,
    pub(super) cluster: Cluster,
}

impl Base {
    pub(super) async fn start(name: &str, max_pods: usize) -> Result<Base> {
        harness::require_prrte()?;
        let dir = TestDir::new(name)?;
        let components = harness::component_dir(dir.path())?;
        let secret = dir.secret("secret")?;
        let agent = harness::workspace_bin("prrte-k8s-agent")?;
        let prted = harness::prefix().join("bin/prted");
        let cluster = Cluster::start(ClusterOptions {
            dir: Some(dir.path().join("cluster")),
            max_pods,
            ..Default::default()
        })
        .await?;
        cluster
            .apply_yaml(&rbac_yaml(name)?)
            .context("applying prrte-config/k8s/rbac.yaml")?;
        Ok(Base {
            dir,
            components,
            secret,
            agent,
            prted,
            cluster,
        })
    }
}

impl Job {
    /// Start a sandbox cluster and a job of pods (plain Pods labelled like an Indexed Job's, so
    /// each can have its own resources), and wait until all are Ready.
    pub async fn start(spec: JobSpec<'_>) -> Result<Job> {
        let Base {
            dir,
            components,
            secret,
            agent,
            prted,
            cluster,
        } = Base::start(spec.name, spec.max_pods).await?;
        let tmp = dir.sub("podtmp")?;
        let mut docs = Vec::new();
        for i in 0..spec.pods {
            let p = spec
                .prted
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| prted.clone());
            let s = spec
                .agent_secret
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| secret.clone());
            let subst = [
                ("@COMPONENTS@", components.as_path()),
                ("@SECRET@", secret.as_path()),
            ];
            docs.push(serde_yaml::to_string(&agent_pod(
                spec.name, i, &spec, &agent, &p, &s, &tmp, &subst,
            ))?);
        }
        cluster.apply_yaml(&docs.join("---\n"))?;
        let mut job = Job {
            name: spec.name.to_string(),
            dir,
            cluster,
            components,
            secret,
            pods: Vec::new(),
            hostnames: Vec::new(),
        };
        job.refresh(spec.pods).await?;
        Ok(job)
    }

    /// A PRRTE command (prte, prterun, prun, pterm) run inside pod `index` with the pod's
    /// environment, the components, and a private TMPDIR.
    pub fn in_pod(&self, index: usize, tool: &str, args: &[&str]) -> Result<Command> {
        self.in_pod_with(index, tool, &[], args)
    }

    /// As [`in_pod`](Job::in_pod), with more variables (`NAME=VALUE`) in the tool's environment.
    pub fn in_pod_with(
        &self,
        index: usize,
        tool: &str,
        vars: &[String],
        args: &[&str],
    ) -> Result<Command> {
        let tmp = self.dir.sub(&format!("launcher-tmp-{index}"))?;
        let exe = harness::prefix().join("bin").join(tool);
        let mut argv: Vec<String> = vec![
            "env".into(),
            format!("TMPDIR={}", tmp.display()),
            format!("PRTE_PKGLIBDIR={}", self.components.display()),
            format!("PRTE_MCA_plm_k8s_secret_file={}", self.secret.display()),
        ];
        argv.extend(vars.iter().cloned());
        argv.push(exe.to_string_lossy().into_owned());
        argv.extend(args.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = argv.iter().map(|s| s.as_str()).collect();
        self.cluster.pod_exec(&self.pods[index], &refs)
    }

    /// Run any command in pod `index` with the pod's environment to completion (bounded).
    pub fn exec_in_pod(&self, index: usize, argv: &[&str], limit: Duration) -> Result<Output> {
        harness::run_with_timeout(self.cluster.pod_exec(&self.pods[index], argv)?, limit)
    }

    /// The per-pod directory (the pod's TMPDIR, `podtmp/<hostname>`) on the host.
    pub fn pod_tmp(&self, index: usize) -> PathBuf {
        self.dir.path().join("podtmp").join(&self.hostnames[index])
    }

    /// Run a PRRTE command in pod `index` to completion (bounded).
    pub fn run_in_pod(
        &self,
        index: usize,
        tool: &str,
        args: &[&str],
        limit: Duration,
    ) -> Result<Output> {
        harness::run_with_timeout(self.in_pod(index, tool, args)?, limit)
    }

    /// Host pids of `comm` processes in pod `index`.
    pub fn pids_in_pod(&self, index: usize, comm: &str) -> Result<Vec<u32>> {
        let pids = self.cluster.pod_host_pids(&self.pods[index])?;
        Ok(pids
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .map(|c| c.trim_end() == comm)
                    .unwrap_or(false)
            })
            .collect())
    }

    /// Every prted in any pod of the job.
    pub fn prteds(&self) -> Result<Vec<u32>> {
        let mut all = Vec::new();
        for i in 0..self.pods.len() {
            all.extend(self.pids_in_pod(i, "prted")?);
        }
        Ok(all)
    }

    /// Wait until no prted runs in any pod, or fail naming what is left.
    pub fn wait_no_prteds(&self, limit: Duration) -> Result<()> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = self.prteds()?;
            if left.is_empty() {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                bail!("prted processes still running after {limit:?}: {left:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One DVM start/stop in a job: what [`Job::dvm_cycle`] measured.
pub struct DvmCycle {
    /// From spawning prte in pod 0 until its stdout holds "DVM ready" (every prted reported).
    pub ready: Duration,
    /// What `at_ready` returned.
    pub note: String,
}

impl Job {
    /// `prterun` in pod 0 through our components ([`K8S`](super::K8S)) with `more`, to completion (bounded).
    pub fn prterun(&self, more: &[&str], limit: Duration) -> Result<Output> {
        self.run_in_pod(0, "prterun", &k8s_args(more), limit)
    }

    /// A DVM: `prte` in pod 0 through our components ([`K8S`](super::K8S)) with `more`, its output in
    /// `<dir>/prte.out|err`; returns it (guarded) once it printed "DVM ready" within `limit`.
    pub fn start_prte(&self, more: &[&str], limit: Duration) -> Result<harness::Guarded> {
        let cmd = self.in_pod(0, "prte", &k8s_args(more))?;
        let mut prte = harness::Guarded::spawn(cmd, "prte", self.dir.path())?;
        self.wait_dvm_ready(&mut prte, limit, &|| false)?;
        Ok(prte)
    }

    /// What a process spawned by [`harness::Guarded::spawn`] into the job's directory as `tag`
    /// has printed so far (stdout, then stderr).
    pub fn output_of(&self, tag: &str) -> String {
        let read = |ext: &str| {
            std::fs::read_to_string(self.dir.path().join(format!("{tag}.{ext}")))
                .unwrap_or_default()
        };
        format!("{}{}", read("out"), read("err"))
    }

    /// Wait until `prte` (spawned by [`harness::Guarded::spawn`] into the job's directory) has
    /// printed "DVM ready" (every prted reported); fails with its output if it exits first, if
    /// `limit` passes or when `cancelled` says so.
    fn wait_dvm_ready(
        &self,
        prte: &mut harness::Guarded,
        limit: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<()> {
        let tag = prte.what().to_string();
        let out = self.dir.path().join(format!("{tag}.out"));
        let output = || self.output_of(&tag);
        let t0 = std::time::Instant::now();
        loop {
            if std::fs::read_to_string(&out).is_ok_and(|t| t.contains("DVM ready")) {
                return Ok(());
            }
            if let Some(st) = prte.wait_timeout(Duration::ZERO)? {
                bail!(
                    "prte ({tag}) exited with {st} before \"DVM ready\":\n{}",
                    output()
                );
            }
            if cancelled() {
                bail!("interrupted");
            }
            if t0.elapsed() >= limit {
                bail!(
                    "prte ({tag}) printed no \"DVM ready\" within {limit:?}:\n{}",
                    output()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Start prte in pod 0 with `args` (plus `--report-uri`), wait (bounded by `limit`) for
    /// "DVM ready", run `at_ready` while the DVM is up, then end it with pterm and wait until
    /// prte has exited and no prted is left in any pod. prte's output goes to
    /// `<dir>/<tag>.out|err`. `cancel` ends the waits early (with an error).
    pub fn dvm_cycle(
        &self,
        tag: &str,
        args: &[String],
        limit: Duration,
        cancel: Option<&std::sync::atomic::AtomicBool>,
        at_ready: impl FnOnce(&Job) -> Result<String>,
    ) -> Result<DvmCycle> {
        let cancelled = || cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst));
        let uri = self.dir.path().join(format!("{tag}.uri"));
        let _ = std::fs::remove_file(&uri);
        let mut argv: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        argv.extend(["--report-uri", uri.to_str().unwrap()]);
        let cmd = self.in_pod(0, "prte", &argv)?;
        let output = || self.output_of(tag);
        let t0 = std::time::Instant::now();
        let mut prte = harness::Guarded::spawn(cmd, tag, self.dir.path())?;
        self.wait_dvm_ready(&mut prte, limit, &cancelled)?;
        let ready = t0.elapsed();
        let note = at_ready(self)?;
        let dvm = format!("file:{}", uri.display());
        let o = self.run_in_pod(0, "pterm", &["--dvm-uri", &dvm], Duration::from_secs(60))?;
        if !o.status.success() {
            bail!("pterm ({tag}) failed: {}\nprte:\n{}", text(&o), output());
        }
        match prte.wait_timeout(Duration::from_secs(30))? {
            Some(st) if st.success() => {}
            Some(st) => bail!("prte ({tag}) ended with {st} after pterm:\n{}", output()),
            None => bail!("prte ({tag}) still running 30s after pterm:\n{}", output()),
        }
        self.wait_no_prteds(Duration::from_secs(15))?;
        Ok(DvmCycle { ready, note })
    }
}

impl Job {
    /// Waits until the job has `n` Ready pods and takes them as its pods, in index order.
    pub async fn refresh(&mut self, n: usize) -> Result<()> {
        let ready = self
            .cluster
            .wait_ready(
                NS,
                &format!("batch.kubernetes.io/job-name={}", self.name),
                n,
                Duration::from_secs(60),
            )
            .await?;
        let mut pods: Vec<(usize, String, String)> = ready
            .iter()
            .map(|p| {
                let idx: usize = p["metadata"]["labels"]
                    ["batch.kubernetes.io/job-completion-index"]
                    .as_str()
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0);
                (
                    idx,
                    p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    p["spec"]["hostname"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        pods.sort();
        self.pods = pods.iter().map(|p| p.1.clone()).collect();
        self.hostnames = pods.iter().map(|p| p.2.clone()).collect();
        Ok(())
    }
}
