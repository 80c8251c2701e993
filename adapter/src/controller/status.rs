//! The MPIJob's status from what the cluster shows, computed without one (`next_status`), as
//! mpi-operator writes it (`pkg/controller/mpi_job_controller{,_status}.go`): the conditions
//! `Created`, `Running`, `Suspended`, `Succeeded` and `Failed` with its reasons (`MPIJobCreated`,
//! `MPIJobRunning`, `MPIJobSuspended`, `MPIJobResumed`, `MPIJobSucceeded`; a failure keeps the
//! Job's own reason and message, which name the pod and its exit code or disruption),
//! `replicaStatuses` for `Launcher` (pod 0, or the JobSet's replicated job `launcher`) and
//! `Worker` (pods 1..N, or the replicated job `worker`), `startTime` and `completionTime`; and
//! the events that go with each change, read from the MPIJob's child ([`Child`]: the Job or
//! the JobSet). `Succeeded` comes with the Job's `Complete` (the JobSet's `Completed`), or,
//! with `cleanPodPolicy: None` (the workers stay up, so the child does not complete), with
//! the launcher done (index 0 among the Job's completed indexes, the JobSet's `launcher`
//! succeeded). Every pod runs once (a failed pod fails
//! the job); `Restarting`, and a failure after the last restart, are [`super::restart`]'s.
//!
//! `replicaStatuses` count each pod once, by its phase; a pod being deleted is not active.
//! Once the Job has finished they are mpi-operator's, from the Job alone: the launcher
//! `succeeded: 1` (the Job complete, or index 0 among its completed indexes) or else `failed:
//! 1` (the launcher runs once; the Job counts a pod it stops as failed, even once it is gone),
//! and the workers nothing (mpi-operator stops counting them when the launcher's Job ends and
//! zeroes them when it cleans them up). After the end the conditions and `completionTime` stay
//! as they are; the counts are made again while the Job is there (one written wrong is
//! corrected).
//!
//! One difference: `Running` needs the launcher running and every worker *ready* (its agent
//! up), not only running, so that it tells the job can start its daemons.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::child::Child;
use super::observe::{disrupted, failed_rank, launcher, name, phase as pod_phase, ready};
use super::retry::INVALID;
use crate::discovery::keys::{JOBSET_REPLICATED_JOB_LABEL, JOB_COMPLETION_INDEX};
use crate::manifest::mpijob::model::{JobCondition, MpiJobStatus, ReplicaStatus};
use crate::manifest::JOB_LABEL;
use crate::workload::{LAUNCHER, WORKER};

/// What the cluster shows of one MPIJob.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observed<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// `spec.runPolicy.suspend`.
    pub suspend: bool,
    /// How many workers the MPIJob asks for.
    pub workers: u32,
    /// The child made for it (its Job or JobSet), if any.
    pub job: Option<&'a Child>,
    /// The child's pods.
    pub pods: &'a [Arc<Pod>],
    /// Why the MPIJob cannot run (the conversion's refusal), if it cannot.
    pub invalid: Option<&'a str>,
}

/// An event on the MPIJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

impl Notice {
    pub(super) fn normal(reason: &str, message: String) -> Self {
        Self {
            warning: false,
            reason: reason.into(),
            message,
        }
    }
    pub(super) fn warning(reason: &str, message: String) -> Self {
        Self {
            warning: true,
            reason: reason.into(),
            message,
        }
    }
}

/// The new status and the events of the change.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: MpiJobStatus,
    pub notices: Vec<Notice>,
    /// `Running` became true now (the metrics' creation-to-running time).
    pub(crate) started_running: bool,
}

/// The longest event message Kubernetes takes.
const MESSAGE_LIMIT: usize = 1024;

pub(super) fn truncate(mut m: String) -> String {
    if m.len() > MESSAGE_LIMIT {
        let mut cut = MESSAGE_LIMIT - 3;
        while !m.is_char_boundary(cut) {
            cut -= 1;
        }
        m.truncate(cut);
        m.push_str("...");
    }
    m
}

