// The PRRTE build the k8s components are compiled against, the one place its version is written:
// `cabi/build.rs` includes this file for its default prefix, the 3.0 profile names it as its
// components' release, and `prrte-config/build-prrte.sh` installs it (its own variables must
// agree). Only `const` items and comments here: it is compiled in two crates.

/// PRRTE's release (the version guard requires exactly this one).
pub const PRRTE: &str = "3.0.8";
/// The PMIx release it is built with (the guard requires its major.minor).
pub(crate) const PMIX: &str = "5.0.5";
/// Our patch level on top of it (`prrte-config/patches`).
pub(crate) const PATCH_LEVEL: &str = "k8s3";
/// Where `prrte-config/build-prrte.sh` installs it: `/opt/prrte-k8s/prrte-<PRRTE>-pmix-<PMIX>-<PATCH_LEVEL>`.
pub(crate) const PREFIX_ROOT: &str = "/opt/prrte-k8s";

/// The default install prefix of this build.
pub fn default_prefix() -> String {
    format!("{PREFIX_ROOT}/prrte-{PRRTE}-pmix-{PMIX}-{PATCH_LEVEL}")
}
