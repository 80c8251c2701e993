//! What Trainer v2.3.0's controller makes for a TrainJob on an MPI runtime, rendered the way
//! its code renders it (`pkg/runtime/core/trainingruntime.go` builds the pod sets,
//! `plugins/mpi` enforces the MPI policy, `plugins/jobset` syncs the counts and builds the
//! JobSet, `core/snapshot.go` keeps the runtime):
//!
//! - each replicated job's pod count: its `parallelism` (1 if unset), the `trainer`-ancestor
//!   job's `mlPolicy.numNodes` (1 if unset); `trainer.resourcesPerNode` merged into the `node`
//!   container of that job (and of the `node` job with `runLauncherAsNode`), keeping only
//!   `limits` and `requests` as Trainer does;
//! - MPI: the `node` job's count is `trainer.numNodes` (less one, at least one, with
//!   `runLauncherAsNode`); slots are `trainer.numProcPerNode`, else the runtime's; the launcher
//!   and node pods get the ssh-auth Secret volume (`mpi-ssh-auth`, mode 0400, items `id_rsa`
//!   0640, `id_rsa.pub` and `authorized_keys` 0644) mounted at `sshAuthMountPath` in their
//!   `node` container; the launcher gets the hostfile volume at `/etc/mpi` and Open MPI's four
//!   `OMPI_MCA_*` variables (another `mpiImplementation` is refused, as Trainer refuses it);
//! - every job's `parallelism` and `completions` are its count; the `trainer`-ancestor job
//!   gets one replica and `trainer.image`/`command`/`args`; `trainer.env` goes to its `node`
//!   container (and the `node` job's with `runLauncherAsNode`); `spec.suspend` mirrored; the
//!   template's labels and annotations on the JobSet;
//! - the hostfile: a line `<job>-<rjob>-<replica>-<pod>.<subdomain> slots=<n>` per pod of the
//!   `node` job (and the launcher's with `runLauncherAsNode`), the subdomain the template's
//!   `network.subdomain` or the job's name.
//!
//! One field is added: the node pods' (and the launcher's with `runLauncherAsNode`) annotation
//! `prrte-k8s.io/slots`, the slots, unless the runtime's template sets it (`ras k8s` reads a pod's
//! slots there; Trainer writes them only into the hostfile and an ORTE variable).
//!
//! Not rendered: `runtimePatches` (refused), the GPU rule that makes a runtime's
//! `numProcPerNode: 1` the GPU count, initializer jobs, pod-group policies. Every object is
//! owned by the TrainJob (`controller: true`).

use base64::Engine;
use serde_json::{json, Map, Value};

use super::ssh::SshKeyPair;
use super::types::{Runtime, RuntimeError, TrainJob, API_VERSION};
use crate::discovery::keys::SLOTS_ANNOTATION;

/// The label of a replicated job that names the step it is (`trainer`, the initializers').
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The main container of every pod, and the MPI job of the ranks' pods.
pub const NODE: &str = "node";
/// The replicated job of `mpirun`'s pod.
pub const LAUNCHER: &str = "launcher";
/// The suffix of the ssh-auth Secret's name.
pub const SSH_AUTH_SUFFIX: &str = "-mpi-ssh-auth";
/// The suffix of the hostfile ConfigMap's name.
pub const HOSTFILE_SUFFIX: &str = "-mpi-hostfile";
/// The suffix of the runtime snapshot ConfigMap's name.
pub const SNAPSHOT_SUFFIX: &str = "-runtime-snapshot";
/// The snapshot ConfigMap's key.
pub const SNAPSHOT_KEY: &str = "runtime";
/// Where the launcher reads the hostfile.
const HOSTFILE_DIR: &str = "/etc/mpi";

/// The objects of one TrainJob.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The JobSet, named after the TrainJob.
    pub jobset: Value,
    /// `<job>-mpi-ssh-auth`, when a key pair was given and the runtime is MPI.
    pub ssh_auth: Option<Value>,
    /// `<job>-mpi-hostfile`, when the runtime is MPI.
    pub hostfile: Option<Value>,
    /// `<job>-runtime-snapshot`.
    pub snapshot: Value,
}