/// The condition of `type_`, if any.
pub fn condition<'a>(s: &'a MpiJobStatus, type_: &str) -> Option<&'a JobCondition> {
    s.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is true.
pub(crate) fn is_true(s: &MpiJobStatus, type_: &str) -> bool {
    condition(s, type_).is_some_and(|c| c.status == "True")
}

/// Succeeded or Failed.
pub fn finished(s: &MpiJobStatus) -> bool {
    is_true(s, "Succeeded") || is_true(s, "Failed")
}

/// The phase for `kubectl get` and the metrics: `Failed`, `Succeeded`, `Suspended`,
/// `Restarting`, `Running` or `Created`.
pub fn phase(s: &MpiJobStatus) -> &'static str {
    ["Failed", "Succeeded", "Suspended", "Restarting", "Running"]
        .into_iter()
        .find(|t| is_true(s, t))
        .unwrap_or("Created")
}

/// Sets a condition as mpi-operator does (`setCondition`): unchanged if its status and reason
/// are; `lastTransitionTime` kept if its status is; `Running` and `Restarting` exclude each
/// other; `Succeeded` or `Failed` turn `Running` false. Returns whether anything changed.
pub(super) fn set(
    s: &mut MpiJobStatus,
    type_: &str,
    status: bool,
    reason: &str,
    msg: &str,
    now: &Time,
) -> bool {
    let status = if status { "True" } else { "False" };
    let current = condition(s, type_).cloned();
    if let Some(c) = &current {
        if c.status == status && c.reason.as_deref() == Some(reason) {
            return false;
        }
    }
    let transition = match &current {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    let ends = type_ == "Succeeded" || type_ == "Failed";
    s.conditions.retain(|c| {
        c.type_ != type_
            && !(type_ == "Running" && c.type_ == "Restarting")
            && !(type_ == "Restarting" && c.type_ == "Running")
    });
    if ends {
        for c in s.conditions.iter_mut().filter(|c| c.type_ == "Running") {
            c.status = "False".into();
        }
    }
    s.conditions.push(JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(msg.into()),
        last_update_time: Some(now.clone()),
        last_transition_time: transition,
    });
    true
}

/// The replica status of `pods` (`active`: running and not being deleted; `selector`: which
/// pods).
fn replica(pods: &[&Arc<Pod>], selector: String) -> ReplicaStatus {
    let count = |f: &dyn Fn(&Pod) -> bool| pods.iter().filter(|p| f(p)).count() as i32;
    ReplicaStatus {
        active: count(&|p| pod_phase(p) == "Running" && p.metadata.deletion_timestamp.is_none()),
        succeeded: count(&|p| pod_phase(p) == "Succeeded"),
        failed: count(&|p| pod_phase(p) == "Failed"),
        label_selector: None,
        selector: Some(selector),
    }
}

/// How the job ended: `Some(true)` succeeded (the child complete, or, not failed, its
/// launcher done: with `cleanPodPolicy: None` the workers stay up and the child does not
/// complete), `Some(false)` failed, None not yet (or no child).
fn job_end(job: Option<&Child>) -> Option<bool> {
    let job = job?;
    if job.complete().is_some() {
        Some(true)
    } else if job.failed().is_some() {
        Some(false)
    } else if job.launcher_done() {
        Some(true)
    } else {
        None
    }
}

/// The selectors of the launcher's and the workers' pods: by completion index in the one
/// Job, by replicated job in the JobSet.
fn selectors(o: &Observed) -> (String, String) {
    let base = format!("{JOB_LABEL}={}", o.name);
    if o.job.is_some_and(Child::is_jobset) {
        (
            format!("{base},{JOBSET_REPLICATED_JOB_LABEL}={LAUNCHER}"),
            format!("{base},{JOBSET_REPLICATED_JOB_LABEL}={WORKER}"),
        )
    } else {
        (
            format!("{base},{JOB_COMPLETION_INDEX}=0"),
            format!("{base},{JOB_COMPLETION_INDEX}!=0"),
        )
    }
}

