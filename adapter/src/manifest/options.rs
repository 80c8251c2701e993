//! `prrte-k8s manifest`'s options, their checks, and the job they describe
//! ([`ManifestArgs::plan`]).

use std::collections::BTreeMap;

use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Map, Value};

use super::error::{EnvArgError, ManifestError};
use super::inject::INJECT_IMAGE;
use super::layout::{restricted_container, restricted_pod};
use super::plan::{JobPlan, Launch, Part, PodPlan};
use crate::settings::SettingError;
use crate::workload::{Success, WorkloadKind};

/// The MPI in an image the runtime is injected into (the agent's `--mpi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mpi {
    /// The agent looks for one in the image (Open MPI, MPICH, Intel MPI).
    Auto,
    /// Open MPI 5 (on PRRTE) or 4 (ORTE).
    Openmpi,
    /// MPICH (Hydra).
    Mpich,
    /// Intel MPI (Hydra).
    Intel,
}

impl Mpi {
    /// The agent's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mpi::Auto => "auto",
            Mpi::Openmpi => "openmpi",
            Mpi::Mpich => "mpich",
            Mpi::Intel => "intel",
        }
    }
}

/// The pods' grace period (seconds) when no option or MPIJob gives one: Kubernetes' own.
pub const DEFAULT_GRACE: u64 = 30;

/// The job's name when no option or MPIJob gives one.
pub(crate) const DEFAULT_NAME: &str = "mpi";

/// What an MPIJob gives, so the options for it are refused with --from-mpijob.
const FROM_MPIJOB: [&str; 16] = [
    "pods",
    "image",
    "cpu",
    "memory",
    "gpus",
    "gpu_resource",
    "slots",
    "success",
    "deadline",
    "ttl",
    "max_restarts",
    "uid",
    "agent",
    "prrte_prefix",
    "mpi",
    "command",
];

