//! An MPIJob as the job to render ([`from_mpijob`]): one Indexed Job whose pod 0 is the
//! launcher and pods 1..N the workers, its `runPolicy` mapped onto the Job, and every field it
//! cannot honour named in a note.

use serde_json::{json, Map, Value};

use super::error::{MpiJobError, Note};
use super::model::MpiJob;
use super::parse::{document, parse, Parsed, API_VERSION, CONTROLLER_NAME, MPI_OPERATOR};
use super::pods::pods;
use crate::manifest::options::{preempt_env, valid_name, DEFAULT_GRACE};
use crate::manifest::plan::{JobPlan, Launch, Part, PodPlan};
use crate::manifest::pod::pod_template;
use crate::manifest::restricted::violations;
use crate::settings::mca;
use crate::workload::{Success, WorkloadKind};

/// Kueue's label naming the LocalQueue a Job is submitted to.
pub(crate) const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// What the command line adds to a converted MPIJob.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    /// `--name` instead of `metadata.name`.
    pub name: Option<String>,
    /// `-n` instead of `metadata.namespace`.
    pub namespace: Option<String>,
    /// `--inject-image`.
    pub(crate) inject_image: String,
    /// `--image-pull-policy` for every container.
    pub(crate) pull_policy: Option<String>,
    /// `--env` of every pod (last, so they win).
    pub env: Vec<(String, String)>,
    /// `--only`.
    pub only: Vec<Part>,
    /// `--api-server-cidr`, `--api-server-port`.
    pub api_server: crate::manifest::api_server::ApiServer,
    /// `--grace-period` instead of the pod template's `terminationGracePeriodSeconds`.
    pub grace_period: Option<u64>,
    /// `--preempt-signal`.
    pub preempt_signal: Option<String>,
}

/// The job an MPIJob (YAML or JSON `text`) describes, and the notes on what it changed or
/// cannot honour.
pub(crate) fn from_mpijob(text: &str, o: &Overrides) -> Result<(JobPlan, Vec<Note>), MpiJobError> {
    convert(&document(text)?, o)
}

/// The job of the MPIJob `job` as the API server returned it (the controller's), as
/// [`from_mpijob`] converts its document.
pub(crate) fn from_model(job: &MpiJob, o: &Overrides) -> Result<(JobPlan, Vec<Note>), MpiJobError> {
    let doc = serde_json::to_value(job).map_err(MpiJobError::Render)?;
    convert(&doc, o)
}

fn convert(doc: &Value, o: &Overrides) -> Result<(JobPlan, Vec<Note>), MpiJobError> {
    let mut notes = Vec::new();
    let job = parse(doc, &mut notes)?;
    let name = o.name.clone().unwrap_or_else(|| job.name.clone());
    if !valid_name(&name) {
        return Err(MpiJobError::field(
            "metadata.name",
            format!("{name:?} cannot name the job: it takes 1-40 lower-case letters, digits and '-', starting with a letter and not ending with '-' (it names the pods and their host names)"),
            "name the job with --name",
        ));
    }
    let workers = job.worker.as_ref().map_or(0, |w| w.replicas);
    let pod_count = job_pods(workers)?;
    // mpi-operator runs ranks on the workers only, unless the launcher is a worker too: the
    // launcher's pod is then left out of the allocation (it is the pod mpirun runs in).
    let exclude_self = (!job.run_launcher_as_worker)
        .then(|| json!({"name": mca::EXCLUDE_SELF.mca.map_or("", |m| m.env), "value": "true"}));
    let mut p = pods(&job, exclude_self, o.pull_policy.as_deref(), &mut notes)?;
    let grace = grace_period(&job, &mut p.spec, o.grace_period, &mut notes)?;
    p.env
        .extend(preempt_env(grace, o.preempt_signal.as_deref()));
    p.env
        .extend(o.env.iter().map(|(k, v)| json!({"name": k, "value": v})));
    let launch = Launch::Injected {
        image: o.inject_image.clone(),
        mpi: job.mpi.to_string(),
    };
    own_env_replaced(&p.env, &launch, &job, &mut notes);
    let mut labels = job.labels.clone();
    let mut spec = p.spec;
    run_policy(&job, &mut labels, &mut spec, &mut notes)?;
    replica_policies(&job, &mut notes);
    let slots_annotation = crate::discovery::SLOTS_ANNOTATION;
    if let Some(v) = p.annotations.get(slots_annotation) {
        if v != &json!(job.slots_per_worker.to_string()) {
            notes.push(Note::new(
                format!("metadata.annotations[{slots_annotation}]"),
                format!(
                    "{} replaced by slotsPerWorker ({})",
                    super::reader::show(v),
                    job.slots_per_worker
                ),
            ));
        }
    }
    let ranks = if job.run_launcher_as_worker {
        format!("ranks on all {pod_count} pods (runLauncherAsWorker)")
    } else {
        "ranks on the workers only".to_string()
    };
    let pods_text = match workers {
        0 => "no workers".to_string(),
        1 => "pod 1 the worker".to_string(),
        n => format!("pods 1-{n} the workers"),
    };
    let plan = JobPlan {
        name,
        namespace: o.namespace.clone().or_else(|| job.namespace.clone()),
        kind: WorkloadKind::Job,
        pods: pod_count,
        command: p.command,
        // cleanPodPolicy None: the workers stay up after the launcher (see `run_policy`).
        success: if job.run_policy.clean_pod_policy.as_deref() == Some("None") {
            Success::Index0WorkersStay
        } else {
            Success::Index0
        },
        deadline: job
            .run_policy
            .active_deadline_seconds
            .and_then(|n| u64::try_from(n).ok()),
        ttl: job
            .run_policy
            .ttl_seconds_after_finished
            .and_then(|n| u64::try_from(n).ok()),
        max_restarts: 0,
        only: o.only.clone(),
        labels,
        annotations: job.annotations.clone(),
        suspend: job.run_policy.suspend.unwrap_or(false),
        managed_by: job
            .run_policy
            .managed_by
            .clone()
            // The Job itself is the Job controller's, whichever controller made it.
            .filter(|m| m != MPI_OPERATOR && m != CONTROLLER_NAME),
        max_pods: None,
        origin: vec![format!(
            "from the MPIJob {} ({API_VERSION}): pod 0 is the launcher, {pods_text}; {ranks}, slotsPerWorker {}; the agent's --mpi {}",
            job.name, job.slots_per_worker, job.mpi
        )],
        api_server: o.api_server.clone(),
        // The controller names the MPIJob itself (its uid is the cluster's).
        events_to: None,
        pod: PodPlan {
            labels: p.labels,
            annotations: p.annotations,
            slots: Some(job.slots_per_worker),
            spec,
            container: p.container,
            env: p.env,
            mounts: p.mounts,
            volumes: p.volumes,
            init_containers: p.init_containers,
            launch,
            runtime_pull_policy: o.pull_policy.clone(),
            uid: p.identity.uid,
            gid: p.identity.gid,
        },
    };
    let template = pod_template(&plan, true).map_err(MpiJobError::Render)?;
    let broken = violations(&template);
    if !broken.is_empty() {
        return Err(MpiJobError::NotRestricted(broken.join("; ")));
    }
    Ok((plan, notes))
}

