//! Finding the image's MPI: its daemon (`prted`, `orted`, `hydra_bstrap_proxy`,
//! `hydra_pmi_proxy`) in the directories of `PATH`, then in the directories distributions
//! install MPIs to without putting them on `PATH` (RHEL's `/usr/lib64/openmpi/bin`, ...), and
//! what its own programs say about it.
//!
//! Each kind is taken from the first directory that has its daemon. With `--mpi auto` and more
//! than one kind found, the MPI whose launcher `mpiexec`/`mpirun` on `PATH` is (following
//! symlinks such as Debian's alternatives) wins; if that does not decide, detection fails and
//! asks for `--mpi`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::error::MpiError;
use super::hydra::probe_hydra_version;
use super::kind::{Found, MpiKind};
use super::openmpi::{probe_ompi_version, probe_prrte};
use crate::agent::config::MpiChoice;

/// Directories MPIs are installed to off `PATH` (searched after `PATH`).
pub(crate) const WELL_KNOWN_DIRS: &[&str] = &[
    "/usr/lib64/openmpi/bin",
    "/usr/lib64/openmpi5/bin",
    "/usr/lib64/mpich/bin",
    "/usr/lib/x86_64-linux-gnu/openmpi/bin",
    "/opt/openmpi/bin",
    "/opt/mpich/bin",
    "/opt/intel/oneapi/mpi/latest/bin",
    "/opt/intel/mpi/latest/bin",
];

/// A directory to look in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SearchDir {
    pub dir: PathBuf,
    pub on_path: bool,
}

/// Where to look: the absolute directories of `path` (in order, each once), then `extra`;
/// `skip` (the injected runtime's own `bin/`) left out.
pub(crate) fn search_dirs(
    path: Option<&OsStr>,
    extra: &[&str],
    skip: &[PathBuf],
) -> Vec<SearchDir> {
    let mut out: Vec<SearchDir> = Vec::new();
    let mut add = |dir: PathBuf, on_path: bool| {
        if dir.is_absolute() && !skip.contains(&dir) && !out.iter().any(|d| d.dir == dir) {
            out.push(SearchDir { dir, on_path });
        }
    };
    if let Some(p) = path {
        for d in std::env::split_paths(p) {
            add(d, true);
        }
    }
    for d in extra {
        add(PathBuf::from(d), false);
    }
    out
}

/// Whether `p` is a file this process may execute.
pub(crate) fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file())
        && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// A daemon found, not yet asked what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub kind: MpiKind,
    pub dir: PathBuf,
    pub on_path: bool,
}

impl Candidate {
    pub fn daemon(&self) -> PathBuf {
        self.dir.join(self.kind.daemon())
    }
}

/// The kinds `choice` admits that `dirs` hold, each from the first directory holding its
/// daemon. Hydra's `hydra_pmi_proxy` next to `hydra_bstrap_proxy` is Intel MPI, not MPICH.
pub fn candidates(dirs: &[SearchDir], choice: MpiChoice) -> Vec<Candidate> {
    let mut out = Vec::new();
    for kind in MpiKind::ALL.into_iter().filter(|k| k.chosen_by(choice)) {
        let hit = dirs.iter().find(|d| {
            is_executable(&d.dir.join(kind.daemon()))
                && !(kind == MpiKind::Mpich && is_executable(&d.dir.join(MpiKind::Intel.daemon())))
        });
        if let Some(d) = hit {
            out.push(Candidate {
                kind,
                dir: d.dir.clone(),
                on_path: d.on_path,
            });
        }
    }
    out
}

/// Asks a candidate's programs what it is. `Err` when its programs cannot be run at all.
pub(crate) async fn examine(c: &Candidate) -> Result<Found, MpiError> {
    let daemon = c.daemon();
    let unusable = |why: String| MpiError::Unusable {
        what: c.kind.describe().to_owned(),
        daemon: daemon.display().to_string(),
        why,
    };
    let (version, prrte) = match c.kind {
        MpiKind::Prrte => {
            let info = probe_prrte(&c.dir, &daemon)
                .await
                .map_err(|e| unusable(e.to_string()))?;
            (probe_ompi_version(&c.dir).await, Some(info))
        }
        MpiKind::Orte => (probe_ompi_version(&c.dir).await, None),
        MpiKind::Mpich | MpiKind::Intel => (probe_hydra_version(c.kind, &c.dir).await, None),
    };
    Ok(Found {
        kind: c.kind,
        dir: c.dir.clone(),
        daemon,
        on_path: c.on_path,
        version,
        prrte,
    })
}

