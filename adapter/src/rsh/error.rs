//! Why `prrte-k8s-rsh` could not run the command: its command line ([`UsageError`]), finding
//! the host's pod ([`ResolveError`]) and the session with the agent ([`RshError`]). Each
//! displays as the line printed after `prrte-k8s-rsh: `; the underlying error is its source.

use std::time::Duration;

use crate::discovery::DiscoveryError;
use crate::launch::AgentError;
use crate::protocol::exec::InvalidData;
use crate::protocol::ProtocolError;
use crate::settings::SettingError;

/// A command line `prrte-k8s-rsh` cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UsageError {
    #[error("option -{0} needs an argument")]
    MissingArgument(char),
    #[error("unknown option -{0} (ssh's options are accepted)")]
    UnknownOption(char),
    #[error("no host given")]
    NoHost,
    #[error("no command for {0}: prrte-k8s-rsh runs a command, it has no interactive login")]
    NoCommand(String),
}

/// HOST names no pod of the job.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// A bad `PRTE_MCA_ras_k8s_*` variable.
    #[error(transparent)]
    Setting(#[from] SettingError),
    #[error(
        "{host} is not an IP address, and the job's pods could not be listed to find it: {source}"
    )]
    Discovery {
        host: String,
        source: DiscoveryError,
    },
    #[error("{host} is not a pod of the job (pods: {pods}); give a pod name, host name or IP")]
    NotAPod { host: String, pods: String },
}

/// The session with the agent failed before the remote program's exit status was known.
#[derive(Debug, thiserror::Error)]
pub enum RshError {
    /// Connecting or authenticating.
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("cannot send the command: {0}")]
    SendCommand(#[source] ProtocolError),
    #[error("cannot handle signals: {0}")]
    Signals(#[source] std::io::Error),
    #[error("the agent did not answer within {0:?}")]
    NoAnswer(Duration),
    #[error("the agent closed the connection before the command ended")]
    Closed,
    #[error("connection to the agent lost: {0}")]
    Lost(#[source] ProtocolError),
    #[error("protocol error: {0}")]
    Protocol(#[source] ProtocolError),
    #[error("protocol error: {0}")]
    Output(#[from] InvalidData),
    #[error("the agent refused the command: {0}")]
    Refused(String),
    #[error("the agent reported an error: {0}")]
    Reported(String),
    #[error("the agent was silent for {silent:.1} s ({misses} heartbeats {interval} s apart unanswered, PRTE_MCA_plm_k8s_heartbeat_interval/_misses): its pod is cut off from the network, stopped or stalled")]
    Silent {
        silent: f64,
        misses: u32,
        interval: u64,
    },
    #[error("cannot send a heartbeat: {0}")]
    Heartbeat(#[source] ProtocolError),
    #[error("cannot forward stdin: {0}")]
    Stdin(#[source] ProtocolError),
    #[error("cannot forward {signal}: {source}")]
    Signal {
        signal: &'static str,
        source: ProtocolError,
    },
}
