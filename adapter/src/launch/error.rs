//! Why the launcher's work failed: an exchange with a pod's agent ([`AgentError`]), the
//! settings of a round ([`SettingsError`]), nodes without a pod ([`UnresolvedNodes`]) and
//! prted's command line ([`PrtedArgsError`]). Each
//! displays as the sentence that is printed, naming the cause and the remedy; the underlying
//! error is kept as its source.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::{HandshakeError, InvalidDvmUri, LaunchRefusal, ProtocolError, SecretError};
use crate::settings::{mca, SettingError};

/// Why no TCP connection to an agent was made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectFailure {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no connection within {0:?}")]
    Timeout(Duration),
}

/// Why a launch request was not sent: the launcher's own checks refused it.
#[derive(Debug, thiserror::Error)]
pub enum NotSent {
    #[error(transparent)]
    Launch(#[from] LaunchRefusal),
    #[error(transparent)]
    DvmUri(#[from] InvalidDvmUri),
}

/// A failed exchange with a pod's agent: connecting, authenticating, a request and its answer.
/// `who` is "the agent of pod P at ADDR"; `what` names the request ("a ping", "attach").
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(
        "cannot reach the prrte-k8s agent of pod {pod} at {addr}: {cause}; is the agent running \
         in the pod and listening on port {port}? is a NetworkPolicy blocking the launcher?",
        port = addr.port()
    )]
    Unreachable {
        pod: String,
        addr: SocketAddr,
        #[source]
        cause: ConnectFailure,
    },
    /// The agent refused the handshake (normally: the secrets differ).
    #[error("{who} refused the launcher: {reason}{}", secret_hint(reason))]
    Refused { who: String, reason: String },
    #[error(
        "authentication failed: {who} could not prove that it holds the launcher's secret \
         (secret mismatch, or not a prrte-k8s agent); mount the same Secret in both"
    )]
    NotProven { who: String },
    #[error("{who} did not answer within {after:?} during authentication (stalled)")]
    HandshakeStalled { who: String, after: Duration },
    #[error(
        "the peer at {addr} closed the connection before the handshake completed; is a \
         prrte-k8s agent listening on port {port}?",
        port = addr.port()
    )]
    ClosedInHandshake { addr: SocketAddr },
    #[error(
        "the peer at {addr} does not speak the prrte-k8s agent protocol ({source}); is port \
         {port} the agent's?",
        port = addr.port()
    )]
    NotAnAgent {
        addr: SocketAddr,
        source: ProtocolError,
    },
    #[error("{who}: {source}")]
    Handshake { who: String, source: HandshakeError },
    #[error("cannot send {what} to {who}: {source}")]
    Send {
        what: &'static str,
        who: String,
        source: ProtocolError,
    },
    #[error("{who} did not answer {what} within {timeout:?} (stalled)")]
    Stalled {
        what: &'static str,
        who: String,
        timeout: Duration,
    },
    #[error("{who} did not answer {what}: {source}")]
    NoAnswer {
        what: &'static str,
        who: String,
        source: ProtocolError,
    },
    #[error("protocol error from {who}: {source}")]
    Protocol { who: String, source: ProtocolError },
    /// The agent answered `failed` or `error` to a request.
    #[error("{who} refused {what}: {reason}")]
    RequestRefused {
        what: &'static str,
        who: String,
        reason: String,
    },
    /// An answer that is none of those the request takes.
    #[error("{who} answered {what} with {reply}")]
    Unexpected {
        what: &'static str,
        who: String,
        reply: String,
    },
    #[error("launch request for pod {pod} not sent: {source}")]
    NotSent {
        pod: String,
        #[source]
        source: NotSent,
    },
    #[error("{who} did not start prted: {reason}")]
    NotStarted { who: String, reason: String },
    #[error("{who} reported an error: {reason}")]
    Reported { who: String, reason: String },
}

impl AgentError {
    /// No connection was made: nothing listens there, or the network drops the connection.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, AgentError::Unreachable { .. })
    }

    /// The launcher and the agent do not hold the same secret (or one of them has none).
    pub fn is_secret_mismatch(&self) -> bool {
        matches!(
            self,
            AgentError::Refused { .. }
                | AgentError::NotProven { .. }
                | AgentError::Handshake {
                    source: HandshakeError::AgentInsecure | HandshakeError::NoSecret,
                    ..
                }
        )
    }
}

/// The remedy added to a refusal that does not say it is an authentication failure.
fn secret_hint(reason: &str) -> &'static str {
    if reason.starts_with("authentication failed") {
        ""
    } else {
        " (if this is an authentication failure, the launcher's secret does not match the \
         agent's; mount the same Secret in both)"
    }
}

/// Why the settings of a round cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SettingsError {
    /// A value out of range, or the two names of one setting disagreeing.
    #[error(transparent)]
    Setting(#[from] SettingError),
    #[error("{source} (parameter {} = {})", mca::SECRET_FILE.name(), file.display())]
    Secret { file: PathBuf, source: SecretError },
}

/// PRRTE's prted command line cannot be adapted for the agents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrtedArgsError {
    #[error("PRRTE's prted command line has no vpid slot")]
    NoVpidSlot,
}

/// PRRTE's nodes (named) for which no pod IP is known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no pod IP is known for node(s) {}. The k8s PLM launches through the agents of pods that \
     the k8s RAS allocated; use --prtemca ras k8s (or give nodes by IP address).",
    .0.join(", ")
)]
pub struct UnresolvedNodes(pub Vec<String>);
