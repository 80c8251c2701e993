//! What a launch request (the k8s PLM) may ask of prted: the arguments its PRRTE's profile
//! gives the k8s PLM ([`crate::profile::COMPONENTS`]), the MCA parameters of that profile and
//! Open MPI's that may come in the environment, and a DVM URI on the launcher's own address.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::error::{PolicyError, Request};
use super::grammar::{check, same_host, Ctx};
use crate::profile::COMPONENTS;
use crate::protocol::grammar::Grammar;

/// prted as the k8s PLM starts it: the components' PRRTE has that grammar (checked when this
/// is compiled).
const PRTED_LAUNCH: &Grammar = match COMPONENTS.prted_launch {
    Some(g) => g,
    None => panic!("the profile the components are built for has no k8s PLM grammar"),
};
use crate::protocol::params::Project;
use crate::protocol::{validate_dvm_uri, validate_launch, InvalidDvmUri, LaunchRefusal};

/// Why the agent refuses a launch request (the reason goes back as `failed {reason}`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchRequestError {
    #[error(transparent)]
    Request(#[from] LaunchRefusal),
    #[error(transparent)]
    DvmUri(#[from] InvalidDvmUri),
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// A launch request from `peer` as the agent checks it: the protocol's checks of its arguments
/// and environment, this policy's, and those of the DVM URI it carries; prted's checked
/// arguments (the HNP's URI pinned to `peer`).
pub(crate) fn check_launch_request(
    argv: &[String],
    env: &BTreeMap<String, String>,
    dvm_uri: Option<&str>,
    peer: IpAddr,
) -> Result<Vec<String>, LaunchRequestError> {
    validate_launch(argv, env)?;
    let argv = check_launch(argv, env, peer)?;
    if let Some(uri) = dvm_uri {
        validate_dvm_uri(uri)?;
        check_dvm_uri_host(uri, peer)?;
    }
    Ok(argv)
}

/// Checks a launch request from `peer`; prted's checked arguments (the HNP's URI pinned to
/// `peer`).
pub fn check_launch(
    argv: &[String],
    env: &BTreeMap<String, String>,
    peer: IpAddr,
) -> Result<Vec<String>, PolicyError> {
    let ctx = Ctx {
        req: Request::Launch,
        peer,
        rsh: None,
        path: None,
        program: None,
        prrte: COMPONENTS,
    };
    let argv = check(PRTED_LAUNCH, argv, &ctx)?;
    for (name, value) in env {
        check_env_var(name, value)?;
    }
    Ok(argv)
}

/// One variable of a launch request's environment: an allowlisted MCA parameter that may come
/// in the environment, with a value of its shape.
pub(crate) fn check_env_var(name: &str, value: &str) -> Result<(), PolicyError> {
    let refuse = |why: String| PolicyError::Env {
        req: Request::Launch,
        name: name.to_owned(),
        why,
    };
    let Some((project, param)) = [Project::Prte, Project::Pmix, Project::Ompi]
        .into_iter()
        .find_map(|p| Some((p, name.strip_prefix(p.env_prefix())?)))
    else {
        return Err(refuse(
            "only MCA parameters (PRTE_MCA_*, PMIX_MCA_*, OMPI_MCA_*) go with a launch; \
             other settings belong in the pod spec"
                .into(),
        ));
    };
    let Some(p) = COMPONENTS
        .launch_param(project, param)
        .filter(|p| p.in_env())
    else {
        return Err(refuse(format!(
            "MCA parameter `{}` is not one the k8s PLM passes to prted; site settings belong \
             in the pod spec (the agent's environment, which prted inherits) or the image's \
             parameter file",
            crate::text::printable(param, 120)
        )));
    };
    if !p.shape.accepts(value) {
        return Err(refuse(format!(
            "`{}` is not a valid value of {param} (expected {})",
            crate::text::printable(value, 120),
            p.shape.describe()
        )));
    }
    Ok(())
}

/// A launch's `dvm_uri` (already checked by [`crate::protocol::validate_dvm_uri`]) must point at
/// the launcher's own address: prte runs the DVM's tool server where it launches from, so any
/// other address would let a launcher send this pod's `prrte-k8s prun` elsewhere.
pub fn check_dvm_uri_host(uri: &str, launcher: IpAddr) -> Result<(), PolicyError> {
    let host = uri
        .split_once(";tcp4://")
        .and_then(|(_, hp)| hp.rsplit_once(':'))
        .map(|(h, _)| h);
    match host.and_then(|h| h.parse::<std::net::Ipv4Addr>().ok()) {
        Some(h) if same_host(IpAddr::V4(h), launcher) => Ok(()),
        _ => Err(PolicyError::DvmUriElsewhere {
            named: host.unwrap_or(uri).to_owned(),
            peer: launcher,
        }),
    }
}
