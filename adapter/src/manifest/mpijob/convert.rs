//! An MPIJob as the job to render ([`from_mpijob`]): a JobSet whose replicated jobs
//! `launcher` and `worker` get the Launcher's and the Worker's pod templates
//! ([`Overrides::jobset`]), or one Indexed Job whose pod 0 is the launcher and pods 1..N the
//! workers, all with the Worker's template; its `runPolicy` mapped onto the workload, and
//! every field it cannot honour named in a note.

use serde_json::{json, Map, Value};

use super::error::{MpiJobError, Note};
use super::model::MpiJob;
use super::parse::{document, parse, Parsed, API_VERSION, CONTROLLER_NAME, MPI_OPERATOR};
use super::pods::{pods, For, Pods};
use crate::manifest::options::{preempt_env, valid_name, DEFAULT_GRACE};
use crate::manifest::plan::{JobPlan, Launch, LauncherPlan, Part, PodPlan};
use crate::manifest::pod::pod_template;
use crate::manifest::restricted::violations;
use crate::settings::{agent, mca};
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
    /// A JobSet (`--kind jobset`; the controller where the cluster serves JobSets): the
    /// launcher gets a pod of its own from the Launcher's template. Else one Indexed Job.
    pub(crate) jobset: bool,
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
    // The launcher's own pod: a JobSet of two replicated jobs (without workers, the one pod
    // is the launcher's and gets its template either way).
    let split = o.jobset && job.worker.is_some();
    let which = if split { For::Workers } else { For::All };
    let mut p = pods(
        &job,
        which,
        exclude_self.clone(),
        o.pull_policy.as_deref(),
        &mut notes,
    )?;
    let launch = Launch::Injected {
        image: o.inject_image.clone(),
        mpi: job.mpi.to_string(),
    };
    let base_path = job.worker.as_ref().unwrap_or(&job.launcher).path.clone();
    let grace = grace_period(&base_path, &mut p.spec, o.grace_period, &mut notes)?;
    finish_env(&mut p, grace, o, split.then_some("worker"));
    own_env_replaced(&p.env, &launch, &base_path, &mut notes);
    let mut labels = job.labels.clone();
    run_policy(&job, &mut labels, &mut p.spec, &mut notes)?;
    let launcher = if split {
        let mut l = pods(
            &job,
            For::Launcher,
            exclude_self,
            o.pull_policy.as_deref(),
            &mut notes,
        )?;
        let grace = grace_period(&job.launcher.path, &mut l.spec, o.grace_period, &mut notes)?;
        finish_env(&mut l, grace, o, Some("launcher"));
        own_env_replaced(&l.env, &launch, &job.launcher.path, &mut notes);
        // The same policy on the launcher's pod, its notes given once (for the workers').
        run_policy(&job, &mut labels.clone(), &mut l.spec, &mut Vec::new())?;
        Some(LauncherPlan {
            pod: pod_plan(l, &job, &launch, o),
            after_workers: job.wait_for_workers,
        })
    } else {
        if job.wait_for_workers && job.worker.is_some() {
            notes.push(Note::new(
                "spec.launcherCreationPolicy",
                "WaitForWorkersReady not honoured: pod 0 (the launcher) is one of the Indexed Job's pods and starts with the workers (a JobSet gives it a pod of its own, made once they are ready); its agent waits for them before the command runs",
            ));
        }
        None
    };
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
    let pods_text = match (workers, split) {
        (0, _) => "pod 0 is the launcher, no workers".to_string(),
        (n, true) => format!(
            "a JobSet: replicated job launcher (its pod from the Launcher's template{}), worker ({n} pods from the Worker's)",
            if job.wait_for_workers { ", made once the workers are ready" } else { "" }
        ),
        (1, false) => "pod 0 is the launcher, pod 1 the worker (one Indexed Job: every pod from the Worker's template)".to_string(),
        (n, false) => format!("pod 0 is the launcher, pods 1-{n} the workers (one Indexed Job: every pod from the Worker's template)"),
    };
    let plan = JobPlan {
        name,
        namespace: o.namespace.clone().or_else(|| job.namespace.clone()),
        kind: if split { WorkloadKind::JobSet } else { WorkloadKind::Job },
        pods: pod_count,
        command: p.command.clone(),
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
            "from the MPIJob {} ({API_VERSION}): {pods_text}; {ranks}, slotsPerWorker {}; the agent's --mpi {}",
            job.name, job.slots_per_worker, job.mpi
        )],
        api_server: o.api_server.clone(),
        // The controller names the MPIJob itself (its uid is the cluster's).
        events_to: None,
        pod: pod_plan(p, &job, &launch, o),
        launcher,
    };
    let mut broken = violations(&pod_template(&plan, true).map_err(MpiJobError::Render)?);
    if let Some(l) = &plan.launcher {
        let own = JobPlan {
            pod: l.pod.clone(),
            ..plan.clone()
        };
        broken.extend(violations(
            &pod_template(&own, true).map_err(MpiJobError::Render)?,
        ));
    }
    if !broken.is_empty() {
        return Err(MpiJobError::NotRestricted(broken.join("; ")));
    }
    Ok((plan, notes))
}

