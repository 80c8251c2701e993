//! An MPIJob as the API server stores it, read so that no stored MPIJob fails to be read:
//! its metadata, with its spec and status kept as JSON. The controller watches MPIJobs as
//! this type, so that one MPIJob that does not fit the model (a field of another type, or a
//! value of another shape, which a CRD other than ours, e.g. mpi-operator's, or an older or
//! newer version of ours, may let in) cannot fail the list or the watch of all of them: each
//! is read into the model ([`StoredMpiJob::model`]) on its own, and one that does not fit is
//! told by the first field that does not ([`Unfit`]).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::model::{MpiJob, MpiJobSpec, MpiJobStatus};

/// A stored `kubeflow.org/v2beta1` MPIJob: its metadata, its spec and status as they are.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub(crate) struct StoredMpiJob {
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: Value,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    status: Value,
}

/// Where a stored MPIJob does not fit the model, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unfit {
    /// The field, e.g. `spec.runPolicy.suspend` (`spec` itself for a field it lacks).
    pub path: String,
    /// serde's reason, e.g. `invalid type: string "yes", expected a boolean`.
    pub problem: String,
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl std::error::Error for Unfit {}

impl Resource for StoredMpiJob {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        MpiJob::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        MpiJob::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        MpiJob::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        MpiJob::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Only what tells which controller an MPIJob is for, read leniently: every other field of
/// `spec` (and of `spec.runPolicy`) is ignored, whatever its shape.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagedSpec {
    #[serde(default)]
    run_policy: Option<ManagedPolicy>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagedPolicy {
    #[serde(default)]
    managed_by: Option<String>,
}

impl StoredMpiJob {
    /// The MPIJob in the model, or the first field that does not fit it.
    pub(crate) fn model(&self) -> Result<MpiJob, Unfit> {
        let spec = read::<MpiJobSpec>(&self.spec, "spec")?;
        let status = match &self.status {
            Value::Null => None,
            s => Some(read::<MpiJobStatus>(s, "status")?),
        };
        Ok(MpiJob {
            metadata: self.metadata.clone(),
            spec,
            status,
        })
    }

    /// `spec.runPolicy.managedBy` (`Ok(None)` when it is absent), read however the rest of the
    /// spec is shaped; `Err` when `runPolicy` or `managedBy` itself is of another type.
    pub(crate) fn managed_by(&self) -> Result<Option<String>, Unfit> {
        if self.spec.is_null() {
            return Ok(None);
        }
        let m = read::<ManagedSpec>(&self.spec, "spec")?;
        Ok(m.run_policy.and_then(|p| p.managed_by))
    }

    /// The status as the model reads it; none when it is absent or does not fit (the
    /// controller's next status replaces it whole).
    pub(crate) fn status(&self) -> Option<MpiJobStatus> {
        match &self.status {
            Value::Null => None,
            s => MpiJobStatus::deserialize(s).ok(),
        }
    }
}

impl From<&MpiJob> for StoredMpiJob {
    fn from(job: &MpiJob) -> Self {
        Self {
            metadata: job.metadata.clone(),
            spec: serde_json::to_value(&job.spec).unwrap_or_default(),
            status: job
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_default(),
        }
    }
}

/// `v` (found at `at`) as a `T`, or where it does not fit: the path serde was at when it
/// failed (for a missing field, the object that lacks it).
fn read<T: DeserializeOwned>(v: &Value, at: &str) -> Result<T, Unfit> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let below = e.path().to_string();
        let path = match below.as_str() {
            "." => at.to_string(),
            b if b.starts_with('[') => format!("{at}{b}"),
            b => format!("{at}.{b}"),
        };
        Unfit {
            path,
            problem: e.into_inner().to_string(),
        }
    })
}

#[cfg(test)]
mod tests;
