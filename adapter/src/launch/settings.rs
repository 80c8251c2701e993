//! What a round of daemon launches is configured with: the PLM's parameters as set, checked
//! (with the per-job secret read) before anything is sent, and the DVM URI the agents publish.

use std::time::Duration;

use super::error::SettingsError;
use super::request::LaunchOptions;
use crate::protocol::{self, liveness::Heartbeat};
use crate::settings::mca::PlmParams;

/// Grace period between SIGTERM and SIGKILL the launcher asks of the agents when it stops its
/// daemons.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(5);

/// The checked settings of one round.
#[derive(Debug, Clone)]
pub(crate) struct RoundSettings {
    /// The agents' port.
    pub port: u16,
    /// The launcher's options (the secret included).
    pub options: LaunchOptions,
    /// How long every daemon of the round has to report back (the startup timeout PRRTE lacks).
    pub startup_timeout: Duration,
    /// The signal ranks get on a preemption notice (`plm_k8s_preempt_signal`), if any.
    pub preempt_signal: Option<i32>,
}

/// Checks the `plm_k8s_*` parameters as they are set, as the registry does
/// ([`PlmParams::check`]: ports and timeouts in
/// range, the two names of the agent port and of the secret file agreeing in `env`), then reads
/// the secret (unless insecure); the error names the parameter and what it must be.
pub fn check(
    params: &PlmParams,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RoundSettings, SettingsError> {
    let checked = params.check(env)?;
    let secret = match &checked.secret_file {
        None => None,
        Some(file) => {
            Some(
                protocol::read_secret_file(file).map_err(|source| SettingsError::Secret {
                    file: file.clone(),
                    source,
                })?,
            )
        }
    };
    Ok(RoundSettings {
        port: checked.agent_port,
        options: LaunchOptions {
            secret,
            connect_timeout: checked.connect_timeout,
            request_timeout: checked.launch_timeout,
            kill_grace: KILL_GRACE,
            heartbeat: Heartbeat {
                interval: checked.heartbeat_interval,
                misses: checked.heartbeat_misses,
            },
        },
        startup_timeout: checked.launch_timeout,
        preempt_signal: checked.preempt_signal,
    })
}

/// prte's PMIx tool URI, if the agents can publish it for other pods: a well-formed URI
/// ([`protocol::validate_dvm_uri`]) that is not on the loopback network.
pub(crate) fn reachable_dvm_uri(uri: Option<String>) -> Option<String> {
    uri.filter(|u| protocol::validate_dvm_uri(u).is_ok() && !u.contains("tcp4://127."))
}

/// The message for a round without a DVM URI to publish.
pub(crate) const NO_DVM_URI: &str = "plm:k8s: prte's tool listener is not reachable from other pods (set --pmixmca ptl_base_if_include to the pod network); no DVM URI published";

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn check(s: &PlmParams) -> Result<RoundSettings, String> {
        super::check(s, &|_| None).map_err(|e| e.to_string())
    }

    fn params(secret_file: Option<&Path>) -> PlmParams {
        PlmParams {
            secret_file: secret_file.map(|p| p.display().to_string()),
            agent_port: 7117,
            launch_timeout: 60,
            connect_timeout: 10,
            heartbeat_interval: 2,
            heartbeat_misses: 4,
            insecure: false,
            preempt_signal: None,
            priority: 0,
        }
    }

    const KEY: &[u8; 32] = b"9f2c7a1e5b3d8046c2e9a7f1b5d3c8e0";

    fn secret_file() -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), KEY).unwrap();
        f
    }

    #[test]
    fn good_settings_give_the_launchers_options() {
        let f = secret_file();
        let r = check(&params(Some(f.path()))).unwrap();
        assert_eq!(r.port, 7117);
        assert_eq!(r.options.secret.as_deref(), Some(&KEY[..]));
        assert_eq!(r.options.connect_timeout, Duration::from_secs(10));
        assert_eq!(r.options.request_timeout, Duration::from_secs(60));
        assert_eq!(r.options.kill_grace, KILL_GRACE);
        assert_eq!(
            r.options.heartbeat.silence_limit(),
            Some(Duration::from_secs(8)),
            "a cut-off pod is noticed within 10 s"
        );
        assert_eq!(r.startup_timeout, Duration::from_secs(60));
    }

    #[test]
    fn insecure_reads_no_secret() {
        let mut s = params(Some(Path::new("/nonexistent/prrte-k8s/key")));
        s.insecure = true;
        assert!(check(&s).unwrap().options.secret.is_none());
    }

    #[test]
    fn a_missing_secret_names_the_parameter_and_the_file() {
        let e = check(&params(Some(Path::new("/nonexistent/prrte-k8s/key")))).unwrap_err();
        assert!(
            e.contains("does not exist")
                && e.contains("(parameter plm_k8s_secret_file = /nonexistent/prrte-k8s/key)"),
            "{e}"
        );
        let e = check(&params(None)).unwrap_err();
        assert!(e.contains("(parameter plm_k8s_secret_file = )"), "{e}");
    }

    #[test]
    fn bad_ports_and_timeouts_are_refused_naming_the_parameter() {
        let f = secret_file();
        for port in [0, -1, 65536] {
            let mut s = params(Some(f.path()));
            s.agent_port = port;
            let e = check(&s).unwrap_err();
            assert!(
                e.contains("plm_k8s_agent_port") && e.contains(&format!("\"{port}\"")),
                "{e}"
            );
        }
        for (launch, connect) in [(0, 10), (60, 0), (-5, 10), (60, -1)] {
            let mut s = params(Some(f.path()));
            s.launch_timeout = launch;
            s.connect_timeout = connect;
            let e = check(&s).unwrap_err();
            let bad = if launch <= 0 {
                "plm_k8s_launch_timeout"
            } else {
                "plm_k8s_connect_timeout"
            };
            assert!(
                e.contains(bad) && e.contains("positive number of seconds"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_values_are_checked_before_the_secret_is_read() {
        let mut s = params(Some(Path::new("/nonexistent/prrte-k8s/key")));
        s.agent_port = 0;
        assert!(check(&s).unwrap_err().contains("plm_k8s_agent_port"));
    }

    #[test]
    fn the_two_names_of_the_port_must_agree() {
        let f = secret_file();
        let env = |k: &str| match k {
            "PRRTE_K8S_AGENT_PORT" => Some("9000".to_string()),
            "PRTE_MCA_plm_k8s_agent_port" => Some("9001".to_string()),
            _ => None,
        };
        let e = super::check(&params(Some(f.path())), &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("PRRTE_K8S_AGENT_PORT"), "{e}");
    }

    #[test]
    fn only_a_valid_uri_off_loopback_is_published() {
        let good = "prte-x-1@0.0;tcp4://10.250.0.2:7120".to_string();
        assert_eq!(reachable_dvm_uri(Some(good.clone())), Some(good));
        assert_eq!(
            reachable_dvm_uri(Some("prte-x-1@0.0;tcp4://127.0.0.1:7120".into())),
            None
        );
        assert_eq!(reachable_dvm_uri(Some("garbage".into())), None);
        assert_eq!(reachable_dvm_uri(None), None);
    }
}
