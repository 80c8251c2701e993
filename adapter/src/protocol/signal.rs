//! Signal names, for the `exited` reports of the agent and the launcher's messages.

use nix::sys::signal::Signal;

/// `SIGKILL` for 9, and so on; `"unknown signal"` if the number is not a signal here.
pub(crate) fn signal_name(sig: i32) -> &'static str {
    Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("unknown signal")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
    }
}
