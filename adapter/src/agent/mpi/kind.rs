//! What `--mpi` asks for and what detection finds: the MPI families, the daemon each is known
//! by, and the facts read from the image's programs.

use std::path::PathBuf;

use crate::agent::config::MpiChoice;

/// The runtime an MPI found in the image launches with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpiKind {
    /// PRRTE's `prte`/`prted` (Open MPI 5, or PRRTE on its own).
    Prrte,
    /// ORTE's `orted` (Open MPI 3.x and 4.x).
    Orte,
    /// MPICH's Hydra (`hydra_pmi_proxy`).
    Mpich,
    /// Intel MPI's Hydra (`hydra_bstrap_proxy`).
    Intel,
}

impl MpiKind {
    /// Every kind, in the order detection looks for them.
    pub const ALL: [MpiKind; 4] = [
        MpiKind::Prrte,
        MpiKind::Orte,
        MpiKind::Intel,
        MpiKind::Mpich,
    ];

    /// The daemon a kind is found by (the program a remote launch starts).
    pub fn daemon(self) -> &'static str {
        match self {
            MpiKind::Prrte => "prted",
            MpiKind::Orte => "orted",
            MpiKind::Mpich => "hydra_pmi_proxy",
            MpiKind::Intel => "hydra_bstrap_proxy",
        }
    }

    /// What the kind is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            MpiKind::Prrte => "Open MPI 5 / PRRTE",
            MpiKind::Orte => "Open MPI 4 (ORTE)",
            MpiKind::Mpich => "MPICH (Hydra)",
            MpiKind::Intel => "Intel MPI (Hydra)",
        }
    }

    /// Whether `--mpi choice` admits this kind.
    pub(crate) fn chosen_by(self, choice: MpiChoice) -> bool {
        match choice {
            MpiChoice::Auto => true,
            MpiChoice::Openmpi => matches!(self, MpiKind::Prrte | MpiKind::Orte),
            MpiChoice::Mpich => self == MpiKind::Mpich,
            MpiChoice::Intel => self == MpiKind::Intel,
        }
    }
}

/// What PRRTE's own programs say about it (`prte_info`, `prted --version`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrrteInfo {
    /// PRRTE's version, e.g. `5.0.0`.
    pub version: Option<String>,
    /// PMIx's version, e.g. `5.0.7`.
    pub pmix: Option<String>,
    /// Whether PRRTE loads components from files (`dl support: yes`).
    pub(crate) dl_support: Option<bool>,
    /// The directory PRRTE loads its components from by default.
    pub pkglibdir: Option<PathBuf>,
    /// Whether it serves PMIx allocation requests (our patch 0003; see
    /// [`crate::profile::allocation_requests`]); None when its library was not found.
    pub allocation_requests: Option<bool>,
}

/// One MPI found in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: MpiKind,
    /// The directory holding its daemon (and, as a rule, its launcher).
    pub dir: PathBuf,
    /// The daemon: prted, orted, hydra_pmi_proxy or hydra_bstrap_proxy.
    pub daemon: PathBuf,
    /// Whether `dir` is on the agent's `PATH` (else it was found in a well-known directory).
    pub on_path: bool,
    /// The MPI's name and version as its programs report them, e.g. `Open MPI 5.0.7`.
    pub version: Option<String>,
    /// PRRTE's facts, for [`MpiKind::Prrte`].
    pub prrte: Option<PrrteInfo>,
}

impl Found {
    /// One line naming what was found.
    pub fn summary(&self) -> String {
        let what = self
            .version
            .clone()
            .unwrap_or_else(|| format!("{} (version unknown)", self.kind.describe()));
        let mut s = format!("{what}: {}", self.daemon.display());
        if let Some(p) = &self.prrte {
            let v = |o: &Option<String>| o.clone().unwrap_or_else(|| "unknown".into());
            s.push_str(&format!(
                " (PRRTE {}, PMIx {}, component loading {})",
                v(&p.version),
                v(&p.pmix),
                match p.dl_support {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "unknown",
                }
            ));
            match p.allocation_requests {
                Some(true) => s.push_str("; allocation requests served"),
                Some(false) => {
                    s.push_str("; ");
                    s.push_str(crate::profile::allocation_requests::NOT_SERVED);
                }
                None => {}
            }
        }
        s
    }
}
