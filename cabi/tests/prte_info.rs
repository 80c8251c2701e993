//! The installed components as PRRTE's own tools see them.
use std::path::Path;
use std::process::Command;

mod common;
use common::*;

/// Install with the project's install script into a fresh directory.
fn install(dest: &Path) {
    let profile = profile_dir();
    let name = profile.file_name().unwrap().to_string_lossy().into_owned();
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("prrte-config/install-components.sh"))
        .args(["--no-build", "--dest"])
        .arg(dest);
    if name == "debug" {
        cmd.arg("--debug");
    }
    cmd.env("CARGO_TARGET_DIR", profile.parent().unwrap());
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "install-components.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dest.join("prte_mca_ras_k8s.so").is_file());
    assert!(dest.join("prte_mca_plm_k8s.so").exists());
}

fn prte_info(dir: &Path, args: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(prefix().join("bin/prte_info"))
        .args(args)
        .env("PRTE_PKGLIBDIR", dir)
        .env("TMPDIR", tmp.path())
        .output()
        .expect("run prte_info (is PRRTE built? prrte-config/setup.sh)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "prte_info {args:?}: {text}");
    text
}

#[test]
fn prte_info_lists_both_components_and_their_parameters() {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path());
    let all = prte_info(dir.path(), &[]);
    assert!(
        all.contains("MCA ras: k8s (MCA v2.1.0, API v2.0.0, Component v0.1.0)"),
        "{all}"
    );
    assert!(
        all.contains("MCA plm: k8s (MCA v2.1.0, API v2.0.0, Component v0.1.0)"),
        "{all}"
    );
    assert!(
        !all.contains("unable to open"),
        "a component failed to load: {all}"
    );

    let ras = prte_info(dir.path(), &["--param", "ras:k8s"]);
    for p in [
        "ras_k8s_namespace",
        "ras_k8s_selector",
        "ras_k8s_expected_pods",
        "ras_k8s_timeout",
        "ras_k8s_slots",
        "ras_k8s_kubeconfig",
        "ras_k8s_bind_none",
    ] {
        assert!(ras.contains(&format!("\"{p}\"")), "{p} missing: {ras}");
    }
    assert!(
        ras.contains("Seconds to wait for the expected pods"),
        "help text: {ras}"
    );
    let plm = prte_info(dir.path(), &["--param", "plm:k8s"]);
    for p in [
        "plm_k8s_secret_file",
        "plm_k8s_agent_port",
        "plm_k8s_launch_timeout",
        "plm_k8s_connect_timeout",
        "plm_k8s_insecure",
    ] {
        assert!(plm.contains(&format!("\"{p}\"")), "{p} missing: {plm}");
    }
}

/// Without a Kubernetes environment the components decline unless asked for, so PRRTE works as
/// before; asked for explicitly, the RAS is selected and fails with a clear message, not a crash.
#[test]
fn selection_declines_outside_kubernetes_and_explains_when_forced() {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path());
    let home = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let tmp = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(prefix().join("bin/prterun"));
        cmd.arg("--allow-run-as-root")
            .args(["--prtemca", "ras_base_verbose", "10"])
            .args(extra)
            .args(["-n", "1", "true"]);
        cmd.env("PRTE_PKGLIBDIR", dir.path())
            .env("TMPDIR", tmp.path())
            .env("HOME", home.path());
        cmd.env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBECONFIG");
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, text) = run(&[]);
    assert!(
        ok,
        "PRRTE without a Kubernetes environment must work as before: {text}"
    );
    assert!(text.contains("Querying component [k8s]"), "{text}");
    assert!(!text.contains("Selected component [k8s]"), "{text}");

    let (ok, text) = run(&["--prtemca", "ras", "k8s"]);
    assert!(!ok, "forced ras k8s without a cluster must fail: {text}");
    assert!(text.contains("Selected component [k8s]"), "{text}");
    assert!(
        text.contains("The k8s RAS component could not build an allocation"),
        "{text}"
    );
    assert!(
        text.contains("KUBERNETES_SERVICE_HOST") && text.contains("kubeconfig"),
        "names cause and remedy: {text}"
    );
}

/// An unknown MCA value is refused with the valid choices.
#[test]
fn unknown_slots_policy_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path());
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    let out = Command::new(prefix().join("bin/prterun"))
        .args([
            "--allow-run-as-root",
            "--prtemca",
            "ras",
            "k8s",
            "--prtemca",
            "ras_k8s_slots",
            "bogus",
            "-n",
            "1",
            "true",
        ])
        .env("PRTE_PKGLIBDIR", dir.path())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("ras_k8s_slots") && text.contains("bogus"),
        "{text}"
    );
    assert!(
        text.contains("auto") && text.contains("gpu") && text.contains("cpu"),
        "lists the valid values: {text}"
    );
}
