//! Paths the component tests share.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

/// The PRRTE installation the library was built against (as cabi's build script finds it).
pub fn prefix() -> PathBuf {
    PathBuf::from(
        std::env::var("PRRTE_K8S_PREFIX")
            .unwrap_or_else(|_| "/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3".into()),
    )
}

/// The profile directory the test runs from (`<target>/<profile>`, holding the cdylib): the
/// test executable is `<target>/<profile>/deps/<name>`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The repository's top directory.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}
