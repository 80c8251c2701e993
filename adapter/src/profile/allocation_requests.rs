//! Whether a PRRTE installation can serve allocation requests: only a PRRTE with our patch
//! 0003 hands them to the RAS module (`modify`); any other 3.0.x (Debian's stock build, an
//! injected job's) answers every `PMIx_Allocation_request` `PMIX_ERR_NOT_SUPPORTED`. The patch
//! exports `prte_ras_base_modify_complete`, which no other PRRTE 3.0 has: its name in the
//! library's dynamic symbol table tells them apart without loading it.
use std::path::{Path, PathBuf};

/// The symbol patch 0003 adds (the same one the RAS component looks up in prte).
pub const SYMBOL: &str = "prte_ras_base_modify_complete";

/// What doctor and the agent say of an installation whose PRRTE lacks the patch.
pub const NOT_SERVED: &str = "PMIx allocation requests (PMIx_Allocation_request, palloc) are answered PMIX_ERR_NOT_SUPPORTED: this PRRTE lacks prrte-k8s's patch 0003 (ras modify); use the PRRTE prrte-config/build-prrte.sh builds (or the prrte-k8s image) to grow and shrink from the application";

/// PRRTE's library (`libprrte.so*`) in `dir`, if there.
pub fn library_in(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libprrte.so"))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Whether the PRRTE library `lib` has the patch's symbol. `None` if it cannot be read.
pub fn serves(lib: &Path) -> Option<bool> {
    let bytes = std::fs::read(lib).ok()?;
    let mut name = SYMBOL.as_bytes().to_vec();
    name.push(0);
    Some(bytes.windows(name.len()).any(|w| w == name.as_slice()))
}

/// [`serves`] for the PRRTE whose programs are in `bin` (its `../lib`) or whose components are
/// in `pkglibdir` (its parent, as Debian installs it).
pub fn serves_installation(bin: &Path, pkglibdir: Option<&Path>) -> Option<bool> {
    let dirs = [
        pkglibdir.and_then(Path::parent).map(Path::to_path_buf),
        bin.parent().map(|p| p.join("lib")),
    ];
    dirs.iter()
        .flatten()
        .find_map(|d| library_in(d))
        .and_then(|lib| serves(&lib))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_symbol_tells_the_builds_apart() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::write(
            lib.join("libprrte.so.3.0.0"),
            b"\x7fELF...prte_ras_base_add_hosts\0prte_ras_base_modify_complete\0...",
        )
        .unwrap();
        let bin = dir.path().join("bin");
        assert_eq!(serves_installation(&bin, None), Some(true));
        // Debian's stock build: no such symbol (a longer name is not it either).
        std::fs::write(
            lib.join("libprrte.so.3.0.0"),
            b"\x7fELF...prte_ras_base_modify_complete_x\0prte_ras_base_add_hosts\0",
        )
        .unwrap();
        assert_eq!(serves_installation(&bin, None), Some(false));
        // Found through the components' directory too; unknown without a library.
        let pkg = lib.join("prte");
        assert_eq!(
            serves_installation(Path::new("/nonexistent/bin"), Some(&pkg)),
            Some(false)
        );
        assert_eq!(
            serves_installation(Path::new("/nonexistent/bin"), None),
            None
        );
    }

    #[test]
    fn the_prefix_this_crate_was_built_for_serves_them() {
        // prrte-config/setup.sh builds it before any test runs.
        let prefix = std::path::PathBuf::from(crate::profile::built::default_prefix());
        assert_eq!(serves_installation(&prefix.join("bin"), None), Some(true));
    }
}
