//! The command line: its commands and their options.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

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
    /// Remove what killed sandboxes and test runs left on the host (pods' processes, network
    /// namespaces, links, state directories, nftables tables of every network whose owning
    /// process is gone), and print it. Live sandboxes and test runs are left alone.
    Sweep,
    /// Run the sandbox in the foreground (what `up` starts in the background).
    Serve {
        /// Manifests to apply once the cluster is up.
        #[arg(long = "apply", value_name = "FILE")]
        apply: Vec<PathBuf>,
        /// How long to wait for the applied pods to become Ready, in seconds.
        #[arg(long, default_value_t = 120)]
        ready_timeout: u64,
        /// Pods the node runs at once (a kubelet's --max-pods); more stay Pending.
        #[arg(long, value_name = "N", default_value_t = crate::cluster::kubelet::MAX_PODS, value_parser = max_pods)]
        max_pods: usize,
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
    /// Pods the node runs at once (a kubelet's --max-pods, default 110); more stay Pending
    /// (Unschedulable). At most 253: the pod network is a /24.
    #[arg(long, value_name = "N", default_value_t = crate::cluster::kubelet::MAX_PODS, value_parser = max_pods)]
    pub max_pods: usize,
    /// On failure, leave the sandbox running for inspection instead of tearing it down.
    #[arg(long)]
    pub keep_on_failure: bool,
    /// The job pods' command (default: prrte-k8s-agent next to this program).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `--max-pods`: 1 to [`crate::cluster::MAX_NODE_PODS`] (the addresses of the pod network).
fn max_pods(s: &str) -> Result<usize, String> {
    let max = crate::cluster::MAX_NODE_PODS;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?} is not a pod count from 1 to {max}: the sandbox's pod network is a /{} with {max} pod addresses",
            crate::runtime::podnet::PREFIX_LEN
        )),
    }
}
