//! The DVM head: with `--dvm-head auto|always` the agent of pod 0 (or this pod) starts the DVM
//! itself, so no launcher pod is needed and users run `prrte-k8s prun` from any pod.
//!
//! The agent runs `prte --prtemca ras k8s --prtemca plm k8s --report-uri <dvm-uri-file>
//! --pmixmca ptl_base_if_include <pod IP>/31 --pmixmca ptl_base_ipv4_port <tool port>`
//! (plus `--allow-run-as-root` as root, plus `--prte-arg`s) in its own process group, with the
//! agent's environment, `TMPDIR` set to `--tmpdir`, the secret file and the agent port for the
//! k8s PLM (`PRTE_MCA_plm_k8s_secret_file`, `PRTE_MCA_plm_k8s_agent_port`, unless set: see
//! `AgentConfig::launcher_env`); the k8s PLM inside prte hands prte's URI to
//! every agent it starts prted through. PRRTE 3.0's
//! PMIx tool listener binds to 127.0.0.1 unless told otherwise: `ptl_base_if_include` moves it
//! to the pod address, where `prun --dvm-uri file:...` from other pods reaches it.
//!
//! prte's stdout/stderr go to the agent's (the pod log). Its exit is logged and its URI file
//! removed; it is not restarted (`pterm` stops the DVM for good, the agent keeps serving). When
//! the agent stops, prte's process group is stopped like prted's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::local::{launcher_command, wait_health};
use crate::agent::checked_config::{AgentConfig, HeadConfig};
use crate::agent::dvm_uri::{publish_dvm_uri_dir, unpublish_dvm_uri};
use crate::agent::process::Reaper;
use crate::agent::tracking::Tracking;

/// prte's command line (after the executable).
pub fn prte_args(head: &HeadConfig, config: &AgentConfig, root: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "--prtemca",
        "ras",
        "k8s",
        "--prtemca",
        "plm",
        "k8s",
        "--report-uri",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(config.dvm_uri_file.display().to_string());
    args.extend([
        "--pmixmca".to_string(),
        "ptl_base_if_include".into(),
        // Not /32: PMIx 5.0.5 computes the /32 netmask as `(1 << 32) - 1`, which is 0 on x86,
        // so a /32 matches every interface (loopback first). A /31 holds the pod IP and one
        // neighbour address, which no other interface of a pod has.
        format!("{}/31", head.pod_ip),
        "--pmixmca".into(),
        "ptl_base_ipv4_port".into(),
        head.tool_port.to_string(),
    ]);
    if root {
        args.push("--allow-run-as-root".into());
    }
    args.extend(head.extra_args.iter().cloned());
    args
}

/// Runs the DVM head until prte ends or `stop` is cancelled (then stops prte's group); `up`
/// is true while prte runs.
pub async fn run(
    head: HeadConfig,
    config: AgentConfig,
    reaper: Arc<Reaper>,
    tracking: Tracking,
    health: Option<SocketAddr>,
    stop: CancellationToken,
    up: Arc<AtomicBool>,
) {
    wait_health(health, &stop).await;
    if stop.is_cancelled() {
        return;
    }
    let uri_file = config.dvm_uri_file.clone();
    // A stale URI (from an earlier prte in this pod) must not send tools to a dead address; a
    // file naming another address is not ours to remove.
    let stale_own = std::fs::read_to_string(&uri_file).is_ok_and(|t| {
        t.trim()
            .rsplit_once("tcp4://")
            .and_then(|(_, hp)| hp.rsplit_once(':'))
            .is_some_and(|(h, _)| h == head.pod_ip.to_string())
    });
    if stale_own {
        unpublish_dvm_uri(&uri_file, None);
    }
    let spawned_at = std::time::SystemTime::now();
    publish_dvm_uri_dir(&uri_file);
    let root = nix::unistd::geteuid().is_root();
    let args = prte_args(&head, &config, root);
    let mut cmd = launcher_command(&head.prte, &args, &config, None);
    let mut job = match reaper.spawn_job(&mut cmd, &tracking) {
        Ok(j) => j,
        Err(e) => {
            error!(prte = %head.prte.display(), error = %e, "cannot start the DVM head (prte)");
            return;
        }
    };
    let pid = job.pid;
    up.store(true, Ordering::SeqCst);
    info!(pid, prte = %head.prte.display(), args = ?args, reason = %head.reason, "started the DVM head (prte)");
    let started = Instant::now();
    tokio::select! {
        status = job.wait_exit() => {
            up.store(false, Ordering::SeqCst);
            info!(pid, %status, ran_ms = started.elapsed().as_millis() as u64, "the DVM head (prte) exited; the agent keeps serving");
            // Stop whatever prte left in its process group.
            job.terminate(config.kill_grace, &reaper).await;
        }
        _ = stop.cancelled() => {
            let status = job.terminate(config.kill_grace, &reaper).await;
            info!(pid, %status, "stopped the DVM head (prte)");
        }
    }
    // Only the file prte wrote (--report-uri) while it ran: modified after it started.
    let written_by_prte = std::fs::symlink_metadata(&uri_file)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= spawned_at);
    if written_by_prte {
        unpublish_dvm_uri(&uri_file, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn prte_command_line() {
        let head = HeadConfig {
            prte: "/opt/p/bin/prte".into(),
            pod_ip: "10.0.0.7".parse().unwrap(),
            tool_port: 7120,
            extra_args: vec![
                "--prtemca".into(),
                "oob_tcp_dynamic_ipv4_ports".into(),
                "7121".into(),
            ],
            reason: "test".into(),
        };
        let config = AgentConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            health_listen: None,
            metrics_listen: None,
            prted: "/opt/p/bin/prted".into(),
            secret: None,
            secret_file: "/s".into(),
            tmpdir: "/tmp".into(),
            kill_grace: Duration::from_secs(1),
            preempt_grace: Duration::ZERO,
            max_frame: 4096,
            pass_env: vec![],
            dvm_uri_file: "/var/run/prrte-k8s/dvm.uri".into(),
            head: Some(head.clone()),
            batch: None,
            cgroup: false,
            limits: Default::default(),
            heartbeat_timeout: None,
            mpi: None,
        };
        let a = prte_args(&head, &config, true).join(" ");
        assert_eq!(
            a,
            "--prtemca ras k8s --prtemca plm k8s --report-uri /var/run/prrte-k8s/dvm.uri \
             --pmixmca ptl_base_if_include 10.0.0.7/31 --pmixmca ptl_base_ipv4_port 7120 \
             --allow-run-as-root --prtemca oob_tcp_dynamic_ipv4_ports 7121"
        );
        assert!(!prte_args(&head, &config, false).contains(&"--allow-run-as-root".to_string()));
    }
}
