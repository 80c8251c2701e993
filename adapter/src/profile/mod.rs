//! What is true of each PRRTE release line prrte-k8s works with, in one place: a [`Profile`]
//! per line (PRRTE 3.0, PRRTE 5.0), chosen once from the version PRRTE reports, gives
//!
//! - prted's command-line grammar as its launchers really build it: the k8s PLM (where the
//!   components run) and PRRTE's ssh launcher (through `prrte-k8s-rsh`), which the agent's
//!   allowlist checks exactly;
//! - the MCA parameters those launchers forward to prted (the launcher sends nothing else, the
//!   agent takes nothing else);
//! - for the release the k8s components are built for ([`built`]), its PMIx, our patch level
//!   and patches (`prrte-config/patches`) and prted's process states as the PLM reads them;
//! - what the line's builds have or lack (`Features`).
//!
//! The version guard in the components (`cabi`) chooses the profile of the PRRTE it runs in
//! ([`Profile::with_components`]); the agent's detection the image's ([`Profile::of`]). A new
//! patch level or a later PRRTE is a new profile here, nothing elsewhere.

pub mod allocation_requests;
pub mod built;
mod model;
mod v3_0;
mod v5_0;

pub use model::{Components, ProcStates, Profile};

/// The line of the PRRTE the components are built for.
pub const COMPONENTS: &Profile = &v3_0::PROFILE;

/// What [`COMPONENTS`] says of the release the components are built for (a profile without one
/// fails the build).
pub const COMPONENTS_RELEASE: Components = match COMPONENTS.components {
    Some(c) => c,
    None => panic!("the components' profile names no release"),
};

/// Every line prrte-k8s knows, oldest first.
pub(crate) const PROFILES: [&Profile; 2] = [&v3_0::PROFILE, &v5_0::PROFILE];

impl Profile {
    /// The profile of PRRTE `version` (`5.0.0`, `3.0.11`), by its `major.minor`; `None` for a
    /// line prrte-k8s has no profile of.
    pub fn of(version: &str) -> Option<&'static Profile> {
        let mut parts = version.trim().split('.');
        let line = format!("{}.{}", parts.next()?, parts.next()?);
        PROFILES.into_iter().find(|p| p.line == line)
    }

    /// The profile whose components are built for exactly PRRTE `release`.
    pub fn with_components(release: &str) -> Option<&'static Profile> {
        PROFILES
            .into_iter()
            .find(|p| p.components.is_some_and(|c| c.prrte == release))
    }
}

#[cfg(test)]
mod tests;
