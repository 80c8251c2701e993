//! Restarts of an MPIJob whose child failed (`runPolicy.backoffLimit`), decided without the
//! API ([`verdict`], [`earlier`], [`apply`]) and carried out by the child's own calls
//! ([`super::child`]: its mark, its foreground delete). mpi-operator gives `backoffLimit` to its launcher's Job, which makes the
//! failed launcher pod again (a new pod with `restartPolicy: Never`, the same one restarted with
//! `OnFailure`) up to that many times, the workers running on; it counts the launcher's
//! failures (`replicaStatuses.Launcher.failed`) across the retries and ends `Failed` with
//! reason `BackoffLimitExceeded`. Here a failed process cannot rejoin a running MPI job, so a
//! retry is of the whole job: the child (the Job of all pods, or what stands for it) is deleted
//! in the foreground (its pods gone first) and made again, a new DVM for the same MPIJob, with
//! the same Secret. Each child carries its attempt, counted from 0, in the label
//! [`ATTEMPT_LABEL`] (on its pods too: the downward API reads it); while no child is there the
//! status holds the count, as mpi-operator's does: `Launcher.failed` is the number of failed
//! attempts, which is the next attempt's number. So a controller restarted mid-way, or an
//! MPIJob suspended while it restarts, counts right.
//!
//! A child that failed on its deadline (`DeadlineExceeded`: the deadline runs from the MPIJob's
//! start across the restarts, as a Job's does across its retries) is not restarted, nor is one
//! of an MPIJob that cannot run (it has no child). The restart sets the condition `Restarting`
//! (reason `MPIJobRestarting`, the message naming the attempt and its failure) with a warning
//! event; the next attempt's `Running` replaces it. A failure after the last restart fails the
//! MPIJob with reason `BackoffLimitExceeded`, the message naming the last failure; without a
//! `backoffLimit` (or 0) the first failure does, with the child's own reason, as before.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::child::{Failure, ATTEMPT_LABEL};
use super::status::{condition, set, truncate, Notice, Outcome};
use crate::manifest::mpijob::model::{MpiJob, MpiJobStatus};

/// The reason of the condition `Restarting` and of its event.
pub(crate) const RESTARTING: &str = "MPIJobRestarting";
/// The reason of the condition `Failed` after the last restart (mpi-operator's, the Job's).
pub(crate) const EXCEEDED: &str = "BackoffLimitExceeded";
/// The reason of a child that failed on its deadline: never restarted.
const DEADLINE: &str = "DeadlineExceeded";

/// What follows a child's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The MPI job is made again: this is the attempt that failed.
    Restart { failed: u32 },
    /// The MPIJob fails with the child's own reason and message (no `backoffLimit`, or a
    /// deadline).
    Fail,
    /// The MPIJob fails with [`EXCEEDED`]: `failed` was the last attempt `limit` allowed.
    Exceeded { failed: u32, limit: u32 },
}