/// `prrte-k8s manifest` options.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("runtime").args(["inject", "from_mpijob"]).multiple(true)))]
pub struct ManifestArgs {
    /// Name of the job (and prefix of every object's name) [default: mpi, or the MPIJob's]
    #[arg(long)]
    pub name: Option<String>,
    /// Namespace of every object [default: the MPIJob's, else none, so kubectl's current
    /// namespace]
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Number of pods
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub pods: u32,
    /// Container image holding prrte-k8s-agent, PRRTE (with the k8s components) and the MPI
    #[arg(long, default_value = "prrte-k8s:latest")]
    pub image: String,
    /// imagePullPolicy of the container [default: Kubernetes' own]
    #[arg(long, value_name = "POLICY", value_parser = ["Always", "IfNotPresent", "Never"])]
    pub(crate) image_pull_policy: Option<String>,
    /// Workload kind (with --from-mpijob: job, one Indexed Job whose pod 0 is the launcher,
    /// or jobset, the launcher in a pod of its own from the Launcher's template)
    #[arg(long, value_enum, default_value = "job")]
    pub kind: WorkloadKind,
    /// CPU request and limit of each pod (whole CPUs are its MPI slots unless --slots or --gpus)
    #[arg(long, default_value = "1")]
    pub cpu: String,
    /// Memory request and limit of each pod
    #[arg(long, default_value = "1Gi")]
    pub memory: String,
    /// GPUs per pod (then the slots: one rank per GPU)
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Extended resource name of a GPU
    #[arg(long, default_value = "nvidia.com/gpu", value_name = "RESOURCE")]
    pub(crate) gpu_resource: String,
    /// MPI slots per pod (annotation prrte-k8s.io/slots) [default: GPUs, else whole CPUs]
    #[arg(long)]
    pub slots: Option<u32>,
    /// Batch: when the Job is complete
    #[arg(long, value_enum, default_value = "index0")]
    pub success: Success,
    /// Batch: seconds the Job may run before it is failed (activeDeadlineSeconds)
    #[arg(long, value_name = "SECS")]
    pub deadline: Option<u64>,
    /// Seconds a finished Job (and its pods and logs) is kept (ttlSecondsAfterFinished)
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub ttl: u64,
    /// With --kind jobset: how many times the JobSet restarts the whole job (all its pods,
    /// made again) after one of them failed or was evicted (failurePolicy.maxRestarts)
    /// [default: 0, no restart]
    #[arg(long, value_name = "N")]
    pub(crate) max_restarts: Option<u32>,
    /// uid (and gid) the pods run as (>= 1000)
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1000..))]
    pub uid: u32,
    /// prrte-k8s-agent in the image (absolute, or found on the image's PATH)
    #[arg(long, default_value = "prrte-k8s-agent", value_name = "PATH")]
    pub agent: String,
    /// PRRTE's prefix in the image (prted and prte are in its bin/)
    #[arg(long, default_value = "/opt/prrte", value_name = "DIR")]
    pub prrte_prefix: String,
    /// Run any image (with its own MPI): an init container copies our runtime into every pod
    /// from --inject-image, and the agent finds the image's MPI (--mpi)
    #[arg(long, conflicts_with_all = ["agent", "prrte_prefix"])]
    pub inject: bool,
    /// The image the runtime is injected from
    #[arg(long, default_value = INJECT_IMAGE, value_name = "IMAGE", requires = "runtime")]
    pub(crate) inject_image: String,
    /// Print the prrte-k8s controller's installation instead of a job: the MPIJob CRD, the
    /// namespace prrte-k8s-system, its RBAC and Deployment (`kubectl apply -k
    /// prrte-config/deploy` without kustomize); takes no other option
    #[arg(long, exclusive = true)]
    pub controller: bool,
    /// Convert a kubeflow.org/v2beta1 MPIJob (a file, or - for stdin) into this job, the
    /// runtime injected into its images; what it cannot honour is said on stderr
    #[arg(long, value_name = "FILE", conflicts_with_all = FROM_MPIJOB)]
    pub(crate) from_mpijob: Option<String>,
    /// With --inject: the image's MPI (the agent's --mpi)
    #[arg(long, value_enum, default_value = "auto", requires = "inject")]
    pub mpi: Mpi,
    /// Seconds a pod has between SIGTERM and SIGKILL when it is told to end
    /// (terminationGracePeriodSeconds); its agent holds the ranks that long, less a few
    /// seconds to stop them, after telling them (--preempt-grace) [default: 30, or the
    /// MPIJob's]
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub grace_period: Option<u64>,
    /// Signal every rank gets when a pod of the job is told to end, besides the PMIx event
    /// (plm_k8s_preempt_signal), e.g. SIGUSR1 [default: none]
    #[arg(long, value_name = "SIG", value_parser = preempt_signal)]
    pub preempt_signal: Option<String>,
    /// Extra environment variable of every pod (NAME=VALUE, repeatable)
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Print only these parts (comma-separated) [default: all]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Part>,
    /// Address range of the Kubernetes API server's endpoints (CIDR, repeatable), the only
    /// one besides the job's pods and the cluster DNS the pods may connect to [default: any
    /// address but link-local ones (cloud metadata), on ports 443 and 6443]
    #[arg(long, value_name = "CIDR")]
    pub api_server_cidr: Vec<ipnet::IpNet>,
    /// Port of the API server's endpoints (repeatable) [default: 443 and 6443]
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub api_server_port: Vec<u16>,
    /// Ask the cluster for the API server's endpoints (Service `kubernetes` in `default`, with
    /// the client configuration of `prrte-k8s pods`) and let the pods reach only those
    /// addresses and ports
    #[arg(long, conflicts_with_all = ["api_server_cidr", "api_server_port"])]
    pub api_server_from_cluster: bool,
    /// Elastic: `prrte-k8s grow N` may add pods to the running job, up to --max-pods (the
    /// Role may then patch the workload; a Job carries Kueue's elastic-job annotation)
    #[arg(long, requires = "max_pods")]
    pub elastic: bool,
    /// With --elastic: the most pods the job may grow to
    #[arg(long, value_name = "M", requires = "elastic", value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub max_pods: Option<u32>,
    /// Leave out the Secret (create it yourself; the header says how)
    #[arg(long)]
    pub no_secret: bool,
    /// Batch mode: the command the pod with index 0 runs (after `--`), e.g.
    /// `-- mpirun -n 8 ./app`; without one, the job is interactive (DVM head in pod 0)
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl ManifestArgs {
    /// Where the pods may reach the Kubernetes API, as given.
    pub fn api_server(&self) -> super::api_server::ApiServer {
        super::api_server::ApiServer {
            cidrs: self.api_server_cidr.clone(),
            ports: self.api_server_port.clone(),
        }
    }

    /// The job these options describe (checked).
    pub fn plan(&self) -> Result<JobPlan, ManifestError> {
        check(self)?;
        let launch = if self.inject {
            Launch::Injected {
                image: self.inject_image.clone(),
                mpi: self.mpi.as_str().to_string(),
            }
        } else {
            Launch::Image {
                agent: self.agent.clone(),
                prrte_prefix: self.prrte_prefix.clone(),
            }
        };
        let mut container = Map::new();
        container.insert("image".into(), json!(self.image));
        if let Some(p) = &self.image_pull_policy {
            container.insert("imagePullPolicy".into(), json!(p));
        }
        container.insert("resources".into(), serde_json::to_value(self.resources())?);
        container.insert(
            "securityContext".into(),
            serde_json::to_value(restricted_container(self.uid, Some(self.uid)))?,
        );
        let mut spec = Map::new();
        spec.insert(
            "terminationGracePeriodSeconds".into(),
            json!(self.grace_period()),
        );
        spec.insert(
            "securityContext".into(),
            serde_json::to_value(restricted_pod(self.uid))?,
        );
        Ok(JobPlan {
            name: self.name().to_string(),
            namespace: self.namespace.clone(),
            kind: self.kind,
            pods: self.pods,
            command: self.command.clone(),
            success: self.success,
            deadline: self.deadline,
            ttl: Some(self.ttl),
            max_restarts: self.max_restarts.unwrap_or(0),
            only: self.only.clone(),
            labels: Map::new(),
            annotations: Map::new(),
            suspend: false,
            managed_by: None,
            max_pods: self.max_pods.filter(|_| self.elastic),
            origin: Vec::new(),
            api_server: self.api_server(),
            events_to: None,
            pod: PodPlan {
                labels: Map::new(),
                annotations: Map::new(),
                slots: self.slots,
                spec,
                container,
                env: preempt_env(self.grace_period(), self.preempt_signal.as_deref())
                    .chain(self.env.iter().map(|(k, v)| json!({"name": k, "value": v})))
                    .collect(),
                mounts: Vec::new(),
                volumes: Vec::new(),
                init_containers: Vec::new(),
                launch,
                runtime_pull_policy: self.image_pull_policy.clone(),
                uid: self.uid,
                gid: Some(self.uid),
            },
            launcher: None,
        })
    }

    /// The pods' grace period: `--grace-period`, else [`DEFAULT_GRACE`].
    fn grace_period(&self) -> u64 {
        self.grace_period.unwrap_or(DEFAULT_GRACE)
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(DEFAULT_NAME)
    }

    /// Requests and limits (equal): CPU, memory and GPUs.
    fn resources(&self) -> ResourceRequirements {
        let mut share = BTreeMap::from([
            ("cpu".to_string(), Quantity(self.cpu.clone())),
            ("memory".to_string(), Quantity(self.memory.clone())),
        ]);
        if self.gpus > 0 {
            share.insert(self.gpu_resource.clone(), Quantity(self.gpus.to_string()));
        }
        ResourceRequirements {
            requests: Some(share.clone()),
            limits: Some(share),
            claims: None,
        }
    }
}

