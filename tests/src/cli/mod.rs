//! The `prrte-k8s-sandbox` command line: start a sandbox cluster in the background, run
//! commands in its pods, evict pods, and tear it down.

use crate::api::resources::{JOBS, PODS, STATEFULSETS};
use crate::api::{ApiOptions, ApiServer, Obj};
use crate::cluster::{self, Cluster, ClusterOptions, ExecInfo};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ABOUT: &str =
    "A single-machine Kubernetes sandbox for prrte-k8s: an API server that real clients \
(kube-rs, kubectl) accept, and pods that are Linux namespaces on a bridge. Needs root.";

const AFTER: &str = "\
State directory (--state, else $PRRTE_K8S_SANDBOX_STATE, else ./.sandbox):
  kubeconfig      admin kubeconfig (server on the pod network's gateway, reachable from host and pods)
  state.json      server pid, API URL, network prefix and one entry per pod
  sandbox.log     log of the background server
  workload.yaml   the manifests `up` applied
  control.sock    how exec/kill/status/down talk to the background server
  cluster/        CA, pod directories (service-account files, volumes, container logs)

Example:
  prrte-k8s-sandbox up --pods 4 --job mpi -- sleep infinity
  prrte-k8s-sandbox exec mpi-0-xxxxx -- hostname
  KUBECONFIG=.sandbox/kubeconfig kubectl get pods -o wide
  prrte-k8s-sandbox kill mpi-1-yyyyy
  prrte-k8s-sandbox down";

#[derive(Parser, Debug)]
#[command(name = "prrte-k8s-sandbox", version, about = ABOUT, after_help = AFTER)]
pub struct Cli {
    /// State directory of the sandbox.
    #[arg(
        long,
        global = true,
        env = "PRRTE_K8S_SANDBOX_STATE",
        default_value = ".sandbox"
    )]
    pub state: PathBuf,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Start a sandbox in the background, apply the workload, wait until every pod is Ready,
    /// and print the kubeconfig path and one line per pod: NAME IP INDEX.
    Up(UpArgs),
    /// Run a command inside a pod's namespaces with the pod's environment; stdin, stdout,
    /// stderr and the exit status are passed through.
    Exec {
        /// Pod name, or NAMESPACE/NAME.
        pod: String,
        /// The command and its arguments (after --).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Evict a pod: kill its processes and mark it Failed with reason Evicted.
    Kill {
        /// Pod name, or NAMESPACE/NAME.
        pod: String,
    },
    /// Print the pods: NAME IP INDEX PHASE READY.
    Status,
    /// Stop the sandbox: kill every pod, remove the network, stop the API server, and wait
    /// until all of it is gone.
    Down,
    /// Run the sandbox in the foreground (what `up` starts in the background).
    Serve {
        /// Manifests to apply once the cluster is up.
        #[arg(long = "apply", value_name = "FILE")]
        apply: Vec<PathBuf>,
        /// How long to wait for the applied pods to become Ready, in seconds.
        #[arg(long, default_value_t = 120)]
        ready_timeout: u64,
    },
    /// Run only an API server (no pod network, no pods) in the foreground on 127.0.0.1; its
    /// admin kubeconfig is written to STATE/kubeconfig. Stop it with Ctrl-C.
    Api {
        /// Port to listen on (default: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Make an Indexed Job of N pods (needs --job).
    #[arg(long, value_name = "N", requires = "job")]
    pub pods: Option<u32>,
    /// Name of the Indexed Job (needs --pods). Its pods are labelled job-name=NAME, run as
    /// service account NAME (allowed to get/list/watch pods) with subdomain NAME.
    #[arg(long, value_name = "NAME", requires = "pods")]
    pub job: Option<String>,
    /// CPU request of each job pod (e.g. 2 or 500m).
    #[arg(long, value_name = "REQ", requires = "pods")]
    pub cpu: Option<String>,
    /// Leave the image field out of the job's pod template (sandbox pods run host programs;
    /// by default the template names a placeholder image).
    #[arg(long, requires = "pods")]
    pub image_less: bool,
    /// Namespace of the job (created if missing).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// More manifests to apply (multi-document YAML; may be given several times).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// How long to wait for every pod to be Ready, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// On failure, leave the sandbox running for inspection instead of tearing it down.
    #[arg(long)]
    pub keep_on_failure: bool,
    /// The job pods' command (default: prrte-k8s-agent next to this program).
    #[arg(last = true)]
    pub command: Vec<String>,
}

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

pub fn main() -> i32 {
    let cli = Cli::parse();
    let state = match absolute(&cli.state) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("prrte-k8s-sandbox: {e:#}");
            return 2;
        }
    };
    let r = match cli.cmd {
        Cmd::Up(a) => up(&state, a),
        Cmd::Exec { pod, command } => exec(&state, &pod, &command),
        Cmd::Kill { pod } => kill(&state, &pod).map(|_| 0),
        Cmd::Status => status(&state).map(|_| 0),
        Cmd::Down => down(&state).map(|_| 0),
        Cmd::Serve {
            apply,
            ready_timeout,
        } => serve(&state, &apply, Duration::from_secs(ready_timeout)),
        Cmd::Api { port } => api_only(&state, port),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("prrte-k8s-sandbox: {e:#}");
            1
        }
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()
            .context("reading the current directory")?
            .join(p))
    }
}

fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the sandbox needs root (it creates network namespaces and a bridge); run it with sudo or as root");
    }
    Ok(())
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

fn read_state(dir: &Path) -> Option<StateFile> {
    let text = std::fs::read(dir.join("state.json")).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The running sandbox's state, or a clear error.
fn running(dir: &Path) -> Result<StateFile> {
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

/// Sends one request line on the control socket and returns the reply lines.
fn control(dir: &Path, request: &str, timeout: Duration) -> Result<Vec<String>> {
    let sock = dir.join("control.sock");
    let mut s = UnixStream::connect(&sock)
        .with_context(|| format!("connecting to the sandbox server at {}", sock.display()))?;
    s.set_read_timeout(Some(timeout))?;
    writeln!(s, "{request}")?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("waiting for the sandbox server to answer {request:?}"))?;
    Ok(out.lines().map(String::from).collect())
}

// ---- up ----

fn agent_path() -> Option<PathBuf> {
    let p = std::env::current_exe()
        .ok()?
        .parent()?
        .join("prrte-k8s-agent");
    p.is_file().then_some(p)
}

fn job_manifest(a: &UpArgs, command: &[String]) -> Result<String> {
    let (Some(n), Some(job)) = (a.pods, a.job.as_deref()) else {
        return Ok(String::new());
    };
    if n == 0 {
        bail!("--pods must be at least 1");
    }
    let ns = &a.namespace;
    let mut container = json!({
        "name": "main",
        "command": command,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
    });
    if !a.image_less {
        container["image"] = json!("prrte-k8s/sandbox-host:latest");
    }
    if let Some(cpu) = &a.cpu {
        container["resources"] = json!({"requests": {"cpu": cpu}});
    }
    let docs = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": job, "namespace": ns}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": format!("{job}-pod-reader"), "namespace": ns},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": format!("{job}-pod-reader"), "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{job}-pod-reader")},
               "subjects": [{"kind": "ServiceAccount", "name": job, "namespace": ns}]}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": job, "namespace": ns},
               "spec": {"clusterIP": "None", "selector": {"job-name": job}}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job, "namespace": ns},
               "spec": {"completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": 6,
                        "template": {"metadata": {"labels": {"app": job}},
                                     "spec": {"subdomain": job, "serviceAccountName": job, "restartPolicy": "Never", "containers": [container]}}}}),
    ];
    Ok(docs
        .iter()
        .map(|d| serde_yaml::to_string(d).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n"))
}

fn up(dir: &Path, a: UpArgs) -> Result<i32> {
    require_root()?;
    if let Some(s) = read_state(dir) {
        if pid_alive(s.pid) {
            bail!(
                "a sandbox is already running in {} (server pid {}); run `prrte-k8s-sandbox down --state {}` first",
                dir.display(),
                s.pid,
                dir.display()
            );
        }
        cleanup_stale(dir, &s)?;
    }
    let command = if a.pods.is_some() {
        if a.command.is_empty() {
            match agent_path() {
                Some(p) => vec![p.to_string_lossy().into_owned()],
                None => bail!(
                    "no pod command given and prrte-k8s-agent is not next to this program ({}); pass the command after --, e.g. `up --pods 2 --job demo -- sleep infinity`",
                    std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()
                ),
            }
        } else {
            a.command.clone()
        }
    } else {
        if !a.command.is_empty() {
            bail!("a command after -- is only used with --pods N --job NAME");
        }
        Vec::new()
    };
    let mut manifest = job_manifest(&a, &command)?;
    for f in &a.files {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("reading manifest {}", f.display()))?;
        if !manifest.is_empty() {
            manifest.push_str("\n---\n");
        }
        manifest.push_str(&text);
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the state directory {}", dir.display()))?;
    let workload = dir.join("workload.yaml");
    std::fs::write(&workload, &manifest)
        .with_context(|| format!("writing {}", workload.display()))?;
    // Check the manifests before starting anything.
    for (i, d) in serde_yaml::Deserializer::from_str(&manifest).enumerate() {
        Value::deserialize(d)
            .map_err(|e| anyhow!("the workload's document {} is not valid YAML: {e}", i + 1))?;
    }

    let log_path = dir.join("sandbox.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let exe = std::env::current_exe().context("finding this program")?;
    let mut child = Command::new(exe)
        .arg("--state")
        .arg(dir)
        .arg("serve")
        .arg("--apply")
        .arg(&workload)
        .arg("--ready-timeout")
        .arg(a.timeout.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting the sandbox server")?;
    let pid = child.id();
    // Ctrl-C while waiting: take the server down too.
    let dir_c = dir.to_path_buf();
    let _ = ctrlc::set_handler(move || {
        eprintln!("prrte-k8s-sandbox: interrupted; stopping the sandbox");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while pid_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(dir_c.join("state.json"));
        std::process::exit(130);
    });
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let done = line.starts_with("READY") || line.starts_with("FAILED");
            let _ = tx.send(line);
            if done {
                break;
            }
        }
    });
    let limit = Duration::from_secs(a.timeout + 60);
    let outcome = match rx.recv_timeout(limit) {
        Ok(l) if l.starts_with("READY") => Ok(()),
        Ok(l) => {
            let m = l.trim_start_matches("FAILED").trim();
            Err(anyhow!(
                "{}",
                serde_json::from_str::<String>(m).unwrap_or_else(|_| m.to_string())
            ))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(anyhow!(
            "the sandbox server gave no answer within {limit:?}"
        )),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let st = child.wait().map(|s| s.to_string()).unwrap_or_default();
            Err(anyhow!(
                "the sandbox server exited ({st}) before the pods were Ready; last log lines:\n{}",
                tail(&log_path, 20)
            ))
        }
    };
    if let Err(e) = outcome {
        if a.keep_on_failure {
            bail!("{e:#}\n(the sandbox is left running: inspect with `KUBECONFIG={} kubectl get pods -A`, stop with `prrte-k8s-sandbox down --state {}`)", dir.join("kubeconfig").display(), dir.display());
        }
        let _ = down(dir);
        bail!("{e:#}\n(the sandbox was torn down; rerun with --keep-on-failure to inspect it; log: {})", log_path.display());
    }
    let s = running(dir)?;
    println!("kubeconfig: {}", s.kubeconfig.display());
    for p in &s.pods {
        println!("{} {} {}", p.name, p.ip, p.index);
    }
    Ok(0)
}

