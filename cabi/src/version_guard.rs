//! The version guard: the components only run inside the PRRTE and PMIx they were built for.
//!
//! The library is compiled against one configured PRRTE tree: struct layouts (`prte_node_t`,
//! `prte_job_t`, the module structs) and the meaning of state numbers come from its headers. Loaded
//! into another PRRTE, those layouts may be wrong and using them could corrupt memory. So the
//! library records the PRRTE version (major.minor.release) and the PMIx major.minor of the tree it
//! was built against, and before PRRTE touches either component (its `register` step, which
//! always precedes `open` and `query`, and again at `open`) compares them with the running
//! libraries:
//!
//! - PRRTE: `prte_version_string`, exported by `libprrte` (PRRTE's `PRTE_IDENT_STRING`, e.g.
//!   `3.0.x`); the exact major.minor.release must match.
//! - PMIx: `PMIx_Get_version()` (`OpenPMIx 5.0.5 (PMIx Standard: ...)`); major.minor must match,
//!   since PMIx keeps its ABI across patch releases (distributions ship 5.0.x builds).
//!
//! Both are looked up by name at run time, so a library lacking them is reported as "unknown"
//! rather than failing to load. On a mismatch the component returns `PMIX_ERR_NOT_AVAILABLE`
//! (PMIx's "silently ignore me"): PRRTE drops both components and carries on with its others, and
//! the process prints one line naming both versions (once, however many components decline).
//!
//! Admitted, the guard chooses the PRRTE profile the components then work by
//! ([`prrte_k8s::profile`]: prted's grammar, the parameters forwarded to it, its daemon states):
//! the one whose components' release is the PRRTE built for. A build against a PRRTE with no
//! such profile is refused the same way, naming it.
//!
//! The recorded versions can be overridden at build time with `PRRTE_K8S_RECORD_PRRTE_VERSION`
//! (`X.Y.Z`) and `PRRTE_K8S_RECORD_PMIX_VERSION` (`X.Y`); that exists to test the guard.
use crate::boundary::boundary;
use crate::{ffi, pointers};
use prrte_k8s::profile::{Components, Profile, COMPONENTS_RELEASE};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::sync::{Once, OnceLock};

/// What the components' profile says of the release they are built for (its process states
/// are checked against the headers' when this crate is compiled, see `plm::daemons`).
pub(crate) const BUILT: Components = COMPONENTS_RELEASE;

/// The versions the library was built for, or the ones it runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Versions {
    /// PRRTE major.minor.release, e.g. `3.0.11`.
    pub(crate) prrte: String,
    /// PMIx major.minor, e.g. `5.0`.
    pub(crate) pmix: String,
}

/// What this library was built against (from the configured tree's headers).
pub(crate) fn built_for() -> Versions {
    let prrte = option_env!("PRRTE_K8S_RECORD_PRRTE_VERSION")
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "{}.{}.{}",
                ffi::PRTE_MAJOR_VERSION,
                ffi::PRTE_MINOR_VERSION,
                ffi::PRTE_RELEASE_VERSION
            )
        });
    let pmix = option_env!("PRRTE_K8S_RECORD_PMIX_VERSION")
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}.{}", ffi::PMIX_MAJOR_VERSION, ffi::PMIX_MINOR_VERSION));
    Versions { prrte, pmix }
}

/// The leading `N.N[.N...]` of a version string, cut to `parts` numbers.
pub(crate) fn numeric_prefix(s: &str, parts: usize) -> Option<String> {
    let nums: Vec<&str> = s
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?
        .split('.')
        .take(parts)
        .collect();
    (nums.len() == parts && nums.iter().all(|n| !n.is_empty())).then(|| nums.join("."))
}

/// PRRTE's version from the text of `prte_version_string`.
pub(crate) fn parse_prrte(ident: &str) -> Option<String> {
    numeric_prefix(ident.trim(), 3)
}

/// PMIx major.minor from the text `PMIx_Get_version()` returns (`OpenPMIx 5.0.5 (...)`).
pub(crate) fn parse_pmix(text: &str) -> Option<String> {
    let after = text.trim().strip_prefix("OpenPMIx").unwrap_or(text);
    numeric_prefix(after, 2)
}