/// The most pods an Indexed Job may have (Kubernetes refuses more completions or parallelism).
pub(crate) const MAX_JOB_PODS: u32 = 100_000;

/// The Job's pods for `workers` workers: the launcher's and theirs, within [`MAX_JOB_PODS`].
fn job_pods(workers: u32) -> Result<u32, MpiJobError> {
    workers
        .checked_add(1)
        .filter(|p| *p <= MAX_JOB_PODS)
        .ok_or_else(|| {
            MpiJobError::field(
                "spec.mpiReplicaSpecs.Worker.replicas",
                format!(
                    "is {workers}: with the launcher more than the {MAX_JOB_PODS} pods an Indexed Job may have"
                ),
                format!("give at most {} workers", MAX_JOB_PODS - 1),
            )
        })
}

/// `value` of `field`, refused past `max` (`what`: the limit's name).
fn at_most(
    value: Option<u64>,
    field: &str,
    max: u64,
    what: &str,
) -> Result<Option<u64>, MpiJobError> {
    match value {
        Some(v) if v > max => Err(MpiJobError::field(
            field,
            format!("is {v}: more than {max}, {what}"),
            format!("give at most {max}"),
        )),
        v => Ok(v),
    }
}

/// The pods' grace period: `--grace-period` (noted when it replaces the template's), else the
/// pod template's `terminationGracePeriodSeconds`, else [`DEFAULT_GRACE`]; set in `spec`, so
/// the agents hold the ranks for as long as the pod has (their `--preempt-grace`).
fn grace_period(
    job: &Parsed,
    spec: &mut Map<String, Value>,
    given: Option<u64>,
    notes: &mut Vec<Note>,
) -> Result<u64, MpiJobError> {
    let base = job.worker.as_ref().unwrap_or(&job.launcher);
    let at = format!("{}.terminationGracePeriodSeconds", base.path);
    let own = match spec.get("terminationGracePeriodSeconds") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            MpiJobError::field(
                at.clone(),
                format!(
                    "{} is not a whole number of seconds",
                    super::reader::show(v)
                ),
                "give seconds, or leave it out and give --grace-period",
            )
        })?),
    };
    let grace = match (given, own) {
        (Some(g), Some(t)) if g != t => {
            notes.push(Note::new(
                at.clone(),
                format!("{t} replaced by --grace-period {g}"),
            ));
            g
        }
        (Some(g), _) => g,
        (None, Some(t)) => t,
        (None, None) => DEFAULT_GRACE,
    };
    let max = i64::MAX as u64;
    let grace = at_most(
        Some(grace),
        &at,
        max,
        "the largest a pod's grace period takes",
    )?
    .unwrap_or(grace);
    spec.insert("terminationGracePeriodSeconds".into(), json!(grace));
    Ok(grace)
}

