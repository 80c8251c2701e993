//! The `prrte-k8s-sandbox` command line: start a sandbox cluster in the background, run
//! commands in its pods, evict pods, and tear it down.
//!
//! This file is the command line, the state directory's files and the control socket's
//! client; `up` starts a sandbox, `serve` is the server it starts (`state`: the state file it
//! keeps, `ready`: the wait for the workload), `client` the commands for a running sandbox.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod client;
mod ready;
mod serve;
mod state;
mod up;

use client::{down, exec, kill, status};
use serve::{api_only, serve};
use up::up;

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
