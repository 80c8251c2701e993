//! The status' write: a server-side apply of the whole status under the controller's field
//! manager, forced; a replica count of zero left out, as mpi-operator leaves it out.

use kube::api::{Api, Patch};
use kube::Resource;
use serde_json::json;

use super::context::{apply_params, Context};
use super::retry::{api_error, ReconcileError};
use crate::manifest::mpijob::model::{MpiJob, MpiJobStatus};
use crate::manifest::mpijob::stored::StoredMpiJob;

/// Applies `status` to the MPIJob `ns/name`; false when the MPIJob is gone.
pub(super) async fn write_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    status: &MpiJobStatus,
) -> Result<bool, ReconcileError> {
    // Read back as stored: the answer need not fit the model.
    let api: Api<StoredMpiJob> = Api::namespaced(ctx.client.clone(), ns);
    match api
        .patch_status(name, &apply_params(true), &Patch::Apply(status_of(status)))
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        r => r.map(|_| true).map_err(api_error(format!(
            "writing the status of the MPIJob {ns}/{name}"
        ))),
    }
}

/// The body of the status' apply: the whole status, which is the controller's (forced: a
/// status written by another, e.g. before `managedBy` named this controller, is taken over).
/// A replica count of zero is left out, as mpi-operator leaves it out: the count the
/// controller's earlier apply set goes with it (server-side apply deletes the fields a
/// manager's apply no longer sets).
fn status_of(status: &MpiJobStatus) -> serde_json::Value {
    json!({
        "apiVersion": MpiJob::api_version(&()),
        "kind": MpiJob::kind(&()),
        "status": status,
    })
}