impl Rendered {
    /// Every object, in the order they are applied.
    pub fn objects(&self) -> Vec<&Value> {
        let mut v = vec![&self.snapshot, &self.jobset];
        v.extend(self.ssh_auth.iter());
        v.extend(self.hostfile.iter());
        v
    }
}

/// Why a TrainJob cannot be rendered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("MPI implementation {0} is not supported (Trainer's MPI plugin makes only OpenMPI's launcher environment)")]
    Implementation(String),
    #[error("spec.runtimePatches is not supported by prrte-k8s controller --trainjobs")]
    RuntimePatches,
    #[error("the TrainJob has no {0}")]
    Meta(&'static str),
    #[error("the runtime snapshot: {0}")]
    Snapshot(String),
}

/// The TrainJob's objects on `runtime`; `keys`, when the ssh-auth Secret is to be made (Trainer
/// makes it only when it does not exist: it is immutable).
pub fn render(
    job: &TrainJob,
    runtime: &Runtime,
    keys: Option<&SshKeyPair>,
) -> Result<Rendered, RenderError> {
    let name = job.metadata.name.clone().ok_or(RenderError::Meta("name"))?;
    let ns = job
        .metadata
        .namespace
        .clone()
        .ok_or(RenderError::Meta("namespace"))?;
    let uid = job.metadata.uid.clone().ok_or(RenderError::Meta("uid"))?;
    if !job.spec.runtime_patches.is_empty() {
        return Err(RenderError::RuntimePatches);
    }
    let owner = json!([{
        "apiVersion": API_VERSION, "kind": "TrainJob", "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true,
    }]);
    let template = runtime.template()?;
    let ml = runtime.ml_policy()?;
    let mpi = ml.as_ref().and_then(|m| m.mpi.clone());
    let as_node = mpi.as_ref().is_some_and(|m| m.launcher_as_node());
    let trainer = job.spec.trainer.clone().unwrap_or_default();
    let mut spec = template["spec"].clone();
    let subdomain = spec["network"]["subdomain"]
        .as_str()
        .unwrap_or(&name)
        .to_string();
    let mut none = Vec::new();
    // An array: `Runtime::template` checked it.
    let rjobs = spec["replicatedJobs"].as_array_mut().unwrap_or(&mut none);

    // The pod sets (`newRuntimeInfo`).
    let mut counts = Vec::with_capacity(rjobs.len());
    for rj in rjobs.iter_mut() {
        let rname = rjob_name(rj);
        let trainer_step = ancestor(rj) == Some("trainer") && ml.is_some();
        let mut count = rj["template"]["spec"]["parallelism"].as_i64().unwrap_or(1);
        if trainer_step {
            count = ml.as_ref().and_then(|m| m.num_nodes).unwrap_or(1).into();
        }
        if let Some(res) = &trainer.resources_per_node {
            if trainer_step || (as_node && rname == NODE) {
                if let Some(c) = node_containers(rj).into_iter().next() {
                    merge_resources(c, res);
                }
            }
        }
        counts.push(count);
    }

    // The MPI plugin's policy (`EnforceMLPolicy`).
    let mut slots = 1;
    if let Some(mpi) = &mpi {
        if let Some(n) = trainer.num_nodes {
            if let Some(i) = rjobs.iter().position(|rj| rjob_name(rj) == NODE) {
                counts[i] = if as_node { (n - 1).max(1) } else { n }.into();
            }
        }
        slots = trainer.num_proc_per_node.unwrap_or(mpi.procs());
        for rj in rjobs.iter_mut() {
            let rname = rjob_name(rj);
            if rname != NODE && rname != LAUNCHER {
                continue;
            }
            let launcher = rname == LAUNCHER;
            if !launcher || as_node {
                // The one field Trainer does not write: `ras k8s` reads a pod's slots from it
                // (Trainer hands them to the hostfile and `OMPI_MCA_orte_set_default_slots`,
                // which the batch launcher does not use). A runtime's own annotation is kept.
                let meta = &mut rj["template"]["spec"]["template"]["metadata"];
                if meta["annotations"][SLOTS_ANNOTATION].is_null() {
                    meta["annotations"][SLOTS_ANNOTATION] = json!(slots.to_string());
                }
            }
            let pod = &mut rj["template"]["spec"]["template"]["spec"];
            upsert(&mut pod["volumes"], ssh_volume(&name), "name");
            if launcher {
                upsert(&mut pod["volumes"], hostfile_volume(&name), "name");
            }
            for c in containers(pod) {
                let mount = json!({"name": "mpi-ssh-auth", "mountPath": mpi.mount_path()});
                upsert(&mut c["volumeMounts"], mount, "mountPath");
                if !launcher {
                    continue;
                }
                let mount = json!({"name": "mpi-hostfile", "mountPath": HOSTFILE_DIR});
                upsert(&mut c["volumeMounts"], mount, "mountPath");
                if mpi.implementation() != "OpenMPI" {
                    return Err(RenderError::Implementation(mpi.implementation().into()));
                }
                for (k, v) in launcher_env(slots) {
                    upsert(&mut c["env"], json!({"name": k, "value": v}), "name");
                }
            }
        }
    }

    // The hostfile (`IdentifyPodNetwork`, `buildHostFileConfigMap`), from the template's
    // replicas.
    let mut hostfile = String::new();
    for (rj, count) in rjobs.iter().zip(&counts) {
        let rname = rjob_name(rj);
        if !(rname == NODE || (as_node && rname == LAUNCHER)) {
            continue;
        }
        let replicas = rj["replicas"].as_i64().unwrap_or(1);
        for r in 0..replicas {
            for p in 0..*count {
                hostfile.push_str(&format!(
                    "{name}-{rname}-{r}-{p}.{subdomain} slots={slots}\n"
                ));
            }
        }
    }

    // The counts (`SyncParallelCount`) and the trainer's fields (`Builder.Trainer`).
    for (rj, count) in rjobs.iter_mut().zip(&counts) {
        rj["template"]["spec"]["parallelism"] = json!(count);
        rj["template"]["spec"]["completions"] = json!(count);
        let trainer_step = ancestor(rj) == Some("trainer");
        if trainer_step {
            rj["replicas"] = json!(1);
            for c in node_containers(rj) {
                if let Some(image) = &trainer.image {
                    c["image"] = json!(image);
                }
                if let Some(command) = &trainer.command {
                    c["command"] = json!(command);
                }
                if let Some(args) = &trainer.args {
                    c["args"] = json!(args);
                }
            }
        }
        if trainer_step || (as_node && rjob_name(rj) == NODE) {
            for c in node_containers(rj) {
                for e in &trainer.env {
                    let e = serde_json::to_value(e).unwrap_or(Value::Null);
                    upsert(&mut c["env"], e, "name");
                }
            }
        }
    }
    if let Some(s) = job.spec.suspend {
        spec["suspend"] = json!(s);
    }

    let mut meta = json!({"name": name, "namespace": ns});
    for key in ["labels", "annotations"] {
        if let Some(m) = template["metadata"][key]
            .as_object()
            .filter(|m| !m.is_empty())
        {
            meta[key] = Value::Object(m.clone());
        }
    }
    meta["ownerReferences"] = owner.clone();
    let jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": meta, "spec": spec,
    });
    let object_meta = |suffix: &str| json!({"name": format!("{name}{suffix}"), "namespace": ns, "ownerReferences": owner});
    let hostfile = mpi.as_ref().map(|_| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(HOSTFILE_SUFFIX),
            "data": {"hostfile": hostfile},
        })
    });
    let ssh_auth = match (&mpi, keys) {
        (Some(_), Some(k)) => Some(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": object_meta(SSH_AUTH_SUFFIX),
            "type": "kubernetes.io/ssh-auth", "immutable": true,
            "data": {"ssh-privatekey": b64(&k.private_pem), "ssh-publickey": b64(&k.public_openssh)},
        })),
        _ => None,
    };
    let snapshot = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(SNAPSHOT_SUFFIX),
        "data": {SNAPSHOT_KEY: snapshot_yaml(runtime)?},
    });
    Ok(Rendered {
        jobset,
        ssh_auth,
        hostfile,
        snapshot,
    })
}

