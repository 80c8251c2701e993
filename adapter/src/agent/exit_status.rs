//! How a process the agent started ended, as the agent logs it and reports it (`exited`).

use std::fmt;

use crate::protocol::{signal_name, Reply};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => write!(f, "signal {s} ({})", signal_name(*s)),
        }
    }
}

/// The `exited` reply reporting that process `pid` ended with `status`; `told_to_end`: the
/// agent stopped it because its pod was told to end by that signal while the DVM was up.
pub(crate) fn exited_reply(pid: u32, status: ExitStatus, told_to_end: Option<i32>) -> Reply {
    let (code, signal) = match status {
        ExitStatus::Code(c) => (Some(c), None),
        ExitStatus::Signal(s) => (None, Some(s)),
    };
    Reply::Exited {
        pid,
        code,
        signal,
        told_to_end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_names_the_signal() {
        assert_eq!(ExitStatus::Signal(9).to_string(), "signal 9 (SIGKILL)");
        assert_eq!(ExitStatus::Code(3).to_string(), "exit code 3");
    }
}
