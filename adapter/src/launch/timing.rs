//! Where a launch round's time goes, from the launcher's side: for every target, the
//! connection to its agent with the handshake, then the launch request until the agent says
//! prted started. Once every target has had its first event, one line sums the round up (on
//! `plm_base_verbose 2`), so that an admin, or the launch benchmark, sees whether the
//! connections or the agents' starts of prted are the slow part.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The first events of one launch round, as they come.
pub(super) struct RoundTimes {
    inner: Mutex<Inner>,
}

struct Inner {
    begun: Instant,
    pending: usize,
    connect: Vec<Duration>,
    start: Vec<Duration>,
    failed: usize,
}

impl RoundTimes {
    /// A round of `targets` launches, begun now.
    pub(super) fn new(targets: usize) -> RoundTimes {
        RoundTimes {
            inner: Mutex::new(Inner {
                begun: Instant::now(),
                pending: targets,
                connect: Vec::with_capacity(targets),
                start: Vec::with_capacity(targets),
                failed: 0,
            }),
        }
    }

    /// A target's prted started: `connect` to connect and authenticate, `start` from the
    /// request to the agent's answer. The round's summary once it was the last first event.
    pub(super) fn started(&self, connect: Duration, start: Duration) -> Option<RoundSummary> {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        i.connect.push(connect);
        i.start.push(start);
        i.done_one()
    }

    /// A target failed before prted started.
    pub(super) fn failed(&self) -> Option<RoundSummary> {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        i.failed += 1;
        i.done_one()
    }
}

impl Inner {
    fn done_one(&mut self) -> Option<RoundSummary> {
        self.pending = self.pending.checked_sub(1)?;
        if self.pending > 0 {
            return None;
        }
        Some(RoundSummary {
            started: self.start.len(),
            failed: self.failed,
            total: self.begun.elapsed(),
            connect: Spread::of(&mut self.connect),
            start: Spread::of(&mut self.start),
        })
    }
}

/// The median and the largest of a set of durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    pub median: Duration,
    pub max: Duration,
}

impl Spread {
    /// `None` for an empty set; the upper median of an even one.
    fn of(v: &mut [Duration]) -> Option<Spread> {
        v.sort_unstable();
        Some(Spread {
            median: *v.get(v.len() / 2)?,
            max: *v.last()?,
        })
    }
}

/// A launch round summed up: how many prteds started and failed, how long until the last first
/// event, and the spread of each step over the started ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundSummary {
    pub started: usize,
    pub failed: usize,
    pub total: Duration,
    pub connect: Option<Spread>,
    pub start: Option<Spread>,
}

impl fmt::Display for RoundSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "launch round: {} prted(s) started, {} failed, in {:.3} s",
            self.started,
            self.failed,
            self.total.as_secs_f64()
        )?;
        let mut step = |name: &str, s: &Option<Spread>| match s {
            Some(s) => write!(
                f,
                "; {name} median {:.3} s, max {:.3} s",
                s.median.as_secs_f64(),
                s.max.as_secs_f64()
            ),
            None => Ok(()),
        };
        step("connection and handshake", &self.connect)?;
        step("request to prted started", &self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_summary_comes_with_the_last_first_event_only() {
        let r = RoundTimes::new(3);
        assert!(r.started(ms(30), ms(5)).is_none());
        assert!(r.failed().is_none());
        let s = r
            .started(ms(10), ms(7))
            .expect("the last first event sums up");
        assert_eq!((s.started, s.failed), (2, 1));
        assert_eq!(
            s.connect,
            Some(Spread {
                median: ms(30),
                max: ms(30)
            })
        );
        assert_eq!(s.start.map(|s| (s.median, s.max)), Some((ms(7), ms(7))));
        // Nothing more after the round is summed up.
        assert!(r.failed().is_none());
    }

    #[test]
    fn the_line_names_each_step_and_leaves_out_what_did_not_happen() {
        let r = RoundTimes::new(4);
        for (c, s) in [(40, 2), (10, 9), (20, 3)] {
            assert!(r.started(ms(c), ms(s)).is_none());
        }
        let line = r.started(ms(30), ms(1)).unwrap().to_string();
        assert!(
            line.starts_with("launch round: 4 prted(s) started, 0 failed, in "),
            "{line}"
        );
        assert!(
            line.contains("; connection and handshake median 0.030 s, max 0.040 s"),
            "{line}"
        );
        assert!(
            line.ends_with("; request to prted started median 0.003 s, max 0.009 s"),
            "{line}"
        );
        let all_failed = RoundTimes::new(1).failed().unwrap().to_string();
        assert!(
            all_failed.starts_with("launch round: 0 prted(s) started, 1 failed, in "),
            "{all_failed}"
        );
        assert!(!all_failed.contains("median"), "{all_failed}");
    }
}
