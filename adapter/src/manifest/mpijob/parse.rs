//! The MPIJob document, read and checked: kubeflow.org/v2beta1's fields with mpi-operator's
//! defaults and its validation (`pkg/apis/kubeflow/v2beta1`: `default.go`,
//! `validation/validation.go`), and no field we do not know.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::{MpiJobError, Note};
use super::model::RunPolicy;
use super::reader::Obj;

pub(super) const API_VERSION: &str = "kubeflow.org/v2beta1";

/// `spec.runPolicy.managedBy` of the MPIJobs `prrte-k8s controller` reconciles (mpi-operator
/// skips every value but its own, `kubeflow.org/mpi-operator`).
pub(crate) const CONTROLLER_NAME: &str = "prrte-k8s.io/controller";

/// mpi-operator's own `managedBy`.
pub(super) const MPI_OPERATOR: &str = "kubeflow.org/mpi-operator";

/// One of `spec.mpiReplicaSpecs`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Replica {
    /// `Launcher` or `Worker`.
    pub role: &'static str,
    pub replicas: u32,
    pub restart_policy: Option<&'static str>,
    pub labels: Map<String, Value>,
    pub annotations: Map<String, Value>,
    /// The pod template's spec.
    pub spec: Map<String, Value>,
    /// `spec.mpiReplicaSpecs.<role>.template.spec`.
    pub path: String,
}

/// An MPIJob, checked, as the conversion reads it: the model's fields with mpi-operator's
/// defaults applied, and the pod templates as the document gives them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Parsed {
    pub name: String,
    pub namespace: Option<String>,
    pub labels: Map<String, Value>,
    pub annotations: Map<String, Value>,
    pub(crate) slots_per_worker: u32,
    pub(crate) run_launcher_as_worker: bool,
    /// The agent's `--mpi` for `mpiImplementation`.
    pub mpi: &'static str,
    /// `spec.runPolicy` (its fields checked).
    pub(crate) run_policy: RunPolicy,
    pub launcher: Replica,
    pub worker: Option<Replica>,
    /// `launcherCreationPolicy: WaitForWorkersReady`.
    pub(crate) wait_for_workers: bool,
}

/// The one document of `text` (YAML or JSON).
pub(super) fn document(text: &str) -> Result<Value, MpiJobError> {
    let mut docs = Vec::new();
    for d in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(d).map_err(MpiJobError::Yaml)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    match docs.len() {
        0 => Err(MpiJobError::Empty),
        1 => Ok(docs.pop().unwrap_or_default()),
        n => Err(MpiJobError::Documents(n)),
    }
}

/// The fields of `metadata` a server sets, or that only concern the MPIJob object itself: not
/// carried over.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// The annotation `kubectl apply` keeps its last input in (not carried over).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Checks the MPIJob document `doc` field by field (each refusal names the field's path), then
/// reads it into the model; `notes` gets what is dropped on the way.
pub(super) fn parse(doc: &Value, notes: &mut Vec<Note>) -> Result<Parsed, MpiJobError> {
    let top = Obj::new(doc, "")?;
    let kind = top.text("kind")?.unwrap_or("");
    if kind != "MPIJob" {
        return Err(MpiJobError::NotMpiJob(kind.to_string()));
    }
    let api = top.text("apiVersion")?.unwrap_or("");
    if api != API_VERSION {
        return Err(MpiJobError::ApiVersion(api.to_string()));
    }
    top.only(&["apiVersion", "kind", "metadata", "spec", "status"])?;
    let (name, namespace, labels, annotations) = metadata(&top, notes)?;
    let spec = top.obj("spec")?.ok_or_else(|| {
        MpiJobError::field(
            "spec",
            "is missing",
            "give the MPIJob's spec (mpiReplicaSpecs)",
        )
    })?;
    spec.only(&[
        "slotsPerWorker",
        "runLauncherAsWorker",
        "runPolicy",
        "mpiReplicaSpecs",
        "sshAuthMountPath",
        "launcherCreationPolicy",
        "mpiImplementation",
    ])?;
    let slots_per_worker = slots_per_worker(&spec)?;
    let mpi = mpi_implementation(&spec)?;
    spec.text("sshAuthMountPath")?;
    let wait_for_workers = spec.choice(
        "launcherCreationPolicy",
        &["AtStartup", "WaitForWorkersReady"],
    )? == Some("WaitForWorkersReady");
    if let Some(p) = spec.obj("runPolicy")? {
        check_run_policy(&p)?;
    }
    let (launcher, worker, run_launcher_as_worker) = replicas(&spec)?;
    let run_policy = match spec.get("runPolicy") {
        None => RunPolicy::default(),
        // Every field checked: the model takes it as it is.
        Some(p) => serde_json::from_value(p.clone()).map_err(|e| {
            MpiJobError::field(
                spec.at("runPolicy"),
                format!("does not fit kubeflow.org/v2beta1: {e}"),
                "give each field as mpi-operator's MPIJob types it",
            )
        })?,
    };
    Ok(Parsed {
        name,
        namespace,
        labels,
        annotations,
        slots_per_worker,
        run_launcher_as_worker,
        mpi,
        run_policy,
        launcher,
        worker,
        wait_for_workers,
    })
}