/// The replica statuses of `Launcher` and `Worker` from the Job and its pods, and how many
/// workers are ready.
fn replicas(o: &Observed) -> (ReplicaStatus, ReplicaStatus, usize) {
    let (launchers, workers): (Vec<&Arc<Pod>>, Vec<&Arc<Pod>>) =
        o.pods.iter().partition(|p| launcher(p));
    let (to_launcher, to_workers) = selectors(o);
    let mut launcher = replica(&launchers, to_launcher);
    let mut worker = replica(&workers, to_workers);
    let workers_ready = workers.iter().filter(|p| ready(p)).count();
    if let (Some(job), Some(complete)) = (o.job, job_end(o.job)) {
        // The launcher runs once: it succeeded (its index completed) or the Job counts it
        // failed, even once its pod is gone.
        let succeeded = complete || job.launcher_done();
        launcher = ReplicaStatus {
            succeeded: i32::from(succeeded),
            failed: i32::from(!succeeded),
            selector: launcher.selector,
            ..Default::default()
        };
        worker = ReplicaStatus {
            selector: worker.selector,
            ..Default::default()
        };
    }
    (launcher, worker, workers_ready)
}

/// The status after `old` of the MPIJob `job_id` (`namespace/name`) that cannot run: the
/// condition `Failed` with `reason` and the message "MPIJob `job_id` cannot run: `why`", its
/// completion time (nothing is made for it again), and a warning event saying the same.
pub(crate) fn refused(
    old: &MpiJobStatus,
    job_id: &str,
    reason: &str,
    why: &str,
    now: &Time,
) -> Outcome {
    let mut s = old.clone();
    let msg = truncate(format!("MPIJob {job_id} cannot run: {why}"));
    let mut notices = Vec::new();
    if s.conditions.is_empty() {
        let created = format!("MPIJob {job_id} is created.");
        set(&mut s, "Created", true, "MPIJobCreated", &created, now);
        notices.push(Notice::normal("MPIJobCreated", created));
    }
    set(&mut s, "Failed", true, reason, &msg, now);
    s.completion_time = Some(now.clone());
    notices.push(Notice::warning(reason, msg));
    Outcome {
        status: s,
        notices,
        started_running: false,
    }
}

/// A `Failed` message with the first failed rank, its pod and its exit code or signal, where the
/// launcher's termination message names them.
fn with_failed_rank(msg: String, o: &Observed) -> String {
    match o.pods.iter().find_map(|p| failed_rank(p)) {
        Some(rank) if !msg.contains(rank) => format!("{msg}: {rank}"),
        _ => msg,
    }
}

/// The `Failed` condition, written before the launcher's pod showed the failed rank, names it
/// once it does (its reason and time stay): the child can fail before the launcher's pod has
/// ended, as when a JobSet's worker Job fails first and the JobSet then stops the launcher's.
fn name_failed_rank_late(s: &mut MpiJobStatus, o: &Observed) {
    let failed = s
        .conditions
        .iter_mut()
        .find(|c| c.type_ == "Failed" && c.status == "True");
    if let Some(c) = failed {
        let msg = c.message.clone().unwrap_or_default();
        let named = with_failed_rank(msg.clone(), o);
        if named != msg {
            c.message = Some(truncate(named));
        }
    }
}

