//! A TrainJob's status as Trainer v2.3.0's controller writes it (`trainjob_controller.go`,
//! `plugins/jobset` `Status`), from the JobSet and the clock (pure):
//! - `Suspended`: True (reason `Suspended`) while `spec.suspend`, then False (reason `Resumed`);
//! - `Complete`: the JobSet's `Completed` condition, its reason, message and time copied;
//! - `Failed`: the JobSet's `Failed` (reason `FailedJobs` and the like), its message followed by
//!   the failed pod and its exit code when one is known; or `DeadlineExceeded` once
//!   `activeDeadlineSeconds` have passed since the creation or the last resume (the JobSet is
//!   then deleted); a `Failed` other than `DeadlineExceeded` is recomputed at each reconcile;
//! - `jobsStatus`: the JobSet's `replicatedJobsStatus`, its six counts each;
//! - no other condition: none while the job runs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use super::types::{JobStatus, TrainJob, TrainJobStatus};

pub const SUSPENDED: &str = "Suspended";
pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";

/// A pod of the job whose container ended in failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFailure {
    pub pod: String,
    pub container: String,
    pub exit_code: i32,
}

/// What a reconcile decided beyond the status.
#[derive(Clone, Debug, PartialEq)]
pub struct Next {
    pub status: TrainJobStatus,
    /// The deadline passed now: the JobSet is to be deleted.
    pub delete_jobset: bool,
    /// Seconds until the deadline, when one is pending.
    pub deadline_in: Option<i64>,
}

/// Whether the job is over (`Complete` or `Failed` true).
pub fn finished(status: &TrainJobStatus) -> bool {
    is_true(&status.conditions, COMPLETE) || is_true(&status.conditions, FAILED)
}

fn find<'a>(conds: &'a [Condition], ty: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == ty)
}

fn is_true(conds: &[Condition], ty: &str) -> bool {
    find(conds, ty).is_some_and(|c| c.status == "True")
}

/// `meta.SetStatusCondition`: a new condition added, an existing one's reason and message
/// replaced, its time changed only with its status.
pub fn set_condition(conds: &mut Vec<Condition>, new: Condition) {
    match conds.iter_mut().find(|c| c.type_ == new.type_) {
        Some(c) => {
            if c.status != new.status {
                c.status = new.status;
                c.last_transition_time = new.last_transition_time;
            }
            c.reason = new.reason;
            c.message = new.message;
            c.observed_generation = new.observed_generation;
        }
        None => conds.push(new),
    }
}

fn condition(ty: &str, status: &str, reason: &str, message: &str, now: &Time) -> Condition {
    Condition {
        type_: ty.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// A JobSet condition of type `ty` that is True, as the TrainJob's `as_type`.
fn jobset_condition(jobset: &Value, ty: &str, as_type: &str, now: &Time) -> Option<Condition> {
    let c = jobset["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty && c["status"] == "True")?;
    let time = c["lastTransitionTime"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .map(Time)
        .unwrap_or_else(|| now.clone());
    Some(Condition {
        type_: as_type.into(),
        status: "True".into(),
        reason: c["reason"].as_str().unwrap_or_default().into(),
        message: c["message"].as_str().unwrap_or_default().into(),
        last_transition_time: time,
        observed_generation: None,
    })
}

/// The next status of `job`, from its JobSet (None: not there) and, if it failed, its first
/// failed pod; `now` the time.
pub fn next(
    job: &TrainJob,
    jobset: Option<&Value>,
    failure: Option<&PodFailure>,
    now: &Time,
) -> Next {
    let mut status = job.status.clone().unwrap_or_default();
    // `removeFailedCondition`: a Failed that is not the deadline's is recomputed.
    let deadline = find(&status.conditions, FAILED)
        .filter(|c| c.reason == DEADLINE_EXCEEDED)
        .cloned();
    status
        .conditions
        .retain(|c| c.type_ != FAILED || deadline.is_some());
    let suspend = job.spec.suspend.unwrap_or(false);
    if suspend {
        let c = condition(SUSPENDED, "True", "Suspended", "TrainJob is suspended", now);
        set_condition(&mut status.conditions, c);
    } else if is_true(&status.conditions, SUSPENDED) {
        let c = condition(SUSPENDED, "False", "Resumed", "TrainJob is resumed", now);
        set_condition(&mut status.conditions, c);
    }
    if let Some(js) = jobset {
        if let Some(c) = jobset_condition(js, "Completed", COMPLETE, now) {
            set_condition(&mut status.conditions, c);
        }
        if let Some(mut c) = jobset_condition(js, "Failed", FAILED, now) {
            if let Some(f) = failure {
                c.message = failure_message(&c.message, f);
            }
            set_condition(&mut status.conditions, c);
        }
        status.jobs_status = jobs_status(js);
    }
    if let Some(d) = deadline {
        set_condition(&mut status.conditions, d);
    }
    let mut next = Next {
        status,
        delete_jobset: false,
        deadline_in: None,
    };
    deadline_check(job, &mut next, now);
    next
}

/// The JobSet's message, then the pod and its exit code (unless it names them already).
pub fn failure_message(message: &str, f: &PodFailure) -> String {
    let code = format!("exit code {}", f.exit_code);
    if message.contains(&f.pod) && message.contains(&code) {
        return message.to_string();
    }
    let said = format!(
        "pod {} (container {}) exited with {code}",
        f.pod, f.container
    );
    if message.is_empty() {
        said
    } else {
        format!("{message}: {said}")
    }
}

/// `replicatedJobsStatus` as `jobsStatus`.
fn jobs_status(jobset: &Value) -> Vec<JobStatus> {
    let count = |v: &Value, k: &str| v[k].as_i64().unwrap_or(0) as i32;
    jobset["status"]["replicatedJobsStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| JobStatus {
            name: r["name"].as_str().unwrap_or_default().into(),
            ready: count(r, "ready"),
            succeeded: count(r, "succeeded"),
            failed: count(r, "failed"),
            active: count(r, "active"),
            suspended: count(r, "suspended"),
        })
        .collect()
}

/// `reconcileDeadline`: from the creation, or from the last resume.
fn deadline_check(job: &TrainJob, next: &mut Next, now: &Time) {
    let secs = job.spec.active_deadline_seconds;
    if secs == 0 || finished(&next.status) || job.spec.suspend.unwrap_or(false) {
        return;
    }
    let start = match find(&next.status.conditions, SUSPENDED) {
        Some(c) if c.status == "False" => Some(c.last_transition_time.0),
        _ => job.metadata.creation_timestamp.as_ref().map(|t| t.0),
    };
    let Some(start) = start else { return };
    let left = secs - now.0.duration_since(start).as_secs();
    if left < 0 {
        let c = condition(
            FAILED,
            "True",
            DEADLINE_EXCEEDED,
            "TrainJob exceeded its active deadline",
            now,
        );
        set_condition(&mut next.status.conditions, c);
        next.delete_jobset = true;
    } else {
        next.deadline_in = Some(left.max(1));
    }
}

#[cfg(test)]
mod tests;
