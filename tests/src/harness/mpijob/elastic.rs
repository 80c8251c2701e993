//! A job the sandbox's Job controller grows.
use super::job::{Base, Job};
use super::pod::{agent_pod, JobSpec};
use super::setup::SERVICE_ACCOUNT;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;

/// An elastic job: an Indexed Job object (the sandbox's Job controller makes its pods, also
/// the ones a growth adds) whose pod template is [`JobSpec`]'s pod of index 0 with the
/// per-pod parts (TMPDIR, the DVM URI file, `--tmpdir`) taken from the pod's completion index,
/// annotated with `prrte-k8s.io/max-pods` as `prrte-k8s manifest --elastic` renders it, and a
/// Role that may patch it. `spec.cpus[0]` and `spec.agent_args[0]` hold for every pod.
pub struct ElasticJob;

/// The env var of the template holding the pod's completion index.
const INDEX_ENV: &str = "PRRTE_K8S_TEST_INDEX";

impl ElasticJob {
    pub async fn start(spec: JobSpec<'_>, max_pods: usize) -> Result<Job> {
        let Base {
            dir,
            components,
            secret,
            agent,
            prted,
            cluster,
        } = Base::start(spec.name, spec.max_pods.max(max_pods)).await?;
        cluster.apply_yaml(&grow_rbac_yaml(spec.name))?;
        let tmp = dir.sub("podtmp")?;
        for i in 0..max_pods {
            std::fs::create_dir_all(tmp.join(format!("{}-{i}", spec.name)))?;
        }
        let subst = [
            ("@COMPONENTS@", components.as_path()),
            ("@SECRET@", secret.as_path()),
        ];
        let pod = agent_pod(spec.name, 0, &spec, &agent, &prted, &secret, &tmp, &subst);
        let job = elastic_job(spec.name, spec.pods, max_pods, pod, &tmp)?;
        cluster.apply_yaml(&serde_yaml::to_string(&job)?)?;
        let mut job = Job {
            name: spec.name.to_string(),
            dir,
            cluster,
            components,
            secret,
            pods: Vec::new(),
            hostnames: Vec::new(),
        };
        job.refresh(spec.pods).await?;
        Ok(job)
    }
}

/// A Role and RoleBinding letting the job's service account patch its Job (what `manifest
/// --elastic` adds to the Role).
fn grow_rbac_yaml(job: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {job}-grow\nrules:\n- apiGroups: [batch]\n  resources: [jobs]\n  resourceNames: [{job}]\n  verbs: [get, patch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {job}-grow\nsubjects:\n- kind: ServiceAccount\n  name: {SERVICE_ACCOUNT}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {job}-grow\n"
    )
}

/// The Indexed Job whose template is `pod` (index 0's) made index-independent.
fn elastic_job(name: &str, pods: usize, max: usize, pod: Value, tmp: &Path) -> Result<Value> {
    let own = format!("{}/{name}-0", tmp.display());
    let each = format!("{}/{name}-$({INDEX_ENV})", tmp.display());
    let mut spec = pod["spec"].clone();
    if let Some(m) = spec.as_object_mut() {
        m.remove("hostname");
    }
    let text = serde_json::to_string(&spec)?.replace(&own, &each);
    let mut spec: Value = serde_json::from_str(&text)?;
    let env = spec["containers"][0]["env"]
        .as_array_mut()
        .context("the pod's env")?;
    env.insert(
        0,
        json!({"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}),
    );
    Ok(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {"prrte-k8s.io/max-pods": max.to_string()}},
        "spec": {
            "completionMode": "Indexed", "completions": pods, "parallelism": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        }
    }))
}
