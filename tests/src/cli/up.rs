//! `up`: the workload's manifest, the sandbox server started in the background, and the wait
//! until its pods are Ready.

use super::args::UpArgs;
use super::client::down;
use super::host::{pid_alive, require_root};
use super::state::{cleanup_stale, read_state, running};
use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// Starts a sandbox in `dir` in the background and waits until its workload's pods are
/// Ready; prints the kubeconfig and the pods.
pub(super) fn up(dir: &Path, a: UpArgs) -> Result<i32> {
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
    let command = pod_command(&a)?;
    let workload = write_workload(dir, &a, &command)?;
    let log_path = dir.join("sandbox.log");
    let mut child = start_server(dir, &a, &workload, &log_path)?;
    stop_on_interrupt(dir, child.id());
    if let Err(e) = wait_ready(&mut child, a.timeout, &log_path) {
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

/// The command of the `--pods N --job NAME` pods: the one after `--`, else the agent next to
/// this program.
fn pod_command(a: &UpArgs) -> Result<Vec<String>> {
    if a.pods.is_none() {
        if !a.command.is_empty() {
            bail!("a command after -- is only used with --pods N --job NAME");
        }
        return Ok(Vec::new());
    }
    if !a.command.is_empty() {
        return Ok(a.command.clone());
    }
    match agent_path() {
        Some(p) => Ok(vec![p.to_string_lossy().into_owned()]),
        None => bail!(
            "no pod command given and prrte-k8s-agent is not next to this program ({}); pass the command after --, e.g. `up --pods 2 --job demo -- sleep infinity`",
            std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()
        ),
    }
}

/// Writes the workload (the job's manifest, then the `-f` files) to `dir`/workload.yaml,
/// checked to be YAML before anything starts.
fn write_workload(dir: &Path, a: &UpArgs, command: &[String]) -> Result<PathBuf> {
    let mut manifest = job_manifest(a, command)?;
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
    Ok(workload)
}

/// `prrte-k8s-sandbox serve` in its own process group, its stderr appended to `log_path`.
fn start_server(dir: &Path, a: &UpArgs, workload: &Path, log_path: &Path) -> Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let exe = std::env::current_exe().context("finding this program")?;
    Command::new(exe)
        .arg("--state")
        .arg(dir)
        .arg("serve")
        .arg("--apply")
        .arg(workload)
        .arg("--ready-timeout")
        .arg(a.timeout.to_string())
        .arg("--max-pods")
        .arg(a.max_pods.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting the sandbox server")
}

/// Ctrl-C while waiting: take the server (`pid`) down too.
fn stop_on_interrupt(dir: &Path, pid: u32) {
    let dir = dir.to_path_buf();
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
        let _ = std::fs::remove_file(dir.join("state.json"));
        std::process::exit(130);
    });
}

/// Waits for the server's report on its stdout: READY, or FAILED and why (also when it
/// exits or says nothing within the ready timeout `timeout` seconds and a minute).
fn wait_ready(child: &mut Child, timeout: u64, log_path: &Path) -> Result<()> {
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
    let limit = Duration::from_secs(timeout + 60);
    match rx.recv_timeout(limit) {
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
                tail(log_path, 20)
            ))
        }
    }
}

fn tail(p: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
