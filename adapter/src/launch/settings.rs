//! What a round of daemon launches is configured with: the PLM's parameters as set, checked
//! (with the per-job secret read) before anything is sent, and the DVM URI the agents publish.

use std::path::Path;
use std::time::Duration;

use super::LaunchOptions;
use crate::protocol;

/// Grace period between SIGTERM and SIGKILL the launcher asks of the agents when it stops its
/// daemons.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// The `plm_k8s_*` parameters a round uses, as they are set (not yet checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlmSettings {
    /// `plm_k8s_secret_file`.
    pub secret_file: Option<String>,
    /// `plm_k8s_agent_port`.
    pub agent_port: i32,
    /// `plm_k8s_launch_timeout`, seconds.
    pub launch_timeout: i32,
    /// `plm_k8s_connect_timeout`, seconds.
    pub connect_timeout: i32,
    /// `plm_k8s_insecure`.
    pub insecure: bool,
}

/// The checked settings of one round.
#[derive(Debug, Clone)]
pub struct RoundSettings {
    /// The agents' port.
    pub port: u16,
    /// The launcher's options (the secret included).
    pub options: LaunchOptions,
    /// How long every daemon of the round has to report back (the startup timeout PRRTE lacks).
    pub startup_timeout: Duration,
}

impl PlmSettings {
    /// Reads the secret (unless insecure) and checks the port and the timeouts, in that order;
    /// the error names the parameter and what it must be.
    pub fn check(&self) -> Result<RoundSettings, String> {
        let secret = if self.insecure {
            None
        } else {
            let file = self.secret_file.clone().unwrap_or_default();
            let secret = protocol::read_secret_file(Path::new(&file))
                .map_err(|e| format!("{e} (parameter plm_k8s_secret_file = {file})"))?;
            Some(secret)
        };
        let port = match u16::try_from(self.agent_port) {
            Ok(port) if port > 0 => port,
            _ => {
                return Err(format!(
                    "plm_k8s_agent_port must be a TCP port (1-65535), not {}",
                    self.agent_port
                ))
            }
        };
        let (Ok(launch), Ok(connect)) = (
            u64::try_from(self.launch_timeout),
            u64::try_from(self.connect_timeout),
        ) else {
            return Err(Self::TIMEOUTS.into());
        };
        if launch == 0 || connect == 0 {
            return Err(Self::TIMEOUTS.into());
        }
        Ok(RoundSettings {
            port,
            options: LaunchOptions {
                secret,
                connect_timeout: Duration::from_secs(connect),
                request_timeout: Duration::from_secs(launch),
                kill_grace: KILL_GRACE,
            },
            startup_timeout: Duration::from_secs(launch),
        })
    }

    const TIMEOUTS: &'static str =
        "plm_k8s_launch_timeout and plm_k8s_connect_timeout must be positive numbers of seconds";
}

/// prte's PMIx tool URI, if the agents can publish it for other pods: a well-formed URI
/// ([`protocol::validate_dvm_uri`]) that is not on the loopback network.
pub fn reachable_dvm_uri(uri: Option<String>) -> Option<String> {
    uri.filter(|u| protocol::validate_dvm_uri(u).is_ok() && !u.contains("tcp4://127."))
}

/// The message for a round without a DVM URI to publish.
pub const NO_DVM_URI: &str = "plm:k8s: prte's tool listener is not reachable from other pods (set --pmixmca ptl_base_if_include to the pod network); no DVM URI published";

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(secret_file: Option<&Path>) -> PlmSettings {
        PlmSettings {
            secret_file: secret_file.map(|p| p.display().to_string()),
            agent_port: 7117,
            launch_timeout: 60,
            connect_timeout: 10,
            insecure: false,
        }
    }

    fn secret_file() -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), [b'k'; 32]).unwrap();
        f
    }

    #[test]
    fn good_settings_give_the_launchers_options() {
        let f = secret_file();
        let r = settings(Some(f.path())).check().unwrap();
        assert_eq!(r.port, 7117);
        assert_eq!(r.options.secret.as_deref(), Some(&[b'k'; 32][..]));
        assert_eq!(r.options.connect_timeout, Duration::from_secs(10));
        assert_eq!(r.options.request_timeout, Duration::from_secs(60));
        assert_eq!(r.options.kill_grace, KILL_GRACE);
        assert_eq!(r.startup_timeout, Duration::from_secs(60));
    }

    #[test]
    fn insecure_reads_no_secret() {
        let mut s = settings(Some(Path::new("/nonexistent/prrte-k8s/key")));
        s.insecure = true;
        assert!(s.check().unwrap().options.secret.is_none());
    }

    #[test]
    fn a_missing_secret_names_the_parameter_and_the_file() {
        let e = settings(Some(Path::new("/nonexistent/prrte-k8s/key")))
            .check()
            .unwrap_err();
        assert!(
            e.contains("does not exist")
                && e.contains("(parameter plm_k8s_secret_file = /nonexistent/prrte-k8s/key)"),
            "{e}"
        );
        let e = settings(None).check().unwrap_err();
        assert!(e.contains("(parameter plm_k8s_secret_file = )"), "{e}");
    }

    #[test]
    fn bad_ports_and_timeouts_are_refused_naming_the_parameter() {
        let f = secret_file();
        for port in [0, -1, 65536] {
            let mut s = settings(Some(f.path()));
            s.agent_port = port;
            assert_eq!(
                s.check().unwrap_err(),
                format!("plm_k8s_agent_port must be a TCP port (1-65535), not {port}")
            );
        }
        for (launch, connect) in [(0, 10), (60, 0), (-5, 10), (60, -1)] {
            let mut s = settings(Some(f.path()));
            s.launch_timeout = launch;
            s.connect_timeout = connect;
            let e = s.check().unwrap_err();
            assert!(e.contains("must be positive numbers of seconds"), "{e}");
        }
    }

    #[test]
    fn the_secret_is_checked_before_the_port() {
        let mut s = settings(Some(Path::new("/nonexistent/prrte-k8s/key")));
        s.agent_port = 0;
        assert!(s.check().unwrap_err().contains("plm_k8s_secret_file"));
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
