//! prted's command line as the agent starts it: the request's arguments (as the launch policy
//! admitted them) and the flags the agent always adds.

/// prted's flag that keeps it from forking into a new session (`setsid()`), which would take
/// the daemon out of the agent's sight (its pid would no longer be the daemon's); always passed.
pub(crate) const LEAVE_SESSION_ATTACHED: &str = "--leave-session-attached";
/// prted's flag that makes it call `setsid()` itself, without forking, before anything else:
/// the daemon becomes the leader of its own session and process group (pid = pgid = sid), as a
/// prted started through ssh is. Always passed. A session of its own matters for CPU: with the
/// kernel's autogroup scheduling (`sched_autogroup_enabled`, the default of most distributions,
/// in effect wherever the tasks are in the root CPU cgroup) every session is one scheduling
/// entity, so a prted left in the agent's session shared one CPU share with every process of
/// that session (in a sandbox of pods as namespaces: all the pods' agents and daemons), and its
/// jobs' ranks started late on a loaded machine.
pub(crate) const SET_SID: &str = "--set-sid";

/// The arguments prted is started with: the request's (as the launch policy admitted them),
/// then [`LEAVE_SESSION_ATTACHED`] and [`SET_SID`] unless the request has them already.
pub(crate) fn prted_args(argv: &[String]) -> Vec<String> {
    let mut out = argv.to_vec();
    for flag in [LEAVE_SESSION_ATTACHED, SET_SID] {
        if !argv.iter().any(|a| a == flag) {
            out.push(flag.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn both_flags_are_added_once() {
        let base = s(&["--prtemca", "ess", "env"]);
        let want = s(&["--prtemca", "ess", "env", LEAVE_SESSION_ATTACHED, SET_SID]);
        assert_eq!(prted_args(&base), want);
        let with = s(&["--leave-session-attached", "--prtemca", "ess", "env"]);
        assert_eq!(
            prted_args(&with),
            s(&[
                "--leave-session-attached",
                "--prtemca",
                "ess",
                "env",
                SET_SID
            ])
        );
        let both = prted_args(&prted_args(&base));
        assert_eq!(both, want, "adding twice changes nothing");
    }
}
