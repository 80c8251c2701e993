//! An MPI job in the sandbox: pods running the prrte-k8s agent, the launcher's RBAC from
//! prrte-config/k8s/rbac.yaml, and helpers to run PRRTE with the k8s components. Used by the
//! end-to-end tests and the launch benchmark.
use crate::cluster::{Cluster, ClusterOptions};
use crate::harness::{self, TestDir};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

pub const NS: &str = "default";

/// The options that make `prte` / `prterun` allocate through `ras k8s` and start its daemons
/// through `plm k8s` (tests run PRRTE as root inside the pods).
pub const K8S: [&str; 7] = [
    "--allow-run-as-root",
    "--prtemca",
    "ras",
    "k8s",
    "--prtemca",
    "plm",
    "k8s",
];

/// [`K8S`] followed by `more`.
pub fn k8s_args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    K8S.iter().chain(more).copied().collect()
}
/// The ServiceAccount and RoleBinding of prrte-config/k8s/rbac.yaml (`prrte-k8s manifest
/// --name mpi-demo --only rbac`).
pub const SERVICE_ACCOUNT: &str = "mpi-demo-prrte";
pub const ROLEBINDING: &str = "mpi-demo-prrte";

/// prrte-config/k8s/rbac.yaml for the job `job`: its Role reads the owner Job by name
/// (`resourceNames`), the file's own job's; here the rule names `job` instead.
pub fn rbac_yaml(job: &str) -> Result<String> {
    let path = repo().join("prrte-config/k8s/rbac.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let owner = "  resourceNames:\n  - mpi-demo\n  resources:\n  - jobs\n";
    if text.matches(owner).count() != 1 {
        bail!(
            "{}: no owner rule `{owner}` to point at the job {job}",
            path.display()
        );
    }
    Ok(text.replace(
        owner,
        &format!("  resourceNames:\n  - {job}\n  resources:\n  - jobs\n"),
    ))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

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

/// How the job's pods are made.
pub struct JobSpec<'a> {
    pub name: &'a str,
    pub pods: usize,
    /// CPU request of each pod, by index (default "1").
    pub cpus: Vec<&'a str>,
    /// prted executable each agent runs, by index (default the real prted).
    pub prted: Vec<Option<PathBuf>>,
    /// A secret file for the agents different from the launcher's, by index.
    pub agent_secret: Vec<Option<PathBuf>>,
    /// Extra arguments for the agent, by index (appended to its command line).
    pub agent_args: Vec<Vec<String>>,
    /// Extra environment of every pod (name, value); in values, `@COMPONENTS@` stands for the
    /// component directory and `@SECRET@` for the job's secret file (`$(VAR)` references to
    /// earlier variables such as TMPDIR are expanded as by the kubelet).
    pub env: Vec<(String, String)>,
    /// Argv put in front of every pod's agent command line (a wrapper that starts more in the
    /// pod and then execs the agent); `@COMPONENTS@`/`@SECRET@` are substituted as in `env`.
    pub entrypoint_prefix: Vec<String>,
    /// emptyDir volumes of every pod, by mount path.
    pub empty_dirs: Vec<String>,
    /// Pods the sandbox node runs at once (default 110, a kubelet's).
    pub max_pods: usize,
}

impl<'a> JobSpec<'a> {
    /// A job whose pods have what a persistent DVM's pod spec would set: the DVM URI file in
    /// each pod's TMPDIR, the PRRTE prefix, the components and the job's secret file.
    pub fn persistent_dvm(name: &'a str, pods: usize) -> Self {
        let mut spec = JobSpec::new(name, pods);
        spec.env = vec![
            (
                "PRRTE_K8S_DVM_URI_FILE".into(),
                "$(TMPDIR)/dvm/dvm.uri".into(),
            ),
            (
                "PRRTE_K8S_PREFIX".into(),
                harness::prefix().display().to_string(),
            ),
            ("PRTE_PKGLIBDIR".into(), "@COMPONENTS@".into()),
            ("PRRTE_K8S_SECRET_FILE".into(), "@SECRET@".into()),
        ];
        spec
    }

    pub fn new(name: &'a str, pods: usize) -> Self {
        JobSpec {
            name,
            pods,
            cpus: vec![],
            prted: vec![],
            agent_secret: vec![],
            agent_args: vec![],
            env: vec![],
            entrypoint_prefix: vec![],
            empty_dirs: vec![],
            max_pods: crate::cluster::kubelet::MAX_PODS,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn agent_pod(
    job: &str,
    i: usize,
    spec: &JobSpec,
    agent: &Path,
    prted: &Path,
    secret: &Path,
    tmp: &Path,
    subst: &[(&str, &Path)],
) -> Value {
    let cpu = spec.cpus.get(i).copied().unwrap_or("1");
    let host = format!("{job}-{i}");
    let podtmp = tmp.join(&host);
    std::fs::create_dir_all(&podtmp).unwrap();
    let command = agent_command(i, spec, agent, prted, secret, &podtmp, subst);
    let env = agent_env(spec, &podtmp, subst);
    let (volumes, mounts) = scratch_volumes(spec);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{job}-{i}-x{i:03}"),
            "labels": {
                "batch.kubernetes.io/job-name": job, "job-name": job,
                "batch.kubernetes.io/job-completion-index": i.to_string(),
                "app": job,
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": i.to_string()},
        },
        "spec": {
            "hostname": host, "subdomain": job,
            "serviceAccountName": SERVICE_ACCOUNT,
            "automountServiceAccountToken": true,
            "restartPolicy": "Never",
            "containers": [{
                "name": "worker",
                "command": command,
                "env": env,
                "resources": {"requests": {"cpu": cpu}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 7118}, "periodSeconds": 1},
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        }
    })
}

/// `v` with each placeholder of `subst` replaced by its path.
fn substituted(v: &str, subst: &[(&str, &Path)]) -> String {
    subst.iter().fold(v.to_string(), |v, (from, to)| {
        v.replace(from, to.to_str().unwrap())
    })
}

/// Pod `i`'s command: the spec's entrypoint prefix, then the agent with its prted, secret,
/// TMPDIR and the spec's extra arguments.
fn agent_command(
    i: usize,
    spec: &JobSpec,
    agent: &Path,
    prted: &Path,
    secret: &Path,
    podtmp: &Path,
    subst: &[(&str, &Path)],
) -> Vec<String> {
    let mut command: Vec<String> = spec
        .entrypoint_prefix
        .iter()
        .map(|a| substituted(a, subst))
        .collect();
    command.extend(
        [
            agent,
            Path::new("--prted"),
            prted,
            Path::new("--secret-file"),
            secret,
            Path::new("--tmpdir"),
            podtmp,
        ]
        .iter()
        .map(|p| p.to_str().unwrap().to_string()),
    );
    command.extend(["--kill-grace".to_string(), "2".into()]);
    command.extend(spec.agent_args.get(i).cloned().unwrap_or_default());
    command
}

/// A pod's environment: its IP and name, its own TMPDIR and DVM URI file, the spec's
/// variables.
fn agent_env(spec: &JobSpec, podtmp: &Path, subst: &[(&str, &Path)]) -> Vec<Value> {
    let mut env = vec![
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "TMPDIR", "value": podtmp.to_str().unwrap()}),
        // pods share the host's file system here: keep each pod's DVM URI file its own
        json!({"name": "PRRTE_K8S_DVM_URI_FILE", "value": podtmp.join("dvm.uri").to_str().unwrap()}),
    ];
    env.extend(
        spec.env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": substituted(v, subst)})),
    );
    env
}

/// The spec's emptyDir volumes and their mounts.
fn scratch_volumes(spec: &JobSpec) -> (Vec<Value>, Vec<Value>) {
    let volumes: Vec<Value> = (0..spec.empty_dirs.len())
        .map(|n| json!({"name": format!("scratch-{n}"), "emptyDir": {}}))
        .collect();
    let mounts: Vec<Value> = spec
        .empty_dirs
        .iter()
        .enumerate()
        .map(|(n, p)| json!({"name": format!("scratch-{n}"), "mountPath": p}))
        .collect();
    (volumes, mounts)
}

/// What every job of agent pods starts from: its test directory, the components, the job's
/// secret, the agent and prted to run, and a sandbox cluster with the job's RBAC applied.
struct Base {
    dir: TestDir,
    components: PathBuf,
    secret: PathBuf,
    agent: PathBuf,
    prted: PathBuf,
    cluster: Cluster,
}

impl Base {
    async fn start(name: &str, max_pods: usize) -> Result<Base> {
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
    /// `prterun` in pod 0 through our components ([`K8S`]) with `more`, to completion (bounded).
    pub fn prterun(&self, more: &[&str], limit: Duration) -> Result<Output> {
        self.run_in_pod(0, "prterun", &k8s_args(more), limit)
    }

    /// A DVM: `prte` in pod 0 through our components ([`K8S`]) with `more`, its output in
    /// `<dir>/prte.out|err`; returns it (guarded) once it printed "DVM ready" within `limit`.
    pub fn start_prte(&self, more: &[&str], limit: Duration) -> Result<harness::Guarded> {
        let cmd = self.in_pod(0, "prte", &k8s_args(more))?;
        let mut prte = harness::Guarded::spawn(cmd, "prte", self.dir.path())?;
        self.wait_dvm_ready(&mut prte, limit, &|| false)?;
        Ok(prte)
    }

    /// What a process spawned by [`harness::Guarded::spawn`] into the job's directory as `tag`
    /// has printed so far (stdout, then stderr).
    fn output_of(&self, tag: &str) -> String {
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

/// An elastic job: an Indexed Job object (the sandbox's Job controller makes its pods, also
/// the ones a growth adds) whose pod template is [`JobSpec`]'s pod of index 0 with the
/// per-pod parts (TMPDIR, the DVM URI file, `--tmpdir`) taken from the pod's completion index,
/// annotated with `prrte-k8s.io/max-pods` as `prrte-k8s manifest --elastic` renders it, and a
/// Role that may patch it. `spec.cpus[0]` and `spec.agent_args[0]` hold for every pod.
pub struct ElasticJob;

/// The env var of the template holding the pod's completion index.
const INDEX_ENV: &str = "PRRTE_K8S_TEST_INDEX";

impl ElasticJob {
    pub async fn start(spec: JobSpec<'_>, max_pods: usize) -> Result<Job> {
        let Base {
            dir,
            components,
            secret,
            agent,
            prted,
            cluster,
        } = Base::start(spec.name, spec.max_pods.max(max_pods)).await?;
        cluster.apply_yaml(&grow_rbac_yaml(spec.name))?;
        let tmp = dir.sub("podtmp")?;
        for i in 0..max_pods {
            std::fs::create_dir_all(tmp.join(format!("{}-{i}", spec.name)))?;
        }
        let subst = [
            ("@COMPONENTS@", components.as_path()),
            ("@SECRET@", secret.as_path()),
        ];
        let pod = agent_pod(spec.name, 0, &spec, &agent, &prted, &secret, &tmp, &subst);
        let job = elastic_job(spec.name, spec.pods, max_pods, pod, &tmp)?;
        cluster.apply_yaml(&serde_yaml::to_string(&job)?)?;
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
}

/// A Role and RoleBinding letting the job's service account patch its Job (what `manifest
/// --elastic` adds to the Role).
fn grow_rbac_yaml(job: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {job}-grow\nrules:\n- apiGroups: [batch]\n  resources: [jobs]\n  resourceNames: [{job}]\n  verbs: [get, patch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {job}-grow\nsubjects:\n- kind: ServiceAccount\n  name: {SERVICE_ACCOUNT}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {job}-grow\n"
    )
}

/// The Indexed Job whose template is `pod` (index 0's) made index-independent.
fn elastic_job(name: &str, pods: usize, max: usize, pod: Value, tmp: &Path) -> Result<Value> {
    let own = format!("{}/{name}-0", tmp.display());
    let each = format!("{}/{name}-$({INDEX_ENV})", tmp.display());
    let mut spec = pod["spec"].clone();
    if let Some(m) = spec.as_object_mut() {
        m.remove("hostname");
    }
    let text = serde_json::to_string(&spec)?.replace(&own, &each);
    let mut spec: Value = serde_json::from_str(&text)?;
    let env = spec["containers"][0]["env"]
        .as_array_mut()
        .context("the pod's env")?;
    env.insert(
        0,
        json!({"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}),
    );
    Ok(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {"prrte-k8s.io/max-pods": max.to_string()}},
        "spec": {
            "completionMode": "Indexed", "completions": pods, "parallelism": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        }
    }))
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