/// The status after `old`, from what `o` shows, at `now`.
pub(crate) fn next_status(old: &MpiJobStatus, o: &Observed, now: &Time) -> Outcome {
    let mut s = old.clone();
    let mut notices = Vec::new();
    let job_id = format!("{}/{}", o.namespace, o.name);
    if s.conditions.is_empty() {
        let msg = format!("MPIJob {job_id} is created.");
        set(&mut s, "Created", true, "MPIJobCreated", &msg, now);
        notices.push(Notice::normal("MPIJobCreated", msg));
    }
    if finished(&s) && s.completion_time.is_some() {
        // The end is written: only the counts are made again, while the Job is there, and a
        // failed rank named once the launcher's pod shows it.
        if o.job.is_some() {
            let (launcher, worker, _) = replicas(o);
            s.replica_statuses.insert("Launcher".into(), launcher);
            s.replica_statuses.insert("Worker".into(), worker);
            name_failed_rank_late(&mut s, o);
        }
        return Outcome {
            status: s,
            notices,
            started_running: false,
        };
    }
    if let Some(why) = o.invalid {
        let mut out = refused(&s, &job_id, INVALID, why, now);
        notices.append(&mut out.notices);
        out.notices = notices;
        return out;
    }
    if s.start_time.is_none() && !o.suspend {
        s.start_time = Some(now.clone());
    }
    if o.suspend {
        if set(
            &mut s,
            "Suspended",
            true,
            "MPIJobSuspended",
            "MPIJob suspended",
            now,
        ) {
            notices.push(Notice::normal("MPIJobSuspended", "MPIJob suspended".into()));
        }
    } else if condition(&s, "Suspended").is_some()
        && set(
            &mut s,
            "Suspended",
            false,
            "MPIJobResumed",
            "MPIJob resumed",
            now,
        )
    {
        notices.push(Notice::normal("MPIJobResumed", "MPIJob resumed".into()));
        s.start_time = Some(now.clone());
    }

    let (launcher, worker, workers_ready) = replicas(o);
    let launcher_running = launcher.active >= 1;
    s.replica_statuses.insert("Launcher".into(), launcher);
    s.replica_statuses.insert("Worker".into(), worker);

    if let Some(job) = o.job {
        if job_end(Some(job)) == Some(true) {
            let msg = format!("MPIJob {job_id} successfully completed.");
            s.completion_time = job.completion_time().or_else(|| Some(now.clone()));
            if set(&mut s, "Succeeded", true, "MPIJobSucceeded", &msg, now) {
                notices.push(Notice::normal("MPIJobSucceeded", msg));
            }
        } else if let Some(c) = job.failed() {
            let reason = c
                .reason
                .as_deref()
                .filter(|r| !r.is_empty())
                .unwrap_or("MPIJobFailed");
            let mut msg = c
                .message
                .clone()
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| format!("MPIJob {job_id} has failed"));
            let gone: Vec<&str> = o
                .pods
                .iter()
                .filter(|p| disrupted(p))
                .map(|p| name(p))
                .collect();
            if !gone.is_empty() && !msg.contains(gone[0]) {
                msg = format!("{msg} (evicted: {})", gone.join(", "));
            }
            msg = with_failed_rank(msg, o);
            let msg = truncate(msg);
            s.completion_time = Some(now.clone());
            if set(&mut s, "Failed", true, reason, &msg, now) {
                if !gone.is_empty() {
                    let m = truncate(format!("pods evicted or disrupted: {}", gone.join(", ")));
                    notices.push(Notice::warning("MPIJobEvicted", m));
                }
                notices.push(Notice::warning(reason, msg));
            }
        }
    }

    let mut started_running = false;
    if o.suspend {
        let msg = format!("MPIJob {job_id} is suspended.");
        set(&mut s, "Running", false, "MPIJobSuspended", &msg, now);
    } else if finished(&s) {
        if condition(&s, "Running").is_none() {
            let at = s.completion_time.clone().unwrap_or_else(|| now.clone());
            let msg = format!("MPIJob {job_id} is finished but Running condition was never set.");
            set(&mut s, "Running", false, "MPIJobRunning", &msg, &at);
        }
    } else if launcher_running && workers_ready >= o.workers as usize {
        let msg = format!(
            "MPIJob {job_id} is running: the launcher and {workers_ready}/{} workers are up.",
            o.workers
        );
        if set(&mut s, "Running", true, "MPIJobRunning", &msg, now) {
            notices.push(Notice::normal("MPIJobRunning", msg));
            started_running = true;
        }
    }
    Outcome {
        status: s,
        notices,
        started_running,
    }
}

#[cfg(test)]
mod tests;
