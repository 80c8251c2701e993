//! How the job's pods are made: [`JobSpec`] and the agent pod it renders.
use super::setup::SERVICE_ACCOUNT;
use crate::harness::{self};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// How the job's pods are made.
pub struct JobSpec<'a> {
    pub name: &'a str,
    pub pods: usize,
    /// CPU request of each pod, by index (default "1").
    pub cpus: Vec<&'a str>,
    /// prted executable each agent runs, by index (default the real prted).
    pub prted: Vec<Option<PathBuf>>,
    /// A secret file for the agents different from the launcher's, by index.
    pub agent_secret: Vec<Option<PathBuf>>,
    /// Extra arguments for the agent, by index (appended to its command line).
    pub agent_args: Vec<Vec<String>>,
    /// Extra environment of every pod (name, value); in values, `@COMPONENTS@` stands for the
    /// component directory and `@SECRET@` for the job's secret file (`$(VAR)` references to
    /// earlier variables such as TMPDIR are expanded as by the kubelet).
    pub env: Vec<(String, String)>,
    /// Argv put in front of every pod's agent command line (a wrapper that starts more in the
    /// pod and then execs the agent); `@COMPONENTS@`/`@SECRET@` are substituted as in `env`.
    pub entrypoint_prefix: Vec<String>,
    /// emptyDir volumes of every pod, by mount path.
    pub empty_dirs: Vec<String>,
    /// Pods the sandbox node runs at once (default 110, a kubelet's).
    pub max_pods: usize,
}

impl<'a> JobSpec<'a> {
    /// A job whose pods have what a persistent DVM's pod spec would set: the DVM URI file in
    /// each pod's TMPDIR, the PRRTE prefix, the components and the job's secret file.
    pub fn persistent_dvm(name: &'a str, pods: usize) -> Self {
        let mut spec = JobSpec::new(name, pods);
        spec.env = vec![
            (
                "PRRTE_K8S_DVM_URI_FILE".into(),
                "$(TMPDIR)/dvm/dvm.uri".into(),
            ),
            (
                "PRRTE_K8S_PREFIX".into(),
                harness::prefix().display().to_string(),
            ),
            ("PRTE_PKGLIBDIR".into(), "@COMPONENTS@".into()),
            ("PRRTE_K8S_SECRET_FILE".into(), "@SECRET@".into()),
        ];
        spec
    }

    pub fn new(name: &'a str, pods: usize) -> Self {
        JobSpec {
            name,
            pods,
            cpus: vec![],
            prted: vec![],
            agent_secret: vec![],
            agent_args: vec![],
            env: vec![],
            entrypoint_prefix: vec![],
            empty_dirs: vec![],
            max_pods: crate::cluster::kubelet::MAX_PODS,
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn agent_pod(
    job: &str,
    i: usize,
    spec: &JobSpec,
    agent: &Path,
    prted: &Path,
    secret: &Path,
    tmp: &Path,
    subst: &[(&str, &Path)],
) -> Value {
    let cpu = spec.cpus.get(i).copied().unwrap_or("1");
    let host = format!("{job}-{i}");
    let podtmp = tmp.join(&host);
    std::fs::create_dir_all(&podtmp).unwrap();
    let command = agent_command(i, spec, agent, prted, secret, &podtmp, subst);
    let env = agent_env(spec, &podtmp, subst);
    let (volumes, mounts) = scratch_volumes(spec);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{job}-{i}-x{i:03}"),
            "labels": {
                "batch.kubernetes.io/job-name": job, "job-name": job,
                "batch.kubernetes.io/job-completion-index": i.to_string(),
                "app": job,
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": i.to_string()},
        },
        "spec": {
            "hostname": host, "subdomain": job,
            "serviceAccountName": SERVICE_ACCOUNT,
            "automountServiceAccountToken": true,
            "restartPolicy": "Never",
            "containers": [{
                "name": "worker",
                "command": command,
                "env": env,
                "resources": {"requests": {"cpu": cpu}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 7118}, "periodSeconds": 1},
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        }
    })
}

/// `v` with each placeholder of `subst` replaced by its path.
fn substituted(v: &str, subst: &[(&str, &Path)]) -> String {
    subst.iter().fold(v.to_string(), |v, (from, to)| {
        v.replace(from, to.to_str().unwrap())
    })
}

/// Pod `i`'s command: the spec's entrypoint prefix, then the agent with its prted, secret,
/// TMPDIR and the spec's extra arguments.
fn agent_command(
    i: usize,
    spec: &JobSpec,
    agent: &Path,
    prted: &Path,
    secret: &Path,
    podtmp: &Path,
    subst: &[(&str, &Path)],
) -> Vec<String> {
    let mut command: Vec<String> = spec
        .entrypoint_prefix
        .iter()
        .map(|a| substituted(a, subst))
        .collect();
    command.extend(
        [
            agent,
            Path::new("--prted"),
            prted,
            Path::new("--secret-file"),
            secret,
            Path::new("--tmpdir"),
            podtmp,
        ]
        .iter()
        .map(|p| p.to_str().unwrap().to_string()),
    );
    command.extend(["--kill-grace".to_string(), "2".into()]);
    command.extend(spec.agent_args.get(i).cloned().unwrap_or_default());
    command
}

/// A pod's environment: its IP and name, its own TMPDIR and DVM URI file, the spec's
/// variables.
fn agent_env(spec: &JobSpec, podtmp: &Path, subst: &[(&str, &Path)]) -> Vec<Value> {
    let mut env = vec![
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "TMPDIR", "value": podtmp.to_str().unwrap()}),
        // pods share the host's file system here: keep each pod's DVM URI file its own
        json!({"name": "PRRTE_K8S_DVM_URI_FILE", "value": podtmp.join("dvm.uri").to_str().unwrap()}),
    ];
    env.extend(
        spec.env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": substituted(v, subst)})),
    );
    env
}

/// The spec's emptyDir volumes and their mounts.
fn scratch_volumes(spec: &JobSpec) -> (Vec<Value>, Vec<Value>) {
    let volumes: Vec<Value> = (0..spec.empty_dirs.len())
        .map(|n| json!({"name": format!("scratch-{n}"), "emptyDir": {}}))
        .collect();
    let mounts: Vec<Value> = spec
        .empty_dirs
        .iter()
        .enumerate()
        .map(|(n, p)| json!({"name": format!("scratch-{n}"), "mountPath": p}))
        .collect();
    (volumes, mounts)
}
