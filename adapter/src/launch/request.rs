//! What the launcher is given: the daemons to start ([`LaunchTarget`]), what to start in each
//! ([`LaunchRequest`]) and its own settings ([`LaunchOptions`]).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::protocol::liveness::Heartbeat;

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
