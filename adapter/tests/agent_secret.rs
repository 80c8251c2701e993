//! The per-job secret as the agent reads it: a key file others could replace, or a key that
//! is no secret at all, keeps the agent from starting; one others can read is a warning.
#![forbid(unsafe_code)]
mod agent_support;

use agent_support::*;

/// A secret others could replace (a key file writable by group or others) or guess (one byte
/// repeated, a short block repeated, a run of bytes) keeps the agent from starting, naming the
/// cause and the remedy; one others can read (Kubernetes' default mode 0644) is served with a
/// loud warning.
#[tokio::test]
async fn a_secret_others_could_replace_or_guess_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let td = TestDir::new();
    let set = |bytes: &[u8], mode: u32| {
        std::fs::write(&td.secret_file, bytes).unwrap();
        std::fs::set_permissions(&td.secret_file, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let refused = |why: &str| {
        let args = AgentProc::test_args(&td, &[]);
        match AgentProc::spawn_args(&args, &[]) {
            Ok(_) => panic!("the agent started with a secret that {why}"),
            Err((code, logs)) => {
                assert_eq!(code, 2, "{logs}");
                logs
            }
        }
    };
    for mode in [0o666, 0o662, 0o620] {
        set(&td.secret, mode);
        let logs = refused("others can change");
        assert!(
            logs.contains("can be changed by") && logs.contains("defaultMode"),
            "{logs}"
        );
    }
    for key in [
        b"k".repeat(40),
        b"0123456789".repeat(4),
        (0u8..48).map(|b| b'0' + b).collect::<Vec<_>>(),
    ] {
        set(&key, 0o400);
        let logs = refused("is guessable");
        assert!(
            logs.contains("is no secret") && logs.contains("--from-file"),
            "{logs}"
        );
    }
    set(&td.secret, 0o644);
    let agent = AgentProc::spawn(&td, &[]);
    assert!(
        agent
            .wait_log(WAIT, |v| v["message"].as_str().is_some_and(
                |m| m.contains("WARNING: the job's secret can be read")
            ))
            .is_some(),
        "{:?}",
        agent.logs()
    );
    assert_idle(agent.addr, &td.secret).await;
}
