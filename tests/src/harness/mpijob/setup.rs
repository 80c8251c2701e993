//! The namespace, PRRTE's options for the k8s components and the launcher's RBAC.
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub const NS: &str = "default";

/// The options that make `prte` / `prterun` allocate through `ras k8s` and start its daemons
/// through `plm k8s` (tests run PRRTE as root inside the pods).
pub const K8S: [&str; 7] = [
    "--allow-run-as-root",
    "--prtemca",
    "ras",
    "k8s",
    "--prtemca",
    "plm",
    "k8s",
];

/// [`K8S`] followed by `more`.
pub fn k8s_args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    K8S.iter().chain(more).copied().collect()
}
/// The ServiceAccount and RoleBinding of prrte-config/k8s/rbac.yaml (`prrte-k8s manifest
/// --name mpi-demo --only rbac`).
pub const SERVICE_ACCOUNT: &str = "mpi-demo-prrte";
pub const ROLEBINDING: &str = "mpi-demo-prrte";

/// prrte-config/k8s/rbac.yaml for the job `job`: its Role reads the owner Job by name
/// (`resourceNames`), the file's own job's; here the rule names `job` instead.
pub fn rbac_yaml(job: &str) -> Result<String> {
    let path = repo().join("prrte-config/k8s/rbac.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let owner = "  resourceNames:\n  - mpi-demo\n  resources:\n  - jobs\n";
    if text.matches(owner).count() != 1 {
        bail!(
            "{}: no owner rule `{owner}` to point at the job {job}",
            path.display()
        );
    }
    Ok(text.replace(
        owner,
        &format!("  resourceNames:\n  - {job}\n  resources:\n  - jobs\n"),
    ))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}
