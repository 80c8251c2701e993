//! The job to render, whatever described it: the command-line options
//! ([`super::options::ManifestArgs::plan`]) or an MPIJob ([`super::mpijob`]). The renderers
//! read only this.

use clap::ValueEnum;
use serde_json::{Map, Value};

use crate::settings::mpijob::MpiJobRef;
use crate::workload::{Success, WorkloadKind};

/// Parts of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Part {
    Rbac,
    Secret,
    Workload,
    Networkpolicy,
}

/// How the agent and the MPI runtime get into the pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// The image holds the agent and PRRTE with the k8s components: the agent is started as
    /// `AGENT --prted PREFIX/bin/prted`.
    Image { agent: String, prrte_prefix: String },
    /// The runtime is copied into every pod at start by an init container from `image`, and
    /// the agent finds the image's own MPI (`--mpi MPI`).
    Injected { image: String, mpi: String },
}

/// The pods: what the workload's pod template is made of besides the agent's own parts (its
/// command, ports, probe, environment and volumes, which the renderer adds).
#[derive(Debug, Clone, PartialEq)]
pub struct PodPlan {
    /// Labels of the pods besides the job's own (which win).
    pub labels: Map<String, Value>,
    /// Annotations of the pods (the slots annotation is added from [`Self::slots`]).
    pub annotations: Map<String, Value>,
    /// MPI slots per pod (annotation prrte-k8s.io/slots).
    pub slots: Option<u32>,
    /// The pod spec without containers and volumes (its securityContext, scheduling fields).
    pub spec: Map<String, Value>,
    /// The application container without name, command, environment, ports, probes and
    /// mounts (its image, resources, securityContext...).
    pub container: Map<String, Value>,
    /// Environment after the job's own: an entry replaces the job's of the same name.
    pub env: Vec<Value>,
    /// The container's mounts besides the job's own.
    pub mounts: Vec<Value>,
    /// The pod's volumes besides the job's own.
    pub volumes: Vec<Value>,
    /// Init containers after the runtime's.
    pub(crate) init_containers: Vec<Value>,
    pub launch: Launch,
    /// imagePullPolicy of the runtime's init container.
    pub(crate) runtime_pull_policy: Option<String>,
    /// uid and gid the runtime's init container runs as (the application's).
    pub uid: u32,
    pub gid: Option<u32>,
}

/// One job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    pub name: String,
    pub namespace: Option<String>,
    pub kind: WorkloadKind,
    pub pods: u32,
    /// The batch command (pod 0 runs it); empty: interactive.
    pub command: Vec<String>,
    pub success: Success,
    /// activeDeadlineSeconds.
    pub deadline: Option<u64>,
    /// ttlSecondsAfterFinished.
    pub ttl: Option<u64>,
    /// A JobSet's failurePolicy.maxRestarts.
    pub(crate) max_restarts: u32,
    /// The parts to print (empty: all).
    pub only: Vec<Part>,
    /// Labels and annotations of the workload object besides the job's own.
    pub labels: Map<String, Value>,
    pub annotations: Map<String, Value>,
    /// Created suspended (`spec.suspend`).
    pub suspend: bool,
    /// `spec.managedBy` of the Job.
    pub(crate) managed_by: Option<String>,
    /// Elastic: `prrte-k8s grow` may raise the workload up to this many pods (None: it may
    /// not grow).
    pub max_pods: Option<u32>,
    /// Header lines saying what the job was made from.
    pub origin: Vec<String>,
    /// Where the pods may reach the Kubernetes API (the NetworkPolicy's egress).
    pub api_server: super::api_server::ApiServer,
    /// The MPIJob the controller made the job for: the launcher records its `DaemonsUp`
    /// event there (the pods get `PRRTE_K8S_MPIJOB`, the Role `create` on `events`). None
    /// for every job `prrte-k8s manifest` renders.
    pub(crate) events_to: Option<MpiJobRef>,
    pub pod: PodPlan,
    /// An MPIJob's launcher as a pod of its own, beside the `pods - 1` workers that
    /// [`Self::pod`] then describes (a JobSet's replicated jobs `launcher` and `worker`).
    /// None: every pod has [`Self::pod`], and the pod with index 0 is the launcher.
    pub(crate) launcher: Option<LauncherPlan>,
}

/// The launcher's own pod.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LauncherPlan {
    /// Its pod, from the Launcher's template.
    pub(crate) pod: PodPlan,
    /// Made only once every worker is ready (`launcherCreationPolicy: WaitForWorkersReady`),
    /// else with them.
    pub(crate) after_workers: bool,
}

impl JobPlan {
    /// A batch job (a command for pod 0), not an interactive one.
    pub fn batch(&self) -> bool {
        !self.command.is_empty()
    }
}