/// The pods' environment completed: the preemption notice for `grace`, the command line's
/// variables, and the agent's batch role where each role has pods of its own (`role`).
fn finish_env(p: &mut Pods, grace: u64, o: &Overrides, role: Option<&str>) {
    p.env
        .extend(preempt_env(grace, o.preempt_signal.as_deref()));
    if let Some(role) = role {
        p.env
            .push(json!({"name": agent::BATCH_ROLE.var(), "value": role}));
    }
    p.env
        .extend(o.env.iter().map(|(k, v)| json!({"name": k, "value": v})));
}

/// The plan's pods from their parts.
fn pod_plan(p: Pods, job: &Parsed, launch: &Launch, o: &Overrides) -> PodPlan {
    PodPlan {
        labels: p.labels,
        annotations: p.annotations,
        slots: Some(job.slots_per_worker),
        spec: p.spec,
        container: p.container,
        env: p.env,
        mounts: p.mounts,
        volumes: p.volumes,
        init_containers: p.init_containers,
        launch: launch.clone(),
        runtime_pull_policy: o.pull_policy.clone(),
        uid: p.identity.uid,
        gid: p.identity.gid,
    }
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
    base: &str,
    spec: &mut Map<String, Value>,
    given: Option<u64>,
    notes: &mut Vec<Note>,
) -> Result<u64, MpiJobError> {
    let at = format!("{base}.terminationGracePeriodSeconds");
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

/// Notes each of the job's own variables the MPIJob's environment (of the pods of `base`, a
/// template's spec path) replaces.
fn own_env_replaced(env: &[Value], launch: &Launch, base: &str, notes: &mut Vec<Note>) {
    let own = crate::manifest::pod::own_env(WorkloadKind::Job, launch);
    for e in env {
        if let Some(o) = own.iter().find(|o| e["name"] == o.name.as_str()) {
            let was = match &o.value {
                Some(v) => json!(v),
                None => serde_json::to_value(&o.value_from).unwrap_or_default(),
            };
            notes.push(Note::new(
                format!("{base}.containers[0].env[{}]", o.name),
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
            format!("{n}: prrte-k8s controller restarts the whole job after it failed (every pod made again, a new DVM; not after its deadline), up to {n} times, then fails it (BackoffLimitExceeded); the rendered Job alone runs once (backoffLimit: 0: a retried pod cannot rejoin a running MPI job), and a failed pod or rank fails it at once, naming it"),
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

/// The replicas' restartPolicy: no pod is restarted in place; the retries are the
/// backoffLimit's, each of the whole job.
fn replica_policies(job: &Parsed, notes: &mut Vec<Note>) {
    for r in std::iter::once(&job.launcher).chain(job.worker.as_ref()) {
        if r.restart_policy == Some("OnFailure") {
            notes.push(Note::new(
                format!("spec.mpiReplicaSpecs.{}.restartPolicy", r.role),
                "OnFailure: no pod is restarted in place (restartPolicy Never: a restarted process cannot rejoin a running MPI job); as in mpi-operator, runPolicy.backoffLimit bounds the retries, and prrte-k8s controller retries the whole job (every pod made again)",
            ));
        }
    }
}
