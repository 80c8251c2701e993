//! The fan-out harness of `make bench-scale` (adapter/benches/support/fanout.rs) really
//! authenticates: real agents started with another secret refuse every launch, and the harness
//! reports the round as a failure (it can fail); with the agents' own secret the same harness
//! launches through every agent.
#![forbid(unsafe_code)]

#[path = "../benches/support/fanout.rs"]
#[allow(dead_code)]
mod fanout;

use std::path::Path;
use std::time::Duration;

use fanout::{fanout_round, run_round, secret_file, start_agents};

const AGENTS: usize = 8;
const TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn agents_with_another_secret_refuse_and_the_round_fails() {
    let dir = tempfile::Builder::new()
        .prefix("prrte-k8s-fanout-auth-")
        .tempdir()
        .unwrap();
    let (secret_path, secret) = secret_file(dir.path()).unwrap();
    let agents = start_agents(AGENTS, dir.path(), &secret_path, Path::new("/bin/true")).unwrap();

    // Another secret of the same length and form (64 hex digits).
    let mut wrong = secret.clone();
    wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
    assert_ne!(wrong, secret);

    let o = run_round(&agents, &wrong, TIMEOUT);
    assert!(!o.timed_out, "every target must get its final event");
    assert_eq!(o.started, 0, "no agent may start prted for a wrong secret");
    assert_eq!(o.failed.len(), AGENTS, "every launch fails: {:?}", o.failed);
    for reason in &o.failed {
        assert!(
            reason.contains("authentication failed") && reason.contains("refused the launcher"),
            "the reason names the refusal: {reason}"
        );
    }
    assert!(o.all_started.is_none() && o.all_exited.is_none());
    let err = fanout_round(&agents, &wrong, TIMEOUT)
        .err()
        .expect("the harness reports a round with a wrong secret as a failure");
    let err = err.to_string();
    assert!(
        err.contains(&format!("{AGENTS} of {AGENTS} launches failed"))
            && err.contains("authentication failed"),
        "{err}"
    );
    // Every agent logged the refusal itself.
    for i in 0..AGENTS {
        let log = std::fs::read_to_string(dir.path().join(format!("agent-{i}.log"))).unwrap();
        assert!(
            log.contains("authentication failed"),
            "agent {i} did not log the refusal: {log}"
        );
    }

    // The same agents, with their secret: every launch starts and exits 0.
    let r = fanout_round(&agents, &secret, TIMEOUT).expect("a round with the agents' secret");
    assert!(r.all_started <= r.all_exited);
}
