//! How the agent serves the MPI detection found: the launch path, the daemon it allows, and the
//! injected runtime's files that path needs.

use std::path::{Path, PathBuf};

use super::detect::is_executable;
use super::error::MpiError;
use super::kind::{Found, MpiKind};
use super::openmpi::components_fit;
use crate::hostfile::Format;
use crate::profile::Profile;

/// The component files of the injected runtime (under `lib/prte/`).
pub(crate) const COMPONENT_FILES: [&str; 2] = ["prte_mca_ras_k8s.so", "prte_mca_plm_k8s.so"];

/// How the job's launcher (the batch command, the DVM head) starts its daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// The image's PRRTE (the components' release) loads `ras k8s` and `plm k8s`: the pods'
    /// agents start its prted.
    Components,
    /// PRRTE's ssh launcher with `prrte-k8s-rsh` and a hostfile of the job's pods.
    PrrteRsh,
    /// ORTE's rsh launcher with `prrte-k8s-rsh` and a hostfile.
    OrteRsh,
    /// MPICH's Hydra, ssh launcher `prrte-k8s-rsh`, a machinefile.
    MpichHydra,
    /// Intel MPI's Hydra, ssh bootstrap `prrte-k8s-rsh`, a machinefile.
    IntelHydra,
}

impl Launch {
    /// A stable name (printed by `--detect-only`, first line).
    pub fn name(self) -> &'static str {
        match self {
            Launch::Components => "prrte-components",
            Launch::PrrteRsh => "prrte-rsh",
            Launch::OrteRsh => "orte-rsh",
            Launch::MpichHydra => "mpich-hydra",
            Launch::IntelHydra => "intel-hydra",
        }
    }

    /// An Open MPI's launch path (PRRTE or ORTE), whose ranks read `OMPI_MCA_*`.
    pub(crate) fn is_open_mpi(self) -> bool {
        matches!(
            self,
            Launch::Components | Launch::PrrteRsh | Launch::OrteRsh
        )
    }

    /// What it means, for the log.
    pub fn describe(self) -> &'static str {
        match self {
            Launch::Components => {
                "the image's prte with the k8s components (ras k8s, plm k8s): daemons through the pods' agents"
            }
            Launch::PrrteRsh => "PRRTE's ssh launcher through prrte-k8s-rsh, hosts from a hostfile",
            Launch::OrteRsh => "ORTE's rsh launcher through prrte-k8s-rsh, hosts from a hostfile",
            Launch::MpichHydra | Launch::IntelHydra => {
                "Hydra's ssh launcher through prrte-k8s-rsh, hosts from a machinefile"
            }
        }
    }
}

/// What the agent does for the MPI found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub found: Found,
    pub launch: Launch,
    /// The injected runtime (`bin/`, `lib/prte/`, `etc/`).
    pub runtime: PathBuf,
    /// Why an Open MPI 5 does not get the components (logged once), when it does not.
    pub fallback: Option<String>,
}

impl Plan {
    /// Decides the launch path for `found` and checks that `runtime` has what it needs.
    pub fn decide(found: Found, runtime: &Path) -> Result<Plan, MpiError> {
        let mut fallback = None;
        let launch = match found.kind {
            MpiKind::Prrte => {
                match components_fit(found.prrte.as_ref().unwrap_or(&Default::default())) {
                    Ok(()) => Launch::Components,
                    Err(why) => {
                        fallback = Some(why.to_string());
                        Launch::PrrteRsh
                    }
                }
            }
            MpiKind::Orte => Launch::OrteRsh,
            MpiKind::Mpich => Launch::MpichHydra,
            MpiKind::Intel => Launch::IntelHydra,
        };
        let plan = Plan {
            found,
            launch,
            runtime: runtime.to_owned(),
            fallback,
        };
        plan.check_runtime()?;
        Ok(plan)
    }

    fn check_runtime(&self) -> Result<(), MpiError> {
        let missing = |what: PathBuf, why: &str| MpiError::Runtime {
            dir: self.runtime.display().to_string(),
            missing: what.display().to_string(),
            why: why.to_owned(),
        };
        if self.launch == Launch::Components {
            for f in COMPONENT_FILES {
                let p = self.components_dir().join(f);
                if !std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
                    return Err(missing(p, "the k8s components this image's PRRTE loads"));
                }
            }
        } else if !is_executable(&self.rsh()) {
            return Err(missing(
                self.rsh(),
                "the ssh stand-in this image's MPI starts its daemons with",
            ));
        }
        Ok(())
    }

    /// `prrte-k8s-rsh` of the injected runtime.
    pub fn rsh(&self) -> PathBuf {
        self.runtime.join("bin/prrte-k8s-rsh")
    }

    /// The injected runtime's `bin/` (appended to the command's `PATH`).
    pub fn bin_dir(&self) -> PathBuf {
        self.runtime.join("bin")
    }

    /// The injected runtime's components.
    pub(crate) fn components_dir(&self) -> PathBuf {
        self.runtime.join("lib/prte")
    }

    /// The injected runtime's site parameter file.
    pub(crate) fn param_file(&self) -> PathBuf {
        self.runtime.join("etc/prte-mca-params.conf")
    }

    /// The profile of the image's PRRTE line, if prrte-k8s has one.
    pub fn prrte_profile(&self) -> Option<&'static Profile> {
        let version = self.found.prrte.as_ref()?.version.as_deref()?;
        Profile::of(version)
    }

    /// The daemon the agent starts for launch requests (its `--prted`).
    pub fn daemon(&self) -> &Path {
        &self.found.daemon
    }

    /// The prte the DVM head runs, where the launch path has one.
    pub fn prte(&self) -> Option<PathBuf> {
        (self.launch == Launch::Components).then(|| self.found.dir.join("prte"))
    }

    /// The programs `exec` requests (`prrte-k8s-rsh` from the launcher's pod) may run.
    pub(crate) fn exec_allow(&self) -> Vec<PathBuf> {
        match self.launch {
            Launch::Components => Vec::new(),
            _ => vec![self.found.daemon.clone()],
        }
    }

    /// The hostfile the launcher reads, where it needs one.
    pub(crate) fn hostfile_format(&self) -> Option<Format> {
        match self.launch {
            Launch::Components => None,
            Launch::PrrteRsh | Launch::OrteRsh => Some(Format::Openmpi),
            Launch::MpichHydra => Some(Format::Mpich),
            Launch::IntelHydra => Some(Format::Intel),
        }
    }
}
