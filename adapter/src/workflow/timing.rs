//! Where a task's time goes, as the submitting process sees it: from the spawn request to the
//! DVM's answer naming the job (prte has mapped it and sent the launch message to its daemons),
//! from there to the job's end as reported to the tool (the daemons forked, the ranks ran and
//! exited, the daemons reported, prte notified), and from the spawn request to the task's result
//! (handed over as its end is seen). `prrte-k8s submit` prints them once at the end of a run as
//! medians and 99th percentiles.

use std::time::Duration;

/// The phases of one task's life that the tool can time.
#[derive(Debug, Default, Clone)]
pub struct PhaseTimes {
    /// Spawn request → spawn answered (the job's namespace known).
    launched: Vec<Duration>,
    /// Spawn answered → end reported (with the pods it ran in).
    ran: Vec<Duration>,
    /// Spawn request → result handed over.
    total: Vec<Duration>,
}

/// The `q`-quantile (0..=1) of `v`, nearest rank; `None` when `v` is empty.
pub fn quantile(v: &[Duration], q: f64) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((q.clamp(0.0, 1.0) * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s.get(rank - 1).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

impl PhaseTimes {
    /// One task that ran to its end: `launched` after the request, `ended` after the request
    /// (its end reported), `total` after the request (its result written).
    pub fn record(&mut self, launched: Option<Duration>, ended: Duration, total: Duration) {
        if let Some(l) = launched {
            self.launched.push(l);
            self.ran.push(ended.saturating_sub(l));
        }
        self.total.push(total);
    }

    /// How many tasks were recorded.
    pub fn len(&self) -> usize {
        self.total.len()
    }

    pub fn is_empty(&self) -> bool {
        self.total.is_empty()
    }

    /// `per task (median/p99 ms): spawn answered 3.1/9.0, ran 12.0/40.2, result 15.3/50.0`.
    pub fn summary(&self) -> String {
        let pair = |v: &[Duration]| format!("{}/{}", ms(quantile(v, 0.5)), ms(quantile(v, 0.99)));
        format!(
            "per task (median/p99 ms): spawn answered {}, launch to end {}, request to result {}",
            pair(&self.launched),
            pair(&self.ran),
            pair(&self.total)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(quantile(&v, 0.5), Some(ms(50)));
        assert_eq!(quantile(&v, 0.99), Some(ms(99)));
        assert_eq!(quantile(&v, 1.0), Some(ms(100)));
        assert_eq!(quantile(&v, 0.0), Some(ms(1)));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[ms(7)], 0.99), Some(ms(7)));
    }

    #[test]
    fn phases_split_at_the_launch_and_summarise() {
        let mut p = PhaseTimes::default();
        p.record(Some(ms(2)), ms(12), ms(13));
        p.record(Some(ms(4)), ms(24), ms(26));
        p.record(None, ms(30), ms(31));
        assert_eq!(p.len(), 3);
        assert_eq!(p.ran, vec![ms(10), ms(20)]);
        assert_eq!(
            p.summary(),
            "per task (median/p99 ms): spawn answered 2.0/4.0, launch to end 10.0/20.0, \
             request to result 26.0/31.0"
        );
        assert_eq!(
            PhaseTimes::default().summary(),
            "per task (median/p99 ms): spawn answered -/-, launch to end -/-, request to result -/-"
        );
    }
}
