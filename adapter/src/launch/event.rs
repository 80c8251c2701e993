//! What the launcher reports through its sink: each target's [`LaunchEvent`]s and how a started
//! prted ended ([`ExitDesc`]).

use std::fmt;

use crate::protocol;

/// How a started prted ended, as far as the launcher knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitDesc {
    /// prted exited with this code.
    Code(i32),
    /// prted was killed by this signal.
    Signal(i32),
    /// The pod's agent was told to end by `signal` (the pod deleted, evicted or preempted)
    /// while the DVM ran, and stopped prted, which then ended with `prted` (a
    /// [`Code`](ExitDesc::Code) or a [`Signal`](ExitDesc::Signal)): not PRRTE's doing,
    /// whatever that status is.
    PodToldToEnd { signal: i32, prted: Box<ExitDesc> },
    /// The agent connection ended before an exit was reported (the agent stops prted then).
    ConnectionLost(String),
    /// The launcher itself closed the connection (its shutdown wait ran out, or it was dropped)
    /// before the agent reported an exit; the agent stops prted when the connection ends.
    ClosedByLauncher,
}

impl ExitDesc {
    /// How an `exited` reply describes prted's end; `None` when it has no status.
    pub fn of_exited(
        code: Option<i32>,
        signal: Option<i32>,
        told_to_end: Option<i32>,
    ) -> Option<ExitDesc> {
        let prted = match (code, signal) {
            (Some(c), _) => ExitDesc::Code(c),
            (None, Some(s)) => ExitDesc::Signal(s),
            (None, None) => return None,
        };
        Some(match told_to_end {
            Some(signal) => ExitDesc::PodToldToEnd {
                signal,
                prted: Box::new(prted),
            },
            None => prted,
        })
    }

    /// The connection ended without an exit status, whoever ended it.
    pub(crate) fn connection_ended(&self) -> bool {
        matches!(
            self,
            ExitDesc::ConnectionLost(_) | ExitDesc::ClosedByLauncher
        )
    }
}

impl fmt::Display for ExitDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitDesc::Code(c) => write!(f, "exit code {c}"),
            ExitDesc::Signal(s) => {
                write!(f, "killed by signal {s} ({})", protocol::signal_name(*s))
            }
            ExitDesc::PodToldToEnd { signal, prted } => write!(
                f,
                "its pod was told to end ({}: deleted, evicted or preempted) and its agent \
                 stopped it ({prted})",
                protocol::signal_name(*signal)
            ),
            ExitDesc::ConnectionLost(why) => write!(f, "agent connection lost: {why}"),
            ExitDesc::ClosedByLauncher => write!(
                f,
                "agent connection lost: the launcher closed the connection before the agent \
                 reported prted's exit (the agent stops prted when the connection ends)"
            ),
        }
    }
}

/// Progress of one target, reported through the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchEvent {
    Started {
        id: u32,
        pod: String,
        pid: u32,
    },
    Failed {
        id: u32,
        pod: String,
        reason: String,
    },
    Exited {
        id: u32,
        pod: String,
        status: ExitDesc,
    },
    /// The pod's agent was told to end (SIGTERM): it keeps prted running `seconds` more.
    /// Not a final event; may come between `Started` and `Exited`.
    Preempt {
        id: u32,
        pod: String,
        seconds: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_desc_display() {
        assert_eq!(ExitDesc::Code(3).to_string(), "exit code 3");
        assert_eq!(
            ExitDesc::Signal(9).to_string(),
            "killed by signal 9 (SIGKILL)"
        );
        let told = ExitDesc::of_exited(Some(0), None, Some(15)).unwrap();
        assert_eq!(
            told.to_string(),
            "its pod was told to end (SIGTERM: deleted, evicted or preempted) and its agent \
             stopped it (exit code 0)"
        );
        assert_eq!(
            ExitDesc::of_exited(None, Some(9), None),
            Some(ExitDesc::Signal(9))
        );
        assert_eq!(ExitDesc::of_exited(None, None, Some(15)), None);
        assert_eq!(
            ExitDesc::ConnectionLost("reset".into()).to_string(),
            "agent connection lost: reset"
        );
    }
}