/// The agents' grace period (the pod's, `grace` seconds) and the site's preemption signal,
/// for every pod's environment.
pub(super) fn preempt_env(grace: u64, signal: Option<&str>) -> impl Iterator<Item = Value> {
    let grace = json!({"name": "PRRTE_K8S_PREEMPT_GRACE", "value": grace.to_string()});
    let signal =
        signal.map(|s| json!({"name": crate::settings::mca::PREEMPT_SIGNAL.var(), "value": s}));
    std::iter::once(grace).chain(signal)
}

/// `--preempt-signal SIG`: a name `plm_k8s_preempt_signal` takes (SIGUSR1, usr1...), spelled
/// as it lists them.
pub(super) fn preempt_signal(s: &str) -> Result<String, SettingError> {
    let sig = s.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("sig"));
    let word = if !sig && !s.eq_ignore_ascii_case("none") {
        format!("SIG{s}")
    } else {
        s.to_string()
    };
    crate::settings::mca::preempt_signal(&word)?;
    let canonical = crate::settings::mca::PREEMPT_SIGNALS
        .iter()
        .find(|w| w.eq_ignore_ascii_case(&word))
        .expect("checked");
    Ok(canonical.to_string())
}

/// `--env NAME=VALUE`.
pub(super) fn parse_env(s: &str) -> Result<(String, String), EnvArgError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| EnvArgError::NoValue(s.to_string()))?;
    let ok = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
    if !ok {
        return Err(EnvArgError::Name(k.to_string()));
    }
    Ok((k.to_string(), v.to_string()))
}

/// A job name: a DNS-1123 label short enough for the objects' and pods' names and host names.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Checks the options.
pub fn check(a: &ManifestArgs) -> Result<(), ManifestError> {
    if !valid_name(a.name()) {
        return Err(ManifestError::Name(a.name().to_string()));
    }
    if !a.kind.runs_to_completion() && !a.command.is_empty() {
        return Err(ManifestError::StatefulsetBatch);
    }
    if let Some(m) = a.max_pods.filter(|_| a.elastic) {
        if a.kind.fixed().is_some() {
            return Err(ManifestError::ElasticJobset);
        }
        if m < a.pods {
            return Err(ManifestError::MaxPods {
                max: m,
                pods: a.pods,
            });
        }
    }
    if !a.kind.restarts_as_a_whole() && a.max_restarts.is_some() {
        return Err(ManifestError::MaxRestartsKind);
    }
    if !a.agent.starts_with('/') && a.agent.contains('/') {
        return Err(ManifestError::Agent(a.agent.clone()));
    }
    if !a.prrte_prefix.starts_with('/') {
        return Err(ManifestError::PrrtePrefix(a.prrte_prefix.clone()));
    }
    Ok(())
}