/// The versions of the PRRTE and PMIx this process runs (`None` where a library does not say).
pub(crate) fn running() -> (Option<String>, Option<String>) {
    let prrte = {
        let p = pointers::symbol(c"prte_version_string")
            .cast_const()
            .cast::<c_char>();
        if p.is_null() {
            None
        } else {
            // SAFETY: `prte_version_string` is a NUL-terminated `const char[]` in libprrte.
            parse_prrte(&unsafe { CStr::from_ptr(p) }.to_string_lossy())
        }
    };
    // SAFETY: PMIx_Get_version is `const char *(void)` in every PMIx release.
    let get =
        unsafe { pointers::function::<extern "C" fn() -> *const c_char>(c"PMIx_Get_version") };
    let pmix = get.map(|get| get()).filter(|p| !p.is_null()).and_then(|p| {
        // SAFETY: PMIx_Get_version's result: a static NUL-terminated string owned by libpmix.
        parse_pmix(&unsafe { CStr::from_ptr(p) }.to_string_lossy())
    });
    (prrte, pmix)
}

/// The PRRTE or PMIx that runs is not the one the components were built for; displays as the
/// one line to print.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "prrte-k8s: the k8s components (ras, plm) were built for PRRTE {} with PMIx {} but this is \
     PRRTE {} with PMIx {}; they are not used (PRRTE continues with its other components); \
     rebuild prrte-k8s against this PRRTE (docs/admin-guide.md)",
    built.prrte,
    built.pmix,
    shown(prrte),
    shown(pmix)
)]
pub(crate) struct VersionMismatch {
    pub(crate) built: Versions,
    /// The running PRRTE's version, if it could be read.
    pub(crate) prrte: Option<String>,
    /// The running PMIx's major.minor, if it could be read.
    pub(crate) pmix: Option<String>,
}

/// Why the components do not run here; displays as the one line to print.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error(transparent)]
    Mismatch(#[from] VersionMismatch),
    #[error(
        "prrte-k8s: the k8s components (ras, plm) were built for PRRTE {0}, which prrte-k8s has \
         no profile for; they are not used (PRRTE continues with its other components); build \
         prrte-k8s against a PRRTE it has a profile for (prrte-config/README.md)"
    )]
    NoProfile(String),
}

fn shown(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("unknown")
}

/// Compare what we were built for with what runs.
pub(crate) fn check(
    built: &Versions,
    running: &(Option<String>, Option<String>),
) -> Result<(), VersionMismatch> {
    let (prrte, pmix) = running;
    if prrte.as_deref() == Some(built.prrte.as_str())
        && pmix.as_deref() == Some(built.pmix.as_str())
    {
        return Ok(());
    }
    Err(VersionMismatch {
        built: built.clone(),
        prrte: prrte.clone(),
        pmix: pmix.clone(),
    })
}

/// The profile of the PRRTE built for, if the running PRRTE and PMIx are the ones built for.
pub(crate) fn choose(
    built: &Versions,
    running: &(Option<String>, Option<String>),
) -> Result<&'static Profile, Refusal> {
    check(built, running)?;
    Profile::with_components(&built.prrte).ok_or_else(|| Refusal::NoProfile(built.prrte.clone()))
}

static CHOSEN: OnceLock<Result<&'static Profile, Refusal>> = OnceLock::new();

/// The guard's decision, made once per process.
fn decision() -> &'static Result<&'static Profile, Refusal> {
    CHOSEN.get_or_init(|| choose(&built_for(), &running()))
}

/// The profile the components work by: the one the guard chose (the components run only once it
/// admitted them).
pub(crate) fn profile() -> Option<&'static Profile> {
    decision().as_ref().ok().copied()
}

/// The components' release as the chosen profile describes it.
pub(crate) fn components() -> &'static Components {
    profile()
        .and_then(|p| p.components.as_ref())
        .unwrap_or(&BUILT)
}

/// Whether the components may run here; on the first refusal prints the one line to stderr.
pub(crate) fn admitted() -> bool {
    static REPORTED: Once = Once::new();
    match decision() {
        Ok(_) => true,
        Err(line) => {
            // One line on stderr, never a panic if stderr is gone.
            REPORTED.call_once(|| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "{line}");
            });
            false
        }
    }
}

/// What a component answers PMIx when the guard refuses: `PMIX_ERR_NOT_AVAILABLE`.
pub(crate) const DECLINE: c_int = ffi::PMIX_ERR_NOT_AVAILABLE as c_int;

/// [`admitted`] behind the panic boundary, for a component's `register` step (`what` names it).
pub(crate) fn admits(what: &str) -> bool {
    boundary(what, false, admitted)
}

