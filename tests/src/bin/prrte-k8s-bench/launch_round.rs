//! The launcher's own account of a DVM start (plm k8s, on `plm_base_verbose 2`): one line per
//! launch round, how long the connections with their handshakes took and how long the agents
//! took from the request until prted started (median and max over the pods). It splits the
//! agent method's fan-out, which the prteds' start times see only as a whole.

/// One launch round as the launcher printed it, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaunchRound {
    /// Whether the line was found (the other methods have none).
    pub seen: bool,
    /// From the round's start until every pod's prted started (or failed).
    pub total: f64,
    pub connect_median: f64,
    pub connect_max: f64,
    pub start_median: f64,
    pub start_max: f64,
}

/// The number before `" s"` right after `key` in `line`.
fn seconds_after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.trim_start().split(' ').next()?.parse().ok()
}

/// The first launch round in prte's output (the DVM's start), if the launcher printed one.
pub fn first_round(output: &str) -> Option<LaunchRound> {
    let line = output.lines().find(|l| l.contains("launch round: "))?;
    let step = |name: &str| {
        let at = line.find(name)?;
        let part = &line[at..];
        Some((seconds_after(part, "median")?, seconds_after(part, "max")?))
    };
    let (connect_median, connect_max) = step("connection and handshake")?;
    let (start_median, start_max) = step("request to prted started")?;
    Some(LaunchRound {
        seen: true,
        total: seconds_after(line, " failed, in")?,
        connect_median,
        connect_max,
        start_median,
        start_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_launchers_line() {
        let out = "DVM ready\n[w-0:12] plm:k8s: prted started in pod w-1 by the agent\n\
            [w-0:12] plm:k8s: launch round: 63 prted(s) started, 0 failed, in 0.352 s; \
            connection and handshake median 0.120 s, max 0.250 s; request to prted started \
            median 0.030 s, max 0.090 s\n[w-0:12] plm:k8s: launch round: 1 prted(s) started, \
            0 failed, in 9.000 s; connection and handshake median 9.000 s, max 9.000 s; \
            request to prted started median 9.000 s, max 9.000 s\n";
        let r = first_round(out).expect("a round");
        assert_eq!(
            r,
            LaunchRound {
                seen: true,
                total: 0.352,
                connect_median: 0.12,
                connect_max: 0.25,
                start_median: 0.03,
                start_max: 0.09,
            }
        );
    }

    #[test]
    fn no_round_without_the_line_or_with_a_round_where_every_pod_failed() {
        assert_eq!(first_round("DVM ready\n"), None);
        assert_eq!(
            first_round("plm:k8s: launch round: 0 prted(s) started, 2 failed, in 1.000 s\n"),
            None
        );
    }
}
