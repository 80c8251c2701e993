//! Asking an image's MPI programs what they are (`prte_info`, `--version`): each run bounded in
//! time, stdin from `/dev/null`, stdout and stderr captured together.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// How long one probe may run before it is killed.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a probe printed and whether it exited 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probed {
    pub ok: bool,
    /// stdout, then stderr.
    pub text: String,
}

/// Why a probe told nothing: its program (as run, with its arguments) could not be started or
/// did not end in time.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("cannot run `{run}`: {source}")]
    Start { run: String, source: std::io::Error },
    #[error("`{run}` did not end within {timeout:?}")]
    Timeout { run: String, timeout: Duration },
}

/// None of the probes of an installation could run: each one's reason, in order.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub(crate) struct ProbesFailed(pub Vec<ProbeError>);

/// Runs `program args` (bounded by `timeout`, killed after it). `Err` when it cannot be started
/// or did not end in time, naming the program and why.
pub async fn probe(program: &Path, args: &[&str], timeout: Duration) -> Result<Probed, ProbeError> {
    let shown = format!("{} {}", program.display(), args.join(" "));
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The agent's own settings are nothing the MPI's programs need to see.
        .env_remove("PRRTE_K8S_SECRET_FILE")
        .kill_on_drop(true);
    let out = match tokio::time::timeout(timeout, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(source)) => {
            return Err(ProbeError::Start {
                run: shown.trim().to_owned(),
                source,
            })
        }
        Err(_) => {
            return Err(ProbeError::Timeout {
                run: shown.trim().to_owned(),
                timeout,
            })
        }
    };
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(Probed {
        ok: out.status.success(),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[tokio::test]
    async fn output_status_and_bounds() {
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "v", "echo out; echo err >&2; exit 3");
        let r = probe(&p, &[], PROBE_TIMEOUT).await.unwrap();
        assert!(!r.ok);
        assert_eq!(r.text, "out\nerr\n");
        let slow = script(d.path(), "slow", "exec sleep 30");
        let t0 = std::time::Instant::now();
        let e = probe(&slow, &["--version"], Duration::from_millis(200))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not end within"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
        let e = probe(&d.path().join("missing"), &[], PROBE_TIMEOUT)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot run") && e.contains("missing"), "{e}");
    }
}