/// The runtime as the snapshot keeps it: the object without its server-written metadata.
fn snapshot_yaml(runtime: &Runtime) -> Result<String, RenderError> {
    let mut o = runtime.object.clone();
    if let Some(m) = o["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    serde_yaml::to_string(&o).map_err(|e| RenderError::Snapshot(e.to_string()))
}

/// The runtime a snapshot ConfigMap keeps.
pub fn from_snapshot(configmap: &Value) -> Result<Runtime, RenderError> {
    let text = configmap["data"][SNAPSHOT_KEY]
        .as_str()
        .ok_or_else(|| RenderError::Snapshot(format!("no data key {SNAPSHOT_KEY:?}")))?;
    serde_yaml::from_str(text)
        .map(Runtime::new)
        .map_err(|e| RenderError::Snapshot(e.to_string()))
}

/// A Secret's `data` value: Trainer writes the key pair as bytes (`WithData`), base64 in JSON.
fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Open MPI's launcher environment, as Trainer sets it (ORTE names: Open MPI 5 reads none).
fn launcher_env(slots: i32) -> [(&'static str, String); 4] {
    [
        (
            "OMPI_MCA_orte_default_hostfile",
            format!("{HOSTFILE_DIR}/hostfile"),
        ),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true".into()),
        ("OMPI_MCA_orte_set_default_slots", slots.to_string()),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10".into()),
    ]
}

fn ssh_volume(job: &str) -> Value {
    json!({"name": "mpi-ssh-auth", "secret": {
        "secretName": format!("{job}{SSH_AUTH_SUFFIX}"),
        "defaultMode": 0o400,
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
            {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
            {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
        ],
    }})
}

fn hostfile_volume(job: &str) -> Value {
    json!({"name": "mpi-hostfile", "configMap": {
        "name": format!("{job}{HOSTFILE_SUFFIX}"),
        "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
    }})
}

fn rjob_name(rj: &Value) -> String {
    rj["name"].as_str().unwrap_or_default().to_string()
}

fn ancestor(rj: &Value) -> Option<&str> {
    rj["template"]["metadata"]["labels"][ANCESTOR_LABEL].as_str()
}

/// The containers named `node` of a pod spec.
fn containers(pod: &mut Value) -> Vec<&mut Value> {
    match pod["containers"].as_array_mut() {
        Some(cs) => cs
            .iter_mut()
            .filter(|c| c["name"].as_str() == Some(NODE))
            .collect(),
        None => Vec::new(),
    }
}

/// The containers named `node` of a replicated job's pods.
fn node_containers(rj: &mut Value) -> Vec<&mut Value> {
    containers(&mut rj["template"]["spec"]["template"]["spec"])
}

/// Puts `item` in the list `list` (made if absent): in place of the entry with the same
/// `key`, else at the end (Trainer's `apply.Upsert*`).
fn upsert(list: &mut Value, item: Value, key: &str) {
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(items) = list.as_array_mut() {
        match items.iter_mut().find(|i| i[key] == item[key]) {
            Some(slot) => *slot = item,
            None => items.push(item),
        }
    }
}

/// `resourcesPerNode` over the container's resources: limits and requests merged key by key
/// (the TrainJob's win), nothing else kept.
fn merge_resources(container: &mut Value, over: &k8s_openapi::api::core::v1::ResourceRequirements) {
    let over = serde_json::to_value(over).unwrap_or(Value::Null);
    let base = container["resources"].take();
    let mut out = Map::new();
    for key in ["limits", "requests"] {
        let mut merged = base[key].as_object().cloned().unwrap_or_default();
        if let Some(o) = over[key].as_object() {
            merged.extend(o.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if base[key].is_object() || over[key].is_object() {
            out.insert(key.into(), Value::Object(merged));
        }
    }
    container["resources"] = Value::Object(out);
}

#[cfg(test)]
pub(crate) mod tests;
