//! What the launcher is given: the daemons to start ([`LaunchTarget`]), what to start in each
//! ([`LaunchRequest`]) and its own settings ([`LaunchOptions`]).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// One daemon to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchTarget {
    /// The daemon's vpid.
    pub id: u32,
    /// Pod name, for messages.
    pub pod: String,
    /// The agent's address.
    pub addr: SocketAddr,
}

/// What to start: prted's arguments after the executable, and extra environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchRequest {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The DVM's PMIx tool URI for the agent to publish in its pod (see
    /// [`crate::protocol::validate_dvm_uri`]); the PLM passes prte's own listener URI when it is
    /// reachable from other pods.
    pub dvm_uri: Option<String>,
}

/// Launcher settings.
#[derive(Clone)]
pub struct LaunchOptions {
    /// The per-job secret shared with the agents; `None` = insecure mode, accepted only by
    /// agents that run with `--insecure-no-auth` and no secret.
    pub secret: Option<Vec<u8>>,
    /// Bound on establishing each TCP connection.
    pub connect_timeout: Duration,
    /// Bound on each wait for an agent's answer before prted has started.
    pub request_timeout: Duration,
    /// Grace period between SIGTERM and SIGKILL asked of agents on shutdown (agents use the
    /// smaller of this and their own `--kill-grace`).
    pub kill_grace: Duration,
    /// Liveness of the connections while the daemons run.
    pub heartbeat: Heartbeat,
}

/// The launcher's heartbeats: a `ping` to each running daemon's agent every `interval`; an
/// agent silent (no answer, no frame at all) for more than `misses` intervals is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Zero: no heartbeats.
    pub interval: Duration,
    pub misses: u32,
}

impl Heartbeat {
    /// No heartbeats (only TCP keepalive notices a silent peer).
    pub const OFF: Heartbeat = Heartbeat {
        interval: Duration::ZERO,
        misses: 1,
    };

    /// `plm_k8s_heartbeat_interval` and `_misses` from the environment
    /// (`PRTE_MCA_plm_k8s_heartbeat_*`), else their defaults: how the launchers that are no
    /// PRRTE component (`prrte-k8s-rsh`, the batch launcher) beat.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Heartbeat, crate::settings::SettingError> {
        use crate::settings::{mca, Setting};
        let int = |s: &Setting, v: &str| s.int(v);
        let mut hb = Heartbeat::default();
        if let Some(i) = mca::HEARTBEAT_INTERVAL.from_env(env, int)? {
            hb.interval = Duration::from_secs(i as u64);
        }
        if let Some(m) = mca::HEARTBEAT_MISSES.from_env(env, int)? {
            hb.misses = m as u32;
        }
        Ok(hb)
    }

    /// How long an agent may stay silent; `None` without heartbeats.
    pub fn silence_limit(&self) -> Option<Duration> {
        (!self.interval.is_zero()).then(|| self.interval * self.misses.max(1))
    }
}

impl Default for Heartbeat {
    /// `plm_k8s_heartbeat_interval` and `plm_k8s_heartbeat_misses`' defaults.
    fn default() -> Self {
        use crate::settings::mca;
        Heartbeat {
            interval: Duration::from_secs(mca::HEARTBEAT_INTERVAL.default_u64()),
            misses: mca::HEARTBEAT_MISSES.default_u64() as u32,
        }
    }
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            secret: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            kill_grace: Duration::from_secs(5),
            heartbeat: Heartbeat::default(),
        }
    }
}

impl fmt::Debug for LaunchOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchOptions")
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("kill_grace", &self.kill_grace)
            .field("heartbeat", &self.heartbeat)
            .finish()
    }
}