/// Notes each of the job's own variables the MPIJob's environment replaces.
fn own_env_replaced(env: &[Value], launch: &Launch, job: &Parsed, notes: &mut Vec<Note>) {
    let own = crate::manifest::pod::own_env(WorkloadKind::Job, launch);
    let base = job.worker.as_ref().unwrap_or(&job.launcher);
    for e in env {
        if let Some(o) = own.iter().find(|o| e["name"] == o.name.as_str()) {
            let was = match &o.value {
                Some(v) => json!(v),
                None => serde_json::to_value(&o.value_from).unwrap_or_default(),
            };
            notes.push(Note::new(
                format!("{}.containers[0].env[{}]", base.path, o.name),
                format!(
                    "replaces the job's own {} (the NetworkPolicy admits only the job's pinned ports and the TCP BTL; a change may need the policy changed too)",
                    super::reader::show(&was)
                ),
            ));
        }
    }
}

/// `spec.runPolicy` onto the Job (`labels`: the Job's; `spec`: the pods').
fn run_policy(
    job: &Parsed,
    labels: &mut Map<String, Value>,
    spec: &mut Map<String, Value>,
    notes: &mut Vec<Note>,
) -> Result<(), MpiJobError> {
    let p = &job.run_policy;
    let at = "spec.runPolicy";
    match p.backoff_limit {
        Some(n) if n > 0 => notes.push(Note::new(
            format!("{at}.backoffLimit"),
            format!("{n} not honoured: the job runs once, and a failed pod or rank fails it at once, naming it (a retried pod cannot rejoin a running MPI job); rerun it with kubectl"),
        )),
        _ => {}
    }
    match p.clean_pod_policy.as_deref() {
        Some("None") => notes.push(Note::new(
            format!("{at}.cleanPodPolicy"),
            "None: the workers stay up after the launcher succeeds (their agents' --workers-stay), until the Job is deleted; so the Job does not complete (no success policy) and index 0's pod tells the success (prrte-k8s controller sets the MPIJob's Succeeded from it); a failed launcher still fails the Job, which stops them",
        )),
        Some("All") => notes.push(Note::new(
            format!("{at}.cleanPodPolicy"),
            "All not fully honoured without the controller: running pods are stopped when the Job ends, but finished pods (and their logs) stay until ttlSecondsAfterFinished deletes the Job (prrte-k8s controller deletes the workers after the end)",
        )),
        _ => {}
    }
    let s = p.scheduling_policy.clone().unwrap_or_default();
    let sp = format!("{at}.schedulingPolicy");
    if let Some(queue) = s.queue.as_ref().filter(|q| !q.is_empty()) {
        match labels.get(QUEUE_LABEL) {
            Some(l) if l != &json!(queue) => {
                return Err(MpiJobError::field(
                    format!("{sp}.queue"),
                    format!(
                        "{queue:?} differs from the label {QUEUE_LABEL}={}",
                        super::reader::show(l)
                    ),
                    "name one queue",
                ))
            }
            _ => {
                labels.insert(QUEUE_LABEL.into(), json!(queue));
            }
        }
    }
    if let Some(pc) = s.priority_class.as_ref().filter(|p| !p.is_empty()) {
        match spec.get("priorityClassName") {
            Some(t) if t != &json!(pc) => notes.push(Note::new(
                format!("{sp}.priorityClass"),
                format!(
                    "{pc:?} not used: the pod template's priorityClassName {} is kept",
                    super::reader::show(t)
                ),
            )),
            _ => {
                spec.insert("priorityClassName".into(), json!(pc));
            }
        }
    }
    if let Some(n) = s.min_available {
        notes.push(Note::new(
            format!("{sp}.minAvailable"),
            format!("{n} not honoured without a gang scheduler: it sizes a PodGroup, which prrte-k8s controller --gang-scheduler renders; here all the Job's pods are needed and the launcher waits for them (gang admission: a Kueue queue, schedulingPolicy.queue)"),
        ));
    }
    if s.min_resources.is_some() {
        notes.push(Note::new(
            format!("{sp}.minResources"),
            "not honoured without a gang scheduler: it sizes a PodGroup of Volcano or scheduler-plugins, which prrte-k8s controller --gang-scheduler renders",
        ));
    }
    if let Some(n) = s.schedule_timeout_seconds {
        notes.push(Note::new(
            format!("{sp}.scheduleTimeoutSeconds"),
            format!("{n} not honoured without a gang scheduler: it is a scheduler-plugins PodGroup's, which prrte-k8s controller --gang-scheduler renders (activeDeadlineSeconds bounds the whole Job)"),
        ));
    }
    Ok(())
}

/// The replicas' restartPolicy: one try.
fn replica_policies(job: &Parsed, notes: &mut Vec<Note>) {
    for r in std::iter::once(&job.launcher).chain(job.worker.as_ref()) {
        if r.restart_policy == Some("OnFailure") {
            notes.push(Note::new(
                format!("spec.mpiReplicaSpecs.{}.restartPolicy", r.role),
                "OnFailure not honoured: every pod runs once (restartPolicy Never); a failure fails the Job, naming the pod",
            ));
        }
    }
}