fn tail(p: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn cleanup_stale(dir: &Path, s: &StateFile) -> Result<()> {
    if !s.network_prefix.is_empty() {
        let l = crate::podnet::cleanup_leftovers(&s.network_prefix)
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

// ---- exec / kill / status / down ----

fn find_pod<'a>(s: &'a StateFile, pod: &str) -> Result<&'a PodLine> {
    let (ns, name) = match pod.split_once('/') {
        Some((n, p)) => (Some(n), p),
        None => (None, pod),
    };
    let hits: Vec<&PodLine> = s
        .pods
        .iter()
        .filter(|p| p.name == name && ns.is_none_or(|n| n == p.namespace))
        .collect();
    match hits.as_slice() {
        [p] => Ok(p),
        [] => bail!(
            "no pod {pod:?} in this sandbox; pods: {}",
            s.pods
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => bail!("pod name {name:?} is in several namespaces; say NAMESPACE/{name}"),
    }
}

fn exec(dir: &Path, pod: &str, argv: &[String]) -> Result<i32> {
    require_root()?;
    let s = running(dir)?;
    let p = find_pod(&s, pod)?;
    let path = p
        .exec
        .clone()
        .ok_or_else(|| anyhow!("pod {} is not running (phase {})", p.name, p.phase))?;
    let info: ExecInfo = serde_json::from_slice(
        &std::fs::read(&path)
            .with_context(|| format!("pod {} is not running (no {})", p.name, path.display()))?,
    )
    .with_context(|| format!("reading {}", path.display()))?;
    if !pid_alive(info.pid) {
        bail!("pod {} is not running any more", p.name);
    }
    let status = crate::podnet::exec_command(
        info.pid,
        Path::new(&info.workdir),
        info.container.as_deref(),
        argv,
    )
    .envs(info.env.iter().map(|(k, v)| (k, v)))
    .status()
    .context("running nsenter (util-linux)")?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

fn kill(dir: &Path, pod: &str) -> Result<()> {
    let s = running(dir)?;
    let p = find_pod(&s, pod)?;
    let reply = control(
        dir,
        &format!("evict {}/{}", p.namespace, p.name),
        Duration::from_secs(60),
    )?;
    match reply.first().map(String::as_str) {
        Some("ok") => {
            println!("pod/{} evicted", p.name);
            Ok(())
        }
        Some(other) => bail!("{}", other.trim_start_matches("error: ")),
        None => bail!("the sandbox server closed the connection without an answer"),
    }
}

fn status(dir: &Path) -> Result<()> {
    running(dir)?;
    let reply = control(dir, "status", Duration::from_secs(30))?;
    let s: StateFile =
        serde_json::from_str(&reply.join("\n")).context("reading the server's status")?;
    println!("kubeconfig: {}", s.kubeconfig.display());
    println!(
        "{:<40} {:<15} {:<6} {:<10} READY",
        "NAME", "IP", "INDEX", "PHASE"
    );
    for p in &s.pods {
        println!(
            "{:<40} {:<15} {:<6} {:<10} {}",
            p.name,
            if p.ip.is_empty() { "<none>" } else { &p.ip },
            p.index,
            p.phase,
            p.ready
        );
    }
    Ok(())
}

fn down(dir: &Path) -> Result<()> {
    let Some(s) = read_state(dir) else {
        println!("no sandbox is running in {}", dir.display());
        return Ok(());
    };
    if pid_alive(s.pid) {
        // The server answers "ok", tears everything down and exits; the connection closes
        // when it is gone.
        let reply = control(dir, "down", Duration::from_secs(120));
        if let Err(e) = reply {
            eprintln!("prrte-k8s-sandbox: {e:#}; sending SIGTERM to {}", s.pid);
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(s.pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while pid_alive(s.pid) {
            if Instant::now() > deadline {
                bail!(
                    "the sandbox server (pid {}) did not exit within 60s; see {}",
                    s.pid,
                    dir.join("sandbox.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let left = crate::podnet::leftovers(&s.network_prefix);
    if !left.is_empty() {
        cleanup_stale(dir, &s)?;
        let again = crate::podnet::leftovers(&s.network_prefix);
        if !again.is_empty() {
            bail!("could not remove everything the sandbox made: {again}");
        }
    }
    for f in ["state.json", "control.sock"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    println!("sandbox in {} is down", dir.display());
    Ok(())
}

// ---- serve ----

fn pod_index(p: &Value) -> String {
    p.pointer("/metadata/annotations/batch.kubernetes.io~1job-completion-index")
        .or_else(|| p.pointer("/metadata/labels/apps.kubernetes.io~1pod-index"))
        .and_then(Value::as_str)
        .unwrap_or("-")
        .to_string()
}

fn snapshot(c: &Cluster, dir: &Path) -> StateFile {
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

fn write_state(dir: &Path, s: &StateFile) {
    let tmp = dir.join("state.json.tmp");
    if std::fs::write(&tmp, serde_json::to_vec_pretty(s).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join("state.json"));
    }
}

/// The pods an applied object stands for: (namespace, label selector, count, what).
fn expected_pods(store: &crate::api::Store, o: &Obj) -> Option<(String, String, usize, String)> {
    let ns = o["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
    match o["kind"].as_str()? {
        "Pod" => Some((ns, format!("pod-name-is={name}"), 1, format!("pod {name}"))),
        "Job" => {
            let j = store.get(&JOBS, &ns, &name).ok()?;
            let par = j["spec"]["parallelism"].as_i64().unwrap_or(1);
            let n = j["spec"]["completions"]
                .as_i64()
                .map_or(par, |c| c.min(par)) as usize;
            let uid = j["metadata"]["uid"].as_str().unwrap_or("");
            Some((
                ns,
                format!("batch.kubernetes.io/controller-uid={uid}"),
                n,
                format!("job {name}"),
            ))
        }
        "StatefulSet" => {
            let s = store.get(&STATEFULSETS, &ns, &name).ok()?;
            let n = s["spec"]["replicas"].as_i64().unwrap_or(1) as usize;
            let sel = s["spec"]["selector"]["matchLabels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            Some((ns, sel, n, format!("statefulset {name}")))
        }
        _ => None,
    }
}

async fn wait_workload(c: &Cluster, applied: &[Obj], timeout: Duration) -> Result<()> {
    let store = c.store();
    let deadline = Instant::now() + timeout;
    for o in applied {
        let Some((ns, sel, n, what)) = expected_pods(&store, o) else {
            continue;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let (sel, pinned) = match sel.strip_prefix("pod-name-is=") {
            Some(name) => (String::new(), Some(name.to_string())),
            None => (sel, None),
        };
        cluster::wait_pods(&store, &ns, &sel, left, |pods| {
            let mine: Vec<&Obj> = pods
                .iter()
                .filter(|p| {
                    pinned
                        .as_ref()
                        .is_none_or(|n| p["metadata"]["name"] == n.as_str())
                })
                .collect();
            if let Some(f) = mine.iter().find(|p| p["status"]["phase"] == "Failed") {
                return Some(Err(anyhow!(
                    "{what}: pod failed:\n  {}",
                    cluster::describe_pods(std::slice::from_ref(f))
                )));
            }
            let ready = mine
                .iter()
                .filter(|p| cluster::pod_ready(p) || p["status"]["phase"] == "Succeeded")
                .count();
            (ready >= n).then_some(Ok(()))
        })
        .await
        .map_err(|e| anyhow!("{what}: {n} pod(s) did not become Ready: {e}"))??;
    }
    Ok(())
}

fn serve(dir: &Path, apply: &[PathBuf], ready_timeout: Duration) -> Result<i32> {
    require_root()?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init()
        .ok();
    std::fs::create_dir_all(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = dir.to_path_buf();
    rt.block_on(async move {
        // One line per report: "READY", or "FAILED " and the message as a JSON string.
        let report = |line: String| {
            let line = match line.strip_prefix("FAILED ") {
                Some(m) => format!("FAILED {}", Value::String(m.to_string())),
                None => line,
            };
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        };
        let c = match Cluster::start(ClusterOptions {
            dir: Some(dir.join("cluster")),
            ..Default::default()
        })
        .await
        {
            Ok(c) => c,
            Err(e) => {
                report(format!("FAILED starting the cluster: {e:#}"));
                return Err(e);
            }
        };
        let kubeconfig = dir.join("kubeconfig");
        c.api()
            .write_kubeconfig(&kubeconfig, c.api().admin_token(), "default")?;
        write_state(&dir, &snapshot(&c, &dir));
        tracing::info!(
            "sandbox up: API {} (kubeconfig {}), network {}",
            c.api().url(),
            kubeconfig.display(),
            c.network().cidr()
        );

        let listener = {
            let sock = dir.join("control.sock");
            let _ = std::fs::remove_file(&sock);
            tokio::net::UnixListener::bind(&sock)
                .with_context(|| format!("binding {}", sock.display()))?
        };
        let mut applied = Vec::new();
        for f in apply {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            match c.apply_yaml(&text) {
                Ok(objs) => applied.extend(objs),
                Err(e) => {
                    report(format!("FAILED applying {}: {e:#}", f.display()));
                    return Err(e);
                }
            }
        }
        let c = std::sync::Arc::new(c);
        // Keep state.json current.
        let (cs, ds) = (c.clone(), dir.clone());
        let writer = tokio::spawn(async move {
            let mut rx = cs.store().subscribe();
            loop {
                match rx.recv().await {
                    Ok(ev) if std::ptr::eq(ev.resource, &PODS) => {
                        // Coalesce bursts.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        while rx.try_recv().is_ok() {}
                        write_state(&ds, &snapshot(&cs, &ds));
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        write_state(&ds, &snapshot(&cs, &ds))
                    }
                    Err(_) => return,
                }
            }
        });
        match wait_workload(&c, &applied, ready_timeout).await {
            Ok(()) => {
                write_state(&dir, &snapshot(&c, &dir));
                report("READY".into());
            }
            Err(e) => {
                write_state(&dir, &snapshot(&c, &dir));
                report(format!("FAILED {e:#}"));
            }
        }

        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut closer: Option<tokio::net::UnixStream> = None;
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                a = listener.accept() => {
                    let Ok((stream, _)) = a else { continue };
                    let (rd, mut wr) = stream.into_split();
                    let mut line = String::new();
                    let mut br = tokio::io::BufReader::new(rd);
                    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
                    if br.read_line(&mut line).await.is_err() { continue; }
                    let req = line.trim();
                    if req == "down" {
                        let _ = wr.write_all(b"ok\n").await;
                        closer = Some(br.into_inner().reunite(wr).expect("same stream"));
                        break;
                    }
                    let reply = if let Some(pod) = req.strip_prefix("evict ") {
                        let (cc, pod) = (c.clone(), pod.to_string());
                        match tokio::task::spawn_blocking(move || cc.evict(&pod)).await {
                            Ok(Ok(())) => "ok\n".to_string(),
                            Ok(Err(e)) => format!("error: {e:#}\n"),
                            Err(e) => format!("error: {e}\n"),
                        }
                    } else if req == "status" {
                        let s = snapshot(&c, &dir);
                        format!("{}\n", serde_json::to_string(&s).unwrap_or_default())
                    } else {
                        format!("error: unknown request {req:?}\n")
                    };
                    let _ = wr.write_all(reply.as_bytes()).await;
                }
            }
        }
        tracing::info!("shutting down");
        writer.abort();
        let _ = writer.await;
        let _ = std::fs::remove_file(dir.join("control.sock"));
        tokio::task::block_in_place(|| c.stop());
        // Last handle: dropping it removes the network and stops the API server.
        match std::sync::Arc::try_unwrap(c) {
            Ok(c) => tokio::task::block_in_place(move || drop(c)),
            Err(c) => {
                tracing::warn!("the cluster is still referenced; it goes when the server exits");
                drop(c);
            }
        }
        let _ = std::fs::remove_file(dir.join("state.json"));
        tracing::info!("sandbox down");
        drop(closer);
        Ok(0)
    })
}

fn api_only(dir: &Path, port: u16) -> Result<i32> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init()
        .ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let s = ApiServer::start(ApiOptions {
            bind: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            dir: Some(dir.join("api")),
            ..Default::default()
        })
        .await?;
        let kc = dir.join("kubeconfig");
        s.write_kubeconfig(&kc, s.admin_token(), "default")?;
        println!(
            "API server {} (no pods run); kubeconfig: {}",
            s.url(),
            kc.display()
        );
        tokio::signal::ctrl_c().await?;
        Ok(0)
    })
}
