//! What the benchmark measures: the launch methods, one DVM start's figures, the peak memory
//! of the pods' processes, and one pod count's results.

use crate::launch_round::LaunchRound;
use crate::phases::Phases;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Agent,
    Ssh,
    SshNoTree,
    LowerBound,
}

impl Variant {
    pub fn tag(self) -> &'static str {
        match self {
            Variant::Agent => "agent",
            Variant::Ssh => "ssh",
            Variant::SshNoTree => "ssh-notree",
            Variant::LowerBound => "lower-bound",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Variant::Agent => "agent (plm k8s)",
            Variant::Ssh => "ssh (plm ssh, tree)",
            Variant::SshNoTree => "ssh (plm ssh, no tree)",
            Variant::LowerBound => "lower bound (ns exec)",
        }
    }
}

/// What one DVM start measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// prte started until "DVM ready", seconds.
    pub ready: f64,
    /// `prun -n <2 per pod> hostname` into the fresh DVM, seconds.
    pub first_job: f64,
    /// Then `prun` of `true`, 1 rank per pod, seconds.
    pub job_one: f64,
    /// Then `prun` of `true`, `--ranks-per-pod` ranks per pod (oversubscribed), seconds; 0 when
    /// left out.
    pub job_many: f64,
    /// Where the DVM-ready time went.
    pub phases: Phases,
    /// The launcher's own account of its round (plm k8s only).
    pub launch: LaunchRound,
    /// user+system CPU seconds of prte and everything it started (prteds excluded) at "DVM
    /// ready".
    pub cpu: f64,
    /// The machine's 1-minute load average when this run started.
    pub load: f64,
    /// CPU the worker pods' agents used while the DVM was up and idle (before the first job),
    /// ms per second per agent.
    pub agents_idle: f64,
}

/// Peak resident memory (VmHWM, kB) per worker pod (pods 1..N-1), measured while the DVM is up.
#[derive(Default, Clone, Debug)]
pub struct Rss {
    /// The agent of each worker pod.
    pub agent: Vec<u64>,
    /// All sshd processes of each worker pod: the listener and the connection's processes.
    pub sshd: Vec<u64>,
    /// ssh clients in prte's pod, summed.
    pub clients: u64,
    /// Now (at DVM ready, plm k8s run): the agent's VmRSS, the agent's Pss, the prted's Pss
    /// (each worker pod, kB).
    pub agent_now: Vec<u64>,
    pub agent_pss: Vec<u64>,
    pub prted_pss: Vec<u64>,
    /// The sshd processes' Pss summed, each worker pod (plm ssh tree run, kB).
    pub sshd_pss: Vec<u64>,
}

pub struct Row {
    pub pods: usize,
    /// Ranks per pod of the second `true` job (0: left out).
    pub ranks_per_pod: usize,
    pub times: Vec<(Variant, Vec<Sample>)>,
    pub rss: Rss,
}
