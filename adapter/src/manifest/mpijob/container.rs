//! The application container of a replica's pod spec: which one it is, and the fields of it
//! that the agent's own parts replace (what `pods` builds on and `differences` compares).

use serde_json::{Map, Value};

use super::error::MpiJobError;
use super::parse::Replica;
use super::reader::show;

/// The fields of the application container the agent's own parts replace.
pub(super) const REPLACED: &[&str] = &[
    "name",
    "command",
    "args",
    "env",
    "volumeMounts",
    "ports",
    "readinessProbe",
    "livenessProbe",
    "startupProbe",
    "securityContext",
];

/// The first container of a replica's pod spec, as an object.
pub(super) fn first_container(r: &Replica) -> Result<&Map<String, Value>, MpiJobError> {
    match r.spec.get("containers").and_then(|c| c.get(0)) {
        Some(Value::Object(c)) => Ok(c),
        other => Err(MpiJobError::field(
            format!("{}.containers[0]", r.path),
            format!(
                "is {}, not a container",
                other.map(show).unwrap_or_default()
            ),
            "give the container that runs the MPI program",
        )),
    }
}