/// Both components' `open`: the same check (a no-op once register has passed it).
///
/// # Safety
///
/// Called by PMIx on the main thread, like every MCA callback.
pub(crate) unsafe extern "C" fn open() -> c_int {
    if admits("k8s version guard") {
        ffi::PMIX_SUCCESS as c_int
    } else {
        DECLINE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(prrte: &str, pmix: &str) -> Versions {
        Versions {
            prrte: prrte.into(),
            pmix: pmix.into(),
        }
    }

    #[test]
    fn parses_what_prrte_and_pmix_report() {
        assert_eq!(parse_prrte("3.0.8").as_deref(), Some("3.0.8"));
        assert_eq!(parse_prrte("3.0.9rc1").as_deref(), Some("3.0.9"));
        assert_eq!(parse_prrte("4.1.0a1").as_deref(), Some("4.1.0"));
        assert_eq!(parse_prrte("3.0"), None);
        assert_eq!(parse_prrte("gitclone"), None);
        let pmix = "OpenPMIx 5.0.5 (PMIx Standard: 4.2, Stable ABI: 0.0, Provisional ABI: 0.0)";
        assert_eq!(parse_pmix(pmix).as_deref(), Some("5.0"));
        assert_eq!(
            parse_pmix("OpenPMIx 5.0.7rc1 (PMIx Standard: 4.2)").as_deref(),
            Some("5.0")
        );
        assert_eq!(parse_pmix("OpenPMIx 6.0.0").as_deref(), Some("6.0"));
        assert_eq!(parse_pmix(""), None);
    }

    #[test]
    fn exact_prrte_and_pmix_major_minor_must_match() {
        let built = v("3.0.8", "5.0");
        assert!(check(&built, &(Some("3.0.8".into()), Some("5.0".into()))).is_ok());
        for (prrte, pmix) in [
            (Some("3.0.7"), Some("5.0")),
            (Some("4.0.0"), Some("5.0")),
            (Some("3.0.8"), Some("6.0")),
            (None, Some("5.0")),
            (Some("3.0.8"), None),
        ] {
            let running = (prrte.map(String::from), pmix.map(String::from));
            let line = check(&built, &running).unwrap_err().to_string();
            assert!(!line.contains('\n'), "one line: {line}");
            assert!(
                line.contains("built for PRRTE 3.0.8 with PMIx 5.0"),
                "{line}"
            );
            let shown = format!(
                "this is PRRTE {} with PMIx {}",
                prrte.unwrap_or("unknown"),
                pmix.unwrap_or("unknown")
            );
            assert!(line.contains(&shown), "{line}");
        }
    }

    /// The library under test is linked against the PRRTE it was built for: the guard admits it.
    #[test]
    fn the_running_libraries_are_the_ones_built_for() {
        let running = running();
        assert!(running.0.is_some() && running.1.is_some(), "{running:?}");
        if option_env!("PRRTE_K8S_RECORD_PRRTE_VERSION").is_none()
            && option_env!("PRRTE_K8S_RECORD_PMIX_VERSION").is_none()
        {
            assert_eq!(check(&built_for(), &running), Ok(()));
        }
    }

    /// The headers built against are the release the profiles name, and the guard chooses that
    /// release's profile; a release without a profile is refused, naming it.
    #[test]
    fn the_guard_chooses_the_profile_of_the_release_built_for() {
        if option_env!("PRRTE_K8S_RECORD_PRRTE_VERSION").is_some() {
            return;
        }
        let built = built_for();
        assert_eq!(built.prrte, prrte_k8s::profile::built::PRRTE);
        assert_eq!(built.pmix, BUILT.pmix);
        let running = (Some(built.prrte.clone()), Some(built.pmix.clone()));
        let chosen = choose(&built, &running).unwrap();
        assert_eq!(chosen, prrte_k8s::profile::COMPONENTS);
        assert_eq!(chosen.components.unwrap().prrte, built.prrte);
        let other = v("3.0.99", "5.0");
        let refusal = choose(&other, &(Some("3.0.99".into()), Some("5.0".into()))).unwrap_err();
        assert_eq!(refusal, Refusal::NoProfile("3.0.99".into()));
        let line = refusal.to_string();
        assert!(line.contains("built for PRRTE 3.0.99, which prrte-k8s has no profile for"));
        assert!(!line.contains('\n'), "{line}");
    }
}