/// `spec.slotsPerWorker` (default 1; 0 is refused).
fn slots_per_worker(spec: &Obj) -> Result<u32, MpiJobError> {
    let slots = spec.int("slotsPerWorker", 0)?.unwrap_or(1);
    if slots == 0 {
        return Err(MpiJobError::field(
            spec.at("slotsPerWorker"),
            "0 gives no rank a place",
            "give each worker at least 1 slot",
        ));
    }
    let slots_per_worker = u32::try_from(slots).map_err(|_| {
        MpiJobError::field(
            spec.at("slotsPerWorker"),
            "is too large",
            "give a count of slots",
        )
    })?;
    Ok(slots_per_worker)
}

/// `spec.mpiImplementation` as the agent's `--mpi` value.
fn mpi_implementation(spec: &Obj) -> Result<&'static str, MpiJobError> {
    let mpi = match spec.choice("mpiImplementation", &["OpenMPI", "Intel", "MPICH"])? {
        None | Some("OpenMPI") => "openmpi",
        Some("Intel") => "intel",
        Some(_) => "mpich",
    };
    Ok(mpi)
}

/// The Launcher, the Worker (if any) and `spec.runLauncherAsWorker`: one launcher, and some pod
/// that runs the ranks.
fn replicas(spec: &Obj) -> Result<(Replica, Option<Replica>, bool), MpiJobError> {
    let replicas = spec.obj("mpiReplicaSpecs")?.ok_or_else(|| {
        MpiJobError::field(
            spec.at("mpiReplicaSpecs"),
            "is missing",
            "give the Launcher (and the Worker) replica specs",
        )
    })?;
    if let Some(k) = replicas
        .map
        .keys()
        .find(|k| *k != "Launcher" && *k != "Worker")
    {
        return Err(MpiJobError::field(
            replicas.at(k),
            "is not a replica type of an MPIJob",
            "an MPIJob has a Launcher and Workers only; rename or remove it",
        ));
    }
    let launcher = match replicas.obj("Launcher")? {
        Some(l) => replica(&l, "Launcher")?,
        None => {
            return Err(MpiJobError::field(
                replicas.at("Launcher"),
                "is missing: no pod runs the command",
                "add the Launcher replica spec whose container's command is the mpirun line",
            ))
        }
    };
    if launcher.replicas != 1 {
        return Err(MpiJobError::field(
            replicas.at("Launcher.replicas"),
            format!("is {}; an MPIJob has one launcher", launcher.replicas),
            "set it to 1",
        ));
    }
    let worker = replicas
        .obj("Worker")?
        .map(|w| replica(&w, "Worker"))
        .transpose()?;
    if let Some(w) = &worker {
        if w.replicas == 0 {
            return Err(MpiJobError::field(
                replicas.at("Worker.replicas"),
                "is 0",
                "give at least 1 worker, or remove the Worker spec and set spec.runLauncherAsWorker: true to run the ranks in the launcher's pod",
            ));
        }
    }
    let run_launcher_as_worker = spec.flag("runLauncherAsWorker")?.unwrap_or(false);
    if worker.is_none() && !run_launcher_as_worker {
        return Err(MpiJobError::field(
            replicas.at("Worker"),
            "is missing, and spec.runLauncherAsWorker is not true: no pod would run a rank",
            "add a Worker replica spec, or set spec.runLauncherAsWorker: true",
        ));
    }
    Ok((launcher, worker, run_launcher_as_worker))
}

type Metadata = (
    String,
    Option<String>,
    Map<String, Value>,
    Map<String, Value>,
);