/// Which of several candidates `mpiexec`/`mpirun` on `PATH` belongs to: the one whose
/// directory holds the launcher's real file, else the one the file's name says
/// (`mpirun.openmpi`, `mpiexec.hydra`, `mpirun.mpich`, `orterun`, `prterun`).
pub(crate) fn pick_by_launcher(cands: &[Candidate], dirs: &[SearchDir]) -> Option<usize> {
    let launcher = dirs
        .iter()
        .filter(|d| d.on_path)
        .flat_map(|d| [d.dir.join("mpiexec"), d.dir.join("mpirun")])
        .find(|p| is_executable(p))?;
    let real = std::fs::canonicalize(&launcher).ok()?;
    let real_dir = real.parent()?;
    let by_dir: Vec<usize> = cands
        .iter()
        .enumerate()
        .filter(|(_, c)| std::fs::canonicalize(&c.dir).is_ok_and(|d| d == real_dir))
        .map(|(i, _)| i)
        .collect();
    let name = real.file_name()?.to_string_lossy().to_ascii_lowercase();
    let family: &[MpiKind] = if name.contains("openmpi")
        || name.starts_with("orterun")
        || name.starts_with("prterun")
        || name == "prte"
    {
        &[MpiKind::Prrte, MpiKind::Orte]
    } else if name.contains("mpich") || name.contains("hydra") {
        &[MpiKind::Mpich, MpiKind::Intel]
    } else {
        &[]
    };
    if let [one] = by_dir.as_slice() {
        return Some(*one);
    }
    let pool: Vec<usize> = if by_dir.is_empty() {
        (0..cands.len()).collect()
    } else {
        by_dir
    };
    match pool
        .into_iter()
        .filter(|i| family.contains(&cands[*i].kind))
        .collect::<Vec<_>>()
        .as_slice()
    {
        [one] => Some(*one),
        _ => None,
    }
}

/// What detection needs of the agent's environment.
#[derive(Debug, Clone)]
pub struct DetectEnv {
    /// The agent's `PATH`.
    pub path: Option<std::ffi::OsString>,
    /// Directories searched after `PATH` ([`WELL_KNOWN_DIRS`] by default).
    pub(crate) extra_dirs: Vec<String>,
    /// Left out of the search (the injected runtime's `bin/`).
    pub skip: Vec<PathBuf>,
}

impl DetectEnv {
    pub fn from_process(skip: Vec<PathBuf>) -> DetectEnv {
        DetectEnv {
            path: std::env::var_os("PATH"),
            extra_dirs: WELL_KNOWN_DIRS.iter().map(|s| s.to_string()).collect(),
            skip,
        }
    }
}

/// Finds the image's MPI as `choice` asks.
pub async fn detect(choice: MpiChoice, env: &DetectEnv) -> Result<Found, MpiError> {
    let extra: Vec<&str> = env.extra_dirs.iter().map(String::as_str).collect();
    let dirs = search_dirs(env.path.as_deref(), &extra, &env.skip);
    let cands = candidates(&dirs, choice);
    let chosen = match cands.len() {
        0 => {
            let looked_for: Vec<String> = MpiKind::ALL
                .into_iter()
                .filter(|k| k.chosen_by(choice))
                .map(|k| format!("{} ({})", k.daemon(), k.describe()))
                .collect();
            let path = env
                .path
                .as_deref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| "not set".into());
            return Err(MpiError::NotFound {
                choice: choice_name(choice).into(),
                looked_for: looked_for.join(", "),
                path,
                extra: extra.join(", "),
            });
        }
        1 => cands[0].clone(),
        _ => match pick_by_launcher(&cands, &dirs) {
            Some(i) => cands[i].clone(),
            None => {
                let found: Vec<String> = cands
                    .iter()
                    .map(|c| format!("{} ({})", c.kind.describe(), c.daemon().display()))
                    .collect();
                return Err(MpiError::Ambiguous {
                    found: found.join(", "),
                });
            }
        },
    };
    examine(&chosen).await
}

/// The word `--mpi` takes for `choice`.
pub(crate) fn choice_name(choice: MpiChoice) -> &'static str {
    match choice {
        MpiChoice::Auto => "auto",
        MpiChoice::Openmpi => "openmpi",
        MpiChoice::Mpich => "mpich",
        MpiChoice::Intel => "intel",
    }
}
