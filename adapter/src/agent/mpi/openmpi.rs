//! Open MPI: what its programs say (PRRTE's `prte_info`, `prted --version`, `ompi_info
//! --version`), whether the k8s components fit its PRRTE, and the parameter file the components
//! come with.
//!
//! An Open MPI 5 whose PRRTE is the release the components are built for
//! ([`crate::profile::COMPONENTS`]), built with component loading (`dl support: yes`) and on a
//! PMIx of the same major.minor, gets the components (the version guard in the components
//! checks the same when they are loaded, and is the final word); any other PRRTE goes through
//! PRRTE's ssh launcher with `prrte-k8s-rsh` (its prted checked by its line's profile), Open
//! MPI 3/4 through ORTE's rsh launcher likewise.

use std::path::{Path, PathBuf};

use super::kind::PrrteInfo;
use super::probe::{probe, ProbesFailed, PROBE_TIMEOUT};
use crate::profile::{Components, Profile, COMPONENTS_RELEASE};

/// The version at the start of `text` (`3.0.11`, `5.0.7a1` → `5.0.7`): digits and dots.
fn leading_version(text: &str) -> Option<String> {
    let v: String = text
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v = v.trim_end_matches('.');
    (v.contains('.') && v.split('.').all(|p| !p.is_empty())).then(|| v.to_owned())
}

/// The value of a `   Name: value` line of `prte_info`.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim())
    })
}

/// PRRTE's facts from `prte_info`'s output (and `prte_info --path pkglibdir`'s, which may be
/// the same text). `PRTE: 3.0.x2025-02-17` is the version with the repo revision glued on;
/// PRRTE 5 says `PRRTE: 5.0.0rc1` and `PRRTE repo revision`.
pub(crate) fn parse_prte_info(text: &str) -> PrrteInfo {
    let revision = field(text, "PRTE repo revision")
        .or_else(|| field(text, "PRRTE repo revision"))
        .unwrap_or("");
    let version = field(text, "PRTE")
        .or_else(|| field(text, "PRRTE"))
        .and_then(|v| {
            let v = v
                .strip_suffix(revision)
                .filter(|_| !revision.is_empty())
                .unwrap_or(v);
            leading_version(v)
        });
    let pmix = field(text, "PMIx").and_then(|v| {
        let v = v.trim_start_matches("OpenPMIx").trim();
        leading_version(v)
    });
    let dl_support = field(text, "dl support").map(|v| v.eq_ignore_ascii_case("yes"));
    let pkglibdir = field(text, "Pkglibdir")
        .filter(|v| v.starts_with('/'))
        .map(PathBuf::from);
    PrrteInfo {
        version,
        pmix,
        dl_support,
        pkglibdir,
        allocation_requests: None,
    }
}

/// The version in `prted (PRRTE) 3.0.x` / `prte (PRRTE) 5.0.0rc1`.
pub(crate) fn parse_prrte_version_line(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (_, rest) = l.split_once("(PRRTE)")?;
        leading_version(rest)
    })
}

/// `Open MPI X.Y.Z` from `ompi_info --version` (`Open MPI v4.1.4`) or `mpirun --version`
/// (`mpirun (Open MPI) 5.0.7`).
pub(crate) fn parse_ompi_version(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (_, rest) = l.split_once("Open MPI")?;
        let rest = rest.trim_start_matches(')').trim().trim_start_matches('v');
        leading_version(rest).map(|v| format!("Open MPI {v}"))
    })
}

/// What PRRTE in `dir` says about itself: `prte_info` (and `prte_info --path pkglibdir`), else
/// `prted --version`. `Err` only when none of them can be run at all.
pub(crate) async fn probe_prrte(dir: &Path, prted: &Path) -> Result<PrrteInfo, ProbesFailed> {
    let prte_info = dir.join("prte_info");
    let mut info = PrrteInfo::default();
    let mut errors = Vec::new();
    if prte_info.is_file() {
        match probe(&prte_info, &[], PROBE_TIMEOUT).await {
            Ok(p) => info = parse_prte_info(&p.text),
            Err(e) => errors.push(e),
        }
        if let Ok(p) = probe(&prte_info, &["--path", "pkglibdir"], PROBE_TIMEOUT).await {
            info.pkglibdir = parse_prte_info(&p.text).pkglibdir;
        }
    }
    if info.version.is_none() {
        match probe(prted, &["--version"], PROBE_TIMEOUT).await {
            Ok(p) => info.version = parse_prrte_version_line(&p.text),
            Err(e) => errors.push(e),
        }
    }
    if info == PrrteInfo::default() && !errors.is_empty() {
        return Err(ProbesFailed(errors));
    }
    info.allocation_requests =
        crate::profile::allocation_requests::serves_installation(dir, info.pkglibdir.as_deref());
    Ok(info)
}

/// The Open MPI version of the installation in `dir` (`ompi_info --version`, else `mpirun
/// --version`), if it says.
pub(crate) async fn probe_ompi_version(dir: &Path) -> Option<String> {
    for (prog, args) in [
        ("ompi_info", &["--version"][..]),
        ("mpirun", &["--version"]),
    ] {
        let p = dir.join(prog);
        if !p.is_file() {
            continue;
        }
        if let Ok(out) = probe(&p, args, PROBE_TIMEOUT).await {
            if let Some(v) = parse_ompi_version(&out.text) {
                return Some(v);
            }
        }
    }
    None
}

/// Why the components do not fit an image's PRRTE (the one line the agent logs before it falls
/// back to PRRTE's ssh launcher through prrte-k8s-rsh).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Misfit {
    #[error("its PRRTE did not say its version (prte_info, prted --version)")]
    NoVersion,
    #[error("its PRRTE is {0}, the k8s components are built for PRRTE {1}")]
    Prrte(String, String),
    #[error(
        "its PRRTE cannot load components (prte_info: dl support: no; built with \
         --disable-dlopen)"
    )]
    NoDl,
    #[error("its PMIx is {0}, the k8s components are built for PMIx {1}.x")]
    Pmix(String, String),
}

