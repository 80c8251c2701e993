//! When `prrte-k8s submit` may spawn its next task. The DVM answers a spawn it cannot place now
//! (every slot taken) with a mapping failure; such a task goes back to the front of the queue
//! and is tried again:
//!
//! - while some of our own tasks run, once any of them leaves (ends, fails to start, is lost or
//!   times out): its slots are then free, or about to be;
//! - when none of ours runs (the slots are another tool's, or our ended tasks' slots are not yet
//!   released by the DVM), after a short pause that doubles up to [`RETRY_PAUSE_MAX`];
//! - and not for ever: a task refused for [`GIVE_UP_AFTER`] fails with the DVM's answer.
//!
//! Every path leads to a spawn or to a result: nothing waits on an event that may not come.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The first pause before a refused task is tried again with nothing of ours running.
pub const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
/// The longest such pause.
pub const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);
/// How long a task may keep being refused for want of room before it fails.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// What to do with a task the DVM had no room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// Queue it again; spawning waits until one of our running tasks leaves.
    RetryWhenOneLeaves,
    /// Queue it again; spawning waits until this instant.
    RetryAt(Instant),
    /// It has been refused for `GIVE_UP_AFTER` (a minute): report it failed.
    GiveUp,
}

/// The spawn gate of one run (see the module documentation).
#[derive(Debug, Default)]
pub struct Admission {
    /// Waiting for one of our running tasks to leave.
    hold: bool,
    /// Waiting for a pause to pass.
    paused_until: Option<Instant>,
    /// Consecutive refusals with nothing of ours running (the pause doubles with each).
    pauses: u32,
    /// When each refused task (by index) was first refused.
    refused: HashMap<usize, Instant>,
}

impl Admission {
    /// Whether another task may be spawned now.
    pub fn may_spawn(&self, now: Instant) -> bool {
        !self.hold && self.paused_until.is_none_or(|t| now >= t)
    }

    /// When a pause ends, if spawning waits for one.
    pub fn paused_until(&self) -> Option<Instant> {
        self.paused_until.filter(|_| !self.hold)
    }

    /// Task `index` was refused for want of room; `running` of ours are still in flight.
    pub fn no_room(&mut self, index: usize, running: usize, now: Instant) -> NoRoom {
        let first = *self.refused.entry(index).or_insert(now);
        if now.saturating_duration_since(first) >= GIVE_UP_AFTER {
            self.refused.remove(&index);
            return NoRoom::GiveUp;
        }
        if running > 0 {
            self.hold = true;
            return NoRoom::RetryWhenOneLeaves;
        }
        // Nothing of ours can leave now: waiting for one would wait for ever.
        self.hold = false;
        let pause = RETRY_PAUSE_MIN
            .saturating_mul(1u32 << self.pauses.min(8))
            .min(RETRY_PAUSE_MAX);
        self.pauses = self.pauses.saturating_add(1);
        let at = now + pause;
        self.paused_until = Some(at);
        NoRoom::RetryAt(at)
    }

    /// One of our running tasks left, for whatever reason: its slots are free or being freed.
    pub fn left(&mut self) {
        self.hold = false;
        self.paused_until = None;
    }

    /// Task `index` was placed (its spawn was answered with a job): its refusals are forgotten.
    pub fn placed(&mut self, index: usize) {
        self.refused.remove(&index);
        self.pauses = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_while_ours_run_waits_for_any_of_them_to_leave() {
        let now = Instant::now();
        let mut a = Admission::default();
        assert!(a.may_spawn(now));
        assert_eq!(a.no_room(7, 3, now), NoRoom::RetryWhenOneLeaves);
        assert!(!a.may_spawn(now + Duration::from_secs(3600)));
        // Whatever way a running task leaves (end, spawn failure, loss, timeout).
        a.left();
        assert!(a.may_spawn(now));
    }

    #[test]
    fn the_last_running_task_failing_to_start_does_not_leave_the_run_held() {
        // Two in flight; the first is refused (one still runs), then the other is refused too
        // with nothing of ours left running: spawning must resume, not wait for an end that
        // cannot come.
        let now = Instant::now();
        let mut a = Admission::default();
        assert_eq!(a.no_room(0, 1, now), NoRoom::RetryWhenOneLeaves);
        let at = match a.no_room(1, 0, now) {
            NoRoom::RetryAt(at) => at,
            other => panic!("{other:?}"),
        };
        assert!(!a.may_spawn(now));
        assert_eq!(a.paused_until(), Some(at));
        assert!(a.may_spawn(at));
    }

    #[test]
    fn pauses_double_up_to_the_cap_and_reset_once_a_task_is_placed() {
        let now = Instant::now();
        let mut a = Admission::default();
        let mut pauses = Vec::new();
        for _ in 0..8 {
            match a.no_room(1, 0, now) {
                NoRoom::RetryAt(at) => pauses.push(at - now),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(pauses[0], RETRY_PAUSE_MIN);
        assert_eq!(pauses[1], RETRY_PAUSE_MIN * 2);
        assert_eq!(*pauses.last().unwrap(), RETRY_PAUSE_MAX);
        a.placed(1);
        assert_eq!(a.no_room(2, 0, now), NoRoom::RetryAt(now + RETRY_PAUSE_MIN));
    }

    #[test]
    fn a_task_refused_too_long_fails_and_others_keep_their_own_clock() {
        let t0 = Instant::now();
        let mut a = Admission::default();
        assert_eq!(a.no_room(4, 2, t0), NoRoom::RetryWhenOneLeaves);
        let later = t0 + GIVE_UP_AFTER;
        assert_eq!(a.no_room(5, 2, later), NoRoom::RetryWhenOneLeaves);
        assert_eq!(a.no_room(4, 2, later), NoRoom::GiveUp);
        // Refused again later, task 4 starts a new clock; task 5 keeps its own.
        assert_eq!(a.no_room(4, 2, later), NoRoom::RetryWhenOneLeaves);
        assert_eq!(a.no_room(5, 2, later + GIVE_UP_AFTER), NoRoom::GiveUp);
    }
}
