//! The parts of Kubeflow Trainer's API (trainer.kubeflow.org/v1alpha1, v2.3.0) that are read
//! here: the TrainJob, typed (its spec as far as the renderer reads it, its status whole), and
//! a runtime (ClusterTrainingRuntime or TrainingRuntime), kept as the JSON it was read as (its
//! snapshot is that object) with its `mlPolicy` typed.

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Trainer's API group.
pub const GROUP: &str = "trainer.kubeflow.org";
/// Trainer's API version.
pub const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
/// `spec.managedBy` of the TrainJobs Trainer's controller reconciles (the CRD's default).
pub const TRAINER_MANAGER: &str = "trainer.kubeflow.org/trainjob-controller";

/// A TrainJob's spec, as far as it is read here.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainJob",
    namespaced,
    status = "TrainJobStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    #[serde(default)]
    pub runtime_ref: RuntimeRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<Trainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active_deadline_seconds: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    /// Kept as written: the renderer refuses a job that has any (see `render`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_patches: Vec<Value>,
    /// Kept as written: an MPI runtime has no initializer jobs to fill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initializer: Option<Value>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `spec.runtimeRef`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl RuntimeRef {
    /// Whether it names a ClusterTrainingRuntime (the CRD's default kind) rather than a
    /// TrainingRuntime of the job's namespace.
    pub fn is_cluster(&self) -> bool {
        self.kind.as_deref() != Some("TrainingRuntime")
    }
}

/// `spec.trainer`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Trainer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_per_node: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
}

/// A TrainJob's status, as Trainer writes it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs_status: Vec<JobStatus>,
}

/// One entry of `status.jobsStatus`: a replicated job's counts (all six fields required).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    pub name: String,
    pub ready: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    pub suspended: i32,
}

/// A runtime's `spec.mlPolicy`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MlPolicy {
    #[serde(default)]
    pub num_nodes: Option<i32>,
    #[serde(default)]
    pub mpi: Option<MpiPolicy>,
}

/// `mlPolicy.mpi`; a field left out takes the CRD's default (the API server writes it).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MpiPolicy {
    #[serde(default)]
    pub num_proc_per_node: Option<i32>,
    #[serde(default)]
    pub mpi_implementation: Option<String>,
    #[serde(default)]
    pub ssh_auth_mount_path: Option<String>,
    #[serde(default)]
    pub run_launcher_as_node: Option<bool>,
}

impl MpiPolicy {
    pub fn procs(&self) -> i32 {
        self.num_proc_per_node.unwrap_or(1)
    }
    pub fn implementation(&self) -> &str {
        self.mpi_implementation.as_deref().unwrap_or("OpenMPI")
    }
    pub fn mount_path(&self) -> &str {
        self.ssh_auth_mount_path.as_deref().unwrap_or("/root/.ssh")
    }
    pub fn launcher_as_node(&self) -> bool {
        self.run_launcher_as_node.unwrap_or(false)
    }
}

/// A ClusterTrainingRuntime or TrainingRuntime, as read from the API.
#[derive(Clone, Debug, PartialEq)]
pub struct Runtime {
    pub object: Value,
}

/// Why a runtime cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuntimeError {
    #[error("runtime {0}: spec.mlPolicy: {1}")]
    MlPolicy(String, String),
    #[error("runtime {0} has no spec.template.spec.replicatedJobs")]
    NoTemplate(String),
}

impl Runtime {
    pub fn new(object: Value) -> Self {
        Runtime { object }
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// Its `spec.mlPolicy`, if it has one.
    pub fn ml_policy(&self) -> Result<Option<MlPolicy>, RuntimeError> {
        match self.object["spec"].get("mlPolicy") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| RuntimeError::MlPolicy(self.name().into(), e.to_string())),
        }
    }

    /// Its `spec.template` (a JobSet's metadata and spec).
    pub fn template(&self) -> Result<&Value, RuntimeError> {
        let t = &self.object["spec"]["template"];
        if t["spec"]["replicatedJobs"].is_array() {
            Ok(t)
        } else {
            Err(RuntimeError::NoTemplate(self.name().into()))
        }
    }
}