/// `metadata`: name, namespace, labels and annotations.
fn metadata(top: &Obj, notes: &mut Vec<Note>) -> Result<Metadata, MpiJobError> {
    let meta = top
        .obj("metadata")?
        .ok_or_else(|| MpiJobError::field("metadata", "is missing", "give metadata.name"))?;
    let mut known = vec![
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
    ];
    known.extend(SERVER_METADATA);
    meta.only(&known)?;
    let name = match meta.text("name")? {
        Some(n) => n.to_string(),
        None => {
            let cause = if meta.get("generateName").is_some() {
                "is missing (generateName is not enough: the Role, the Secret and the NetworkPolicy are named after the job)"
            } else {
                "is missing"
            };
            return Err(MpiJobError::field(
                meta.at("name"),
                cause,
                "give the MPIJob a name, or name the job with --name",
            ));
        }
    };
    for dropped in ["ownerReferences", "finalizers"] {
        if meta.get(dropped).is_some() {
            notes.push(Note::new(
                meta.at(dropped),
                "dropped: they belong to the MPIJob object, not to the Job rendered from it",
            ));
        }
    }
    let namespace = meta.text("namespace")?.map(String::from);
    let labels = meta.strings("labels")?;
    let mut annotations = meta.strings("annotations")?;
    annotations.remove(LAST_APPLIED);
    Ok((name, namespace, labels, annotations))
}

/// Checks `spec.runPolicy`.
fn check_run_policy(p: &Obj) -> Result<(), MpiJobError> {
    p.only(&[
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "schedulingPolicy",
        "suspend",
        "managedBy",
    ])?;
    if p.int("activeDeadlineSeconds", 0)? == Some(0) {
        return Err(MpiJobError::field(
            p.at("activeDeadlineSeconds"),
            "is 0: the Job would fail at once",
            "give a positive number of seconds, or leave it out",
        ));
    }
    if let Some(s) = p.obj("schedulingPolicy")? {
        s.only(&[
            "minAvailable",
            "queue",
            "minResources",
            "priorityClass",
            "scheduleTimeoutSeconds",
        ])?;
        s.int("minAvailable", 0)?;
        s.text("queue")?;
        s.text("priorityClass")?;
        s.int("scheduleTimeoutSeconds", 0)?;
    }
    p.choice("cleanPodPolicy", &["None", "Running", "All"])?;
    p.int("ttlSecondsAfterFinished", 0)?;
    p.int("backoffLimit", 0)?;
    p.flag("suspend")?;
    p.choice(
        "managedBy",
        &[MPI_OPERATOR, "kueue.x-k8s.io/multikueue", CONTROLLER_NAME],
    )?;
    Ok(())
}

/// One replica spec.
fn replica(r: &Obj, role: &'static str) -> Result<Replica, MpiJobError> {
    r.only(&["replicas", "template", "restartPolicy"])?;
    let replicas = match r.int("replicas", 0)? {
        Some(n) => u32::try_from(n).map_err(|_| {
            MpiJobError::field(r.at("replicas"), "is too large", "give a number of pods")
        })?,
        // mpi-operator's defaults: one launcher, no worker (which its validation refuses).
        None if role == "Launcher" => 1,
        None => {
            return Err(MpiJobError::field(
                r.at("replicas"),
                "is missing",
                "give the number of worker pods",
            ))
        }
    };
    let restart_policy = r.choice("restartPolicy", &["Never", "OnFailure"])?;
    let template = r.obj("template")?.ok_or_else(|| {
        MpiJobError::field(r.at("template"), "is missing", "give the pod template")
    })?;
    template.only(&["metadata", "spec"])?;
    let (labels, annotations) = match template.obj("metadata")? {
        Some(m) => (m.strings("labels")?, m.strings("annotations")?),
        None => (Map::new(), Map::new()),
    };
    let spec = template.obj("spec")?.ok_or_else(|| {
        MpiJobError::field(template.at("spec"), "is missing", "give the pod spec")
    })?;
    if spec.list("containers")?.is_empty() {
        return Err(MpiJobError::field(
            spec.at("containers"),
            "is empty",
            "give the container that runs the MPI program",
        ));
    }
    Ok(Replica {
        role,
        replicas,
        restart_policy,
        labels,
        annotations,
        spec: spec.map.clone(),
        path: spec.path.clone(),
    })
}
