//! The `kubeflow.org/v2beta1` `MPIJob` as Rust types, the one model of it: `--from-mpijob`
//! reads a document into it (after checking each field by its path, [`super::parse`]), the
//! controller watches MPIJobs as it and writes its status, and kube's derive makes the
//! CustomResourceDefinition from it (`prrte-k8s crd`). Its structural schema accepts every
//! field of mpi-operator's v2beta1 (`pkg/apis/kubeflow/v2beta1/types.go`), so that a cluster
//! may hold either CRD. Two fields are wider than mpi-operator's: `mpiImplementation` and
//! `launcherCreationPolicy` take any string (mpi-operator's CRD lists their values), so that an
//! MPIJob the conversion cannot take reaches the controller and gets the condition `Failed`
//! with the reason instead of a refusal at `kubectl apply`. No defaults are set here: the
//! conversion applies mpi-operator's own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `MPIJob.spec`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeflow.org",
    version = "v2beta1",
    kind = "MPIJob",
    root = "MpiJob",
    plural = "mpijobs",
    singular = "mpijob",
    namespaced,
    status = "MpiJobStatus",
    printcolumn = r#"{"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"}"#,
    printcolumn = r#"{"name": "Workers", "type": "integer", "jsonPath": ".spec.mpiReplicaSpecs.Worker.replicas"}"#,
    printcolumn = r#"{"name": "Active", "type": "integer", "jsonPath": ".status.replicaStatuses.Worker.active"}"#,
    printcolumn = r#"{"name": "Managed-By", "type": "string", "jsonPath": ".spec.runPolicy.managedBy", "priority": 1}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MpiJobSpec {
    /// Slots per worker in the hostfile (mpi-operator's default: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slots_per_worker: Option<i32>,
    /// Run ranks in the launcher's pod too (default: false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run_launcher_as_worker: Option<bool>,
    /// How the job runs (one line in the schema: `kubectl explain` wraps it).
    #[schemars(
        description = "How the job runs: its deadline and the time its finished Job is kept, \
                       its pods' cleanup, retries and scheduling, whether it is suspended, and \
                       which controller reconciles it (`managedBy`)."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run_policy: Option<RunPolicy>,
    /// `Launcher` and `Worker`.
    pub(crate) mpi_replica_specs: BTreeMap<String, ReplicaSpec>,
    /// Where mpi-operator mounts the SSH keys (not used: no sshd runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ssh_auth_mount_path: Option<String>,
    /// `AtStartup` or `WaitForWorkersReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) launcher_creation_policy: Option<String>,
    /// `OpenMPI` (default), `Intel` or `MPICH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mpi_implementation: Option<String>,
}

/// `spec.runPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunPolicy {
    #[schemars(
        description = "Which pods are deleted when the job ends: `None`, `Running` or `All`. \
                       Running pods are stopped when the Job ends; finished ones stay until \
                       `ttlSecondsAfterFinished`."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) clean_pod_policy: Option<String>,
    /// Seconds after the job finished until its Job and pods are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ttl_seconds_after_finished: Option<i32>,
    /// Seconds from the job's start after which it is stopped and fails (`DeadlineExceeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) active_deadline_seconds: Option<i64>,
    #[schemars(
        description = "Restarts of the whole job (every pod made again, a new DVM) after it \
                       failed, before it fails with BackoffLimitExceeded (prrte-k8s controller; \
                       not after activeDeadlineSeconds). Absent: 0, the first failure fails it."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) backoff_limit: Option<i32>,
    #[schemars(
        description = "Gang scheduling: the Kueue queue (`queue`), the priority class and the \
                       minimum of pods and resources."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scheduling_policy: Option<SchedulingPolicy>,
    /// No pod runs while true (Kueue's admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// The controller that reconciles the MPIJob: `prrte-k8s.io/controller` for ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) managed_by: Option<String>,
}

/// `spec.runPolicy.schedulingPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SchedulingPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) min_available: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) min_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) priority_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) schedule_timeout_seconds: Option<i32>,
}

/// One of `spec.mpiReplicaSpecs`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplicaSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    /// `Never` or `OnFailure` (`Always` and `ExitCode` are in mpi-operator's type, refused by
    /// its validation and by the conversion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// `MPIJob.status`, as mpi-operator writes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MpiJobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,
    /// `Launcher` and `Worker`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) replica_statuses: BTreeMap<String, ReplicaStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_reconcile_time: Option<Time>,
}

/// One condition: `Created`, `Running`, `Restarting`, `Suspended`, `Succeeded` or `Failed`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_transition_time: Option<Time>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// The pods of one replica type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplicaStatus {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// Deprecated in mpi-operator (`selector` replaces it); accepted, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label_selector: Option<LabelSelector>,
    /// The pods' label selector, as `kubectl get pods -l` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}