/// `Ok` when the components fit this PRRTE; else why not.
pub(crate) fn components_fit(info: &PrrteInfo) -> Result<(), Misfit> {
    let Some(version) = &info.version else {
        return Err(Misfit::NoVersion);
    };
    let built = COMPONENTS_RELEASE.prrte;
    let Some(Components {
        pmix: built_pmix, ..
    }) = Profile::with_components(version).and_then(|p| p.components)
    else {
        return Err(Misfit::Prrte(version.clone(), built.to_string()));
    };
    if info.dl_support == Some(false) {
        return Err(Misfit::NoDl);
    }
    match &info.pmix {
        Some(p) if p == built_pmix || p.starts_with(&format!("{built_pmix}.")) => Ok(()),
        Some(p) => Err(Misfit::Pmix(p.clone(), built_pmix.to_string())),
        None => Ok(()),
    }
}

/// The `name = value` settings of a PRRTE parameter file, in order (comments, blank and
/// malformed lines left out).
pub fn parse_param_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            let (k, v) = (k.trim(), v.trim());
            let name_ok =
                !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            name_ok.then(|| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIXIE: &str = "                    PRTE: 3.0.82025-02-17
      PRTE repo revision: 2025-02-17
       PRTE release date: @PMIX_RELEASE_DATE@
                    PMIx: OpenPMIx 5.0.7a1 (PMIx Standard: 5.1, Stable ABI:
                          5.0, Provisional ABI: 5.0)
                  Prefix: /usr
              dl support: yes
                 MCA plm: ssh (MCA v2.1.0, API v2.0.0, Component v3.0.6)
";
    const WHEEL: &str = "                    PRTE: 3.0.11a12025-05-30
      PRTE repo revision: 2025-05-30
                    PMIx: OpenPMIx 5.0.8a1 (PMIx Standard: 5.1, Stable ABI:
              dl support: no
";

    #[test]
    fn prte_info_of_trixie_and_of_the_wheel() {
        let t = parse_prte_info(TRIXIE);
        assert_eq!(t.version.as_deref(), Some("3.0.8"));
        assert_eq!(t.pmix.as_deref(), Some("5.0.7"));
        assert_eq!(t.dl_support, Some(true));
        assert_eq!(t.pkglibdir, None);
        components_fit(&t).unwrap();
        let w = parse_prte_info(WHEEL);
        assert_eq!(w.version.as_deref(), Some("3.0.11"));
        assert_eq!(w.pmix.as_deref(), Some("5.0.8"));
        assert_eq!(w.dl_support, Some(false));
        let why = components_fit(&w).unwrap_err().to_string();
        assert!(
            why.contains("PRRTE is 3.0.11") && why.contains("3.0.8"),
            "{why}"
        );
        let p = parse_prte_info(
            "               Pkglibdir: /usr/lib/x86_64-linux-gnu/openmpi/lib/prte\n",
        );
        assert_eq!(
            p.pkglibdir.as_deref(),
            Some(Path::new("/usr/lib/x86_64-linux-gnu/openmpi/lib/prte"))
        );
    }

    #[test]
    fn the_guard_refuses_what_the_components_refuse() {
        let ok = PrrteInfo {
            version: Some("3.0.8".into()),
            pmix: Some("5.0.5".into()),
            dl_support: Some(true),
            pkglibdir: None,
            allocation_requests: None,
        };
        components_fit(&ok).unwrap();
        let no_dl = PrrteInfo {
            dl_support: Some(false),
            ..ok.clone()
        };
        assert!(components_fit(&no_dl)
            .unwrap_err()
            .to_string()
            .contains("dl support: no"));
        let pmix6 = PrrteInfo {
            pmix: Some("6.0.0".into()),
            ..ok.clone()
        };
        assert!(components_fit(&pmix6)
            .unwrap_err()
            .to_string()
            .contains("PMIx is 6.0.0"));
        let pmix50x = PrrteInfo {
            pmix: Some("5.01.1".into()),
            ..ok.clone()
        };
        assert!(components_fit(&pmix50x).is_err());
        let unknown = PrrteInfo::default();
        assert!(components_fit(&unknown)
            .unwrap_err()
            .to_string()
            .contains("version"));
    }

    #[test]
    fn version_lines() {
        assert_eq!(
            parse_prrte_version_line("prted (PRRTE) 3.0.8\n\nReport bugs to").as_deref(),
            Some("3.0.8")
        );
        assert_eq!(parse_prrte_version_line("Sorry! help file"), None);
        assert_eq!(
            parse_ompi_version("Open MPI v4.1.4\n\nhttps://www.open-mpi.org").as_deref(),
            Some("Open MPI 4.1.4")
        );
        assert_eq!(
            parse_ompi_version("mpirun (Open MPI) 5.0.7\n").as_deref(),
            Some("Open MPI 5.0.7")
        );
        assert_eq!(parse_ompi_version("mpirun: not found"), None);
        assert_eq!(leading_version("5.0.7a1"), Some("5.0.7".into()));
        assert_eq!(leading_version("5"), None);
        assert_eq!(leading_version("x5.0"), None);
    }

    #[test]
    fn param_file() {
        let text = "# c\nras = k8s\n\n  odls_base_max_threads = 0\nbad line\n a b = c\nx=\n";
        assert_eq!(
            parse_param_file(text),
            vec![
                ("ras".into(), "k8s".into()),
                ("odls_base_max_threads".into(), "0".into()),
                ("x".into(), String::new()),
            ]
        );
    }
}
