//! The version guard inside real PRRTE: a library built for another PRRTE version declines with
//! one line naming both versions, and PRRTE carries on with its other components.
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::*;

/// Where the library built with an overridden record goes: its own target directory next to
/// this test's (built once, then cached), so the normally built library is never touched.
fn guard_profile_dir() -> PathBuf {
    profile_dir().parent().unwrap().join("version-guard-test")
}

/// `cargo build -p prrte-k8s-cabi` recording another PRRTE version (a build-time override read
/// with `option_env!` by the cabi crate alone), in a clean environment.
fn build_cabi_recording(prrte_version: &str) -> PathBuf {
    let target = guard_profile_dir();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(repo())
        .args(["build", "-q", "-j2", "-p", "prrte-k8s-cabi", "--lib"])
        .env_clear();
    for keep in [
        "PATH",
        "HOME",
        "RUSTUP_HOME",
        "CARGO_HOME",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    cmd.env("CARGO_TARGET_DIR", &target)
        .env("PRRTE_K8S_PREFIX", prefix())
        .env("PRRTE_K8S_RECORD_PRRTE_VERSION", prrte_version);
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build -p prrte-k8s-cabi: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug/libprrte_k8s_cabi.so")
}

fn run(program: &str, args: &[&str], components: &Path) -> (bool, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(prefix().join("bin").join(program))
        .args(args)
        .env("PRTE_PKGLIBDIR", components)
        .env("TMPDIR", tmp.path())
        .env("HOME", home.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_library_built_for_another_prrte_declines_with_one_line_and_prrte_carries_on() {
    let built_for_other = tempfile::tempdir().unwrap();
    let lib = build_cabi_recording("3.0.7");
    std::fs::copy(&lib, built_for_other.path().join("prte_mca_ras_k8s.so")).unwrap();
    std::os::unix::fs::symlink(
        "prte_mca_ras_k8s.so",
        built_for_other.path().join("prte_mca_plm_k8s.so"),
    )
    .unwrap();
    let running = {
        let (ok, out, err) = run("prte", &["--version"], built_for_other.path());
        assert!(ok, "{out}{err}");
        // "prte (PRRTE) 3.0.8"
        let text = format!("{out}{err}");
        text.split_whitespace()
            .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
            .expect("a version")
            .to_string()
    };
    assert_ne!(
        running, "3.0.7",
        "the test needs a PRRTE other than the recorded 3.0.7"
    );
    let expected = format!("the k8s components (ras, plm) were built for PRRTE 3.0.7 with PMIx 5.0 but this is PRRTE {running} with PMIx 5.0;");

    // prte_info: both components are gone, the others listed, and exactly one line says why.
    let (ok, out, err) = run("prte_info", &[], built_for_other.path());
    assert!(ok, "prte_info must not fail: {out}{err}");
    let lines: Vec<&str> = err
        .lines()
        .chain(out.lines())
        .filter(|l| l.contains("built for PRRTE"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one line, however many components decline: {out}{err}"
    );
    assert!(
        lines[0].starts_with("prrte-k8s: ") && lines[0].contains(&expected),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("rebuild prrte-k8s against this PRRTE"),
        "names the remedy: {}",
        lines[0]
    );
    assert!(
        !out.contains("MCA ras: k8s") && !out.contains("MCA plm: k8s"),
        "{out}"
    );
    assert!(
        out.contains("MCA ras: simulator") && out.contains("MCA plm: ssh"),
        "other components listed: {out}"
    );

    // A real job: PRRTE runs it with its own components (no crash, the same one line).
    let (ok, out, err) = run(
        "prterun",
        &["--allow-run-as-root", "-n", "2", "hostname"],
        built_for_other.path(),
    );
    assert!(
        ok,
        "prterun must run the job with its other components: {out}{err}"
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        out.lines().filter(|l| *l == host.trim()).count(),
        2,
        "{out}{err}"
    );
    assert_eq!(err.matches("built for PRRTE 3.0.7").count(), 1, "{err}");

    // Asked for by name, the declined component is simply not there: PRRTE says so, no crash.
    let (ok, out, err) = run(
        "prterun",
        &[
            "--allow-run-as-root",
            "--prtemca",
            "ras",
            "k8s",
            "-n",
            "1",
            "true",
        ],
        built_for_other.path(),
    );
    // (prterun 3.0.8 reports this with exit status 0, so only the messages are checked)
    let _ = ok;
    assert!(err.contains("built for PRRTE 3.0.7"), "{err}");
    assert!(
        err.contains("A requested component was not found") && err.contains("Component: k8s"),
        "PRRTE says ras k8s is not there: {out}{err}"
    );
    assert!(
        !err.contains("Segmentation") && !err.contains("signal"),
        "{err}"
    );

    // The normally built library is admitted by the same PRRTE.
    let normal = tempfile::tempdir().unwrap();
    std::fs::copy(
        profile_dir().join("libprrte_k8s_cabi.so"),
        normal.path().join("prte_mca_ras_k8s.so"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        "prte_mca_ras_k8s.so",
        normal.path().join("prte_mca_plm_k8s.so"),
    )
    .unwrap();
    let (ok, out, err) = run("prte_info", &[], normal.path());
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("MCA ras: k8s") && out.contains("MCA plm: k8s"),
        "{out}{err}"
    );
    assert!(!err.contains("built for PRRTE"), "{err}");
}
