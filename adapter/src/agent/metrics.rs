//! The agent's Prometheus metrics (OpenMetrics text at `GET /metrics` on `--metrics-listen`,
//! off by default): `prrte_k8s_agent_daemons_started_total{via}` (daemons started: `launch`, a
//! launch request's prted; `exec`, a program run for `prrte-k8s-rsh`),
//! `prrte_k8s_agent_exec_refused_total{reason}` (exec requests refused, by a fixed set of
//! reasons) and `prrte_k8s_agent_heartbeats_missed_total{peer}` (connections ended because
//! their peer's heartbeats stopped: `launcher` or `exec`). Every label value comes from a closed
//! enum, so no request can grow the set of series.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// How a daemon was started.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Via {
    /// A launch request (PRRTE's k8s PLM, the batch launcher): prted.
    Launch,
    /// An exec request (`prrte-k8s-rsh`): a program on the allowlist.
    Exec,
}

/// Why an exec request was refused.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Refusal {
    /// No program was named.
    NoProgram,
    /// The program is not on the allowlist (or not a path the agent takes).
    NotAllowed,
    /// Arguments the program's launch policy does not admit.
    Arguments,
    /// An environment variable the agent does not pass.
    Environment,
    /// A working directory that is not one.
    Cwd,
    /// The request's template could not be filled in.
    Template,
    /// `--max-exec` programs already run.
    Busy,
    /// The program could not be started.
    SpawnFailed,
}

/// Whose heartbeats stopped.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Peer {
    /// A launcher whose prted runs here (or the batch launcher).
    Launcher,
    /// An exec client (`prrte-k8s-rsh`) whose program runs here.
    Exec,
}

/// Each label value in snake case, as Prometheus names are.
macro_rules! label_values {
    ($($ty:ident { $($variant:ident => $text:literal),+ $(,)? })+) => {$(
        impl EncodeLabelValue for $ty {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, match self { $($ty::$variant => $text),+ })
            }
        }
    )+};
}

label_values! {
    Via { Launch => "launch", Exec => "exec" }
    Refusal {
        NoProgram => "no_program",
        NotAllowed => "not_allowed",
        Arguments => "arguments",
        Environment => "environment",
        Cwd => "cwd",
        Template => "template",
        Busy => "busy",
        SpawnFailed => "spawn_failed",
    }
    Peer { Launcher => "launcher", Exec => "exec" }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViaLabel {
    via: Via,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: Refusal,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabel {
    peer: Peer,
}

/// The counters, shared by the connections and the metrics endpoint.
#[derive(Debug)]
pub(crate) struct AgentMetrics {
    registry: Registry,
    started: Family<ViaLabel, Counter>,
    refused: Family<ReasonLabel, Counter>,
    missed: Family<PeerLabel, Counter>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("prrte_k8s_agent");
        let started = Family::<ViaLabel, Counter>::default();
        let refused = Family::<ReasonLabel, Counter>::default();
        let missed = Family::<PeerLabel, Counter>::default();
        registry.register(
            "daemons_started",
            "Daemons started: by a launch request (prted) or an exec request",
            started.clone(),
        );
        registry.register(
            "exec_refused",
            "Exec requests refused (nothing was started), by reason",
            refused.clone(),
        );
        registry.register(
            "heartbeats_missed",
            "Connections ended because their peer's heartbeats stopped (its program was stopped)",
            missed.clone(),
        );
        // Every series of the launch path is shown from the start, at 0.
        for via in [Via::Launch, Via::Exec] {
            let _ = started.get_or_create(&ViaLabel { via });
        }
        for peer in [Peer::Launcher, Peer::Exec] {
            let _ = missed.get_or_create(&PeerLabel { peer });
        }
        Self {
            registry,
            started,
            refused,
            missed,
        }
    }

    pub(crate) fn daemon_started(&self, via: Via) {
        self.started.get_or_create(&ViaLabel { via }).inc();
    }

    pub(crate) fn exec_refused(&self, reason: Refusal) {
        self.refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub(crate) fn heartbeats_missed(&self, peer: Peer) {
        self.missed.get_or_create(&PeerLabel { peer }).inc();
    }

    /// The OpenMetrics text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_count_by_their_label() {
        let m = AgentMetrics::new();
        let t = m.text();
        assert!(
            t.contains("prrte_k8s_agent_daemons_started_total{via=\"launch\"} 0\n"),
            "{t}"
        );
        assert!(!t.contains("reason="), "no refusal yet: {t}");
        m.daemon_started(Via::Launch);
        m.daemon_started(Via::Launch);
        m.daemon_started(Via::Exec);
        m.exec_refused(Refusal::NotAllowed);
        m.exec_refused(Refusal::Cwd);
        m.exec_refused(Refusal::NoProgram);
        m.exec_refused(Refusal::NoProgram);
        m.heartbeats_missed(Peer::Launcher);
        let t = m.text();
        for line in [
            "prrte_k8s_agent_daemons_started_total{via=\"launch\"} 2\n",
            "prrte_k8s_agent_daemons_started_total{via=\"exec\"} 1\n",
            "prrte_k8s_agent_exec_refused_total{reason=\"not_allowed\"} 1\n",
            "prrte_k8s_agent_exec_refused_total{reason=\"cwd\"} 1\n",
            "prrte_k8s_agent_exec_refused_total{reason=\"no_program\"} 2\n",
            "prrte_k8s_agent_heartbeats_missed_total{peer=\"launcher\"} 1\n",
            "prrte_k8s_agent_heartbeats_missed_total{peer=\"exec\"} 0\n",
            "# EOF\n",
        ] {
            assert!(t.contains(line), "{line:?} missing in {t}");
        }
    }
}