/// The MPIJob's `runPolicy.backoffLimit` (absent or negative: 0).
pub(crate) fn backoff_limit(obj: &MpiJob) -> u32 {
    obj.spec
        .run_policy
        .as_ref()
        .and_then(|p| p.backoff_limit)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

/// What follows the failure `f` of attempt `attempt` with the restart budget `limit`.
pub(crate) fn verdict(f: &Failure, attempt: u32, limit: u32) -> Verdict {
    if limit == 0 || f.reason == DEADLINE {
        Verdict::Fail
    } else if attempt < limit {
        Verdict::Restart { failed: attempt }
    } else {
        Verdict::Exceeded {
            failed: attempt,
            limit,
        }
    }
}

/// The attempt of the child `meta` (0 without the label).
pub(crate) fn attempt_of(meta: &ObjectMeta) -> u32 {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(ATTEMPT_LABEL))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// How many attempts failed before the child that runs now, or is made next: the live child's
/// attempt (`child`), else what the status counts (`Launcher.failed`).
pub(crate) fn earlier(child: Option<&ObjectMeta>, status: &MpiJobStatus) -> u32 {
    match child {
        Some(m) => attempt_of(m),
        None => status
            .replica_statuses
            .get("Launcher")
            .and_then(|r| u32::try_from(r.failed).ok())
            .unwrap_or(0),
    }
}

/// Whether the child `meta` (the MPIJob's own) is being deleted: a restart's, or one deleted
/// by hand. It is waited for, and made again once gone.
pub(crate) fn going(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// The seconds left of the MPIJob's `activeDeadlineSeconds` at `now`, counted from its
/// `startTime` (at least 1: a deadline passed fails the next attempt at once).
pub(crate) fn deadline_left(obj: &MpiJob, now: &Time) -> Option<i64> {
    let d = obj.spec.run_policy.as_ref()?.active_deadline_seconds?;
    let start = obj.status.as_ref().and_then(|s| s.start_time.as_ref());
    let spent = start.map_or(0, |s| now.0.duration_since(s.0).as_secs().max(0));
    Some((d - spent).max(1))
}

/// Whether the MPIJob's `activeDeadlineSeconds`, counted from its `startTime`, has passed at
/// `now`.
pub(crate) fn deadline_passed(obj: &MpiJob, now: &Time) -> bool {
    let Some(d) = obj
        .spec
        .run_policy
        .as_ref()
        .and_then(|p| p.active_deadline_seconds)
    else {
        return false;
    };
    let start = obj.status.as_ref().and_then(|s| s.start_time.as_ref());
    start.is_some_and(|s| now.0.duration_since(s.0).as_secs() >= d)
}

/// The failure `f` of a JobSet child, whose reason says only that one of its Jobs failed
/// (`FailedJobs`): on the deadline (`deadline_passed`), the Jobs' own reason, never
/// restarted.
pub(crate) fn of_jobset(f: Failure, deadline_passed: bool) -> Failure {
    if deadline_passed {
        Failure {
            reason: DEADLINE.into(),
            ..f
        }
    } else {
        f
    }
}

/// What the restarts add to `out`, the status of MPIJob `job_id` computed from the child that
/// runs now (or none, while one restarts) at `now`: `Launcher.failed` counts the attempts
/// failed before it (`earlier`); after the failure `f`, as `v` says, `Restarting` with its
/// event, or the `Failed` of [`EXCEEDED`] naming `f` in place of the child's own.
pub(crate) fn apply(
    out: &mut Outcome,
    job_id: &str,
    earlier: u32,
    failed: Option<(&Failure, &Verdict)>,
    now: &Time,
) {
    if let Some(l) = out.status.replica_statuses.get_mut("Launcher") {
        l.failed = l
            .failed
            .saturating_add(i32::try_from(earlier).unwrap_or(i32::MAX));
    }
    match failed {
        Some((f, Verdict::Restart { failed })) => restarting(out, job_id, f, *failed, now),
        Some((f, Verdict::Exceeded { failed, limit })) => {
            exceeded(out, job_id, f, *failed, *limit, now)
        }
        Some((f, Verdict::Fail)) if f.reason == DEADLINE => deadline(out, now),
        _ => {}
    }
}

/// `Failed` with [`DEADLINE`] where the child's own reason is another (a JobSet's, which says
/// only that one of its Jobs failed), as mpi-operator's launcher Job gives it; the child's
/// message and the condition's time stay, and its event takes the reason too.
fn deadline(out: &mut Outcome, now: &Time) {
    let Some(c) = condition(&out.status, "Failed").filter(|c| c.status == "True") else {
        return;
    };
    let own = c.reason.clone().unwrap_or_default();
    if own == DEADLINE {
        return;
    }
    let msg = c.message.clone().unwrap_or_default();
    set(&mut out.status, "Failed", true, DEADLINE, &msg, now);
    for n in out
        .notices
        .iter_mut()
        .filter(|n| n.warning && n.reason == own)
    {
        n.reason = DEADLINE.into();
    }
}

/// "attempt N (REASON): MESSAGE", counting from 1.
fn what_failed(f: &Failure, attempt: u32) -> String {
    let reason = if f.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", f.reason)
    };
    let message = if f.message.is_empty() {
        "failed".to_string()
    } else {
        f.message.clone()
    };
    format!("attempt {}{reason}: {message}", attempt + 1)
}

/// `Restarting` after attempt `failed` failed with `f`, and its event.
fn restarting(out: &mut Outcome, job_id: &str, f: &Failure, failed: u32, now: &Time) {
    let msg = truncate(format!(
        "MPIJob {job_id} is restarting: {}; attempt {} starts, every pod made again",
        what_failed(f, failed),
        failed + 2
    ));
    // A second restart before the first ran is news too.
    let s = &mut out.status;
    s.conditions
        .retain(|c| c.type_ != "Restarting" || c.message.as_deref() == Some(msg.as_str()));
    if set(s, "Restarting", true, RESTARTING, &msg, now) {
        out.notices.push(Notice::warning(RESTARTING, msg));
    }
}

/// `Failed` with [`EXCEEDED`] in place of the child's own failure `f` (and its event's).
fn exceeded(out: &mut Outcome, job_id: &str, f: &Failure, failed: u32, limit: u32, now: &Time) {
    let Some(c) = condition(&out.status, "Failed").filter(|c| c.status == "True") else {
        return;
    };
    let own = c.reason.clone().unwrap_or_default();
    // The condition's message is the child's, evicted pods named besides.
    let last = Failure {
        reason: f.reason.clone(),
        message: c.message.clone().unwrap_or_else(|| f.message.clone()),
    };
    let msg = truncate(format!(
        "MPIJob {job_id} has reached the specified backoff limit ({limit} restarts): {}",
        what_failed(&last, failed)
    ));
    set(&mut out.status, "Failed", true, EXCEEDED, &msg, now);
    for n in out
        .notices
        .iter_mut()
        .filter(|n| n.warning && n.reason == own)
    {
        *n = Notice::warning(EXCEEDED, msg.clone());
    }
}

#[cfg(test)]
mod tests;
