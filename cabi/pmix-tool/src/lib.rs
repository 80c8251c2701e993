//! One PMIx tool connection to a PRRTE DVM, behind a safe API: connect with the DVM's URI,
//! spawn jobs into it (`PMIx_Spawn_nb`, several in flight), learn how each ended
//! (`PMIX_EVENT_JOB_END`, asked for with `PMIX_NOTIFY_COMPLETION`) and where its ranks ran (a
//! `PMIX_QUERY_PROC_TABLE` query), and kill a job (`PMIx_Job_control_nb` with
//! `PMIX_JOB_CTRL_KILL`).
//!
//! `libpmix` is loaded when [`Dvm::connect`] is called (the one the DVM's PRRTE install ships),
//! not linked: programs using this crate start without PMIx. PMIx calls its callbacks on its
//! own progress thread; they only copy what they are given and post it to a dispatcher thread,
//! which matches it to the submitted tasks and reports each task's [`Update`]s on a channel.
//!
//! ```no_run
//! use prrte_k8s_pmix_tool::{Dvm, Task};
//! # fn main() -> Result<(), prrte_k8s_pmix_tool::Error> {
//! let dvm = Dvm::connect("prte-pod-0@0.0;tcp4://10.0.0.1:7120", "/opt/prrte/lib/libpmix.so.2".as_ref())?;
//! let done = dvm.submit(&Task::new(["/bin/hostname"]))?.wait()?;
//! println!("exit {} on {:?}", done.status, done.pods);
//! # Ok(())
//! # }
//! ```

mod callbacks;
mod dispatch;
mod dvm;
mod ffi;
mod info;

pub use dvm::{Completion, Dvm};

use std::path::PathBuf;

/// One job to spawn: an application context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Number of ranks (processes).
    pub np: u32,
    /// Hosts (pods) the ranks may run on, comma-separated (PMIx's `PMIX_HOST`); `None`: the
    /// DVM's mapper chooses.
    pub hosts: Option<String>,
    /// Working directory of the ranks; `None`: this process's.
    pub cwd: Option<PathBuf>,
    /// `NAME=VALUE` entries added to the ranks' environment.
    pub env: Vec<String>,
}

impl Task {
    /// A single-rank task running `argv`.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            np: 1,
            hosts: None,
            cwd: None,
            env: Vec::new(),
        }
    }
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// PRRTE's termination status: 0 on success, the first failing rank's exit status
    /// (128 + signal number for a rank killed by a signal), or a negative PRRTE/PMIx error
    /// (the job could not start, was cancelled, lost a daemon).
    pub status: i32,
    /// The rank the status came from, when PRRTE names one.
    pub rank: Option<u32>,
    /// PRRTE's description of an abnormal end.
    pub message: Option<String>,
    /// The hosts (pods) the job's ranks ran on, in rank order; empty when the DVM had
    /// forgotten the job before it was asked.
    pub pods: Vec<String>,
}

/// What happens to a submitted task, in order: `Started` then `Ended`, or `SpawnFailed`, or
/// `Lost` at any point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// The DVM launched the job under this namespace.
    Started { nspace: String },
    /// The job ended.
    Ended(Ended),
    /// The DVM refused or failed to launch the job.
    SpawnFailed { status: i32, message: String },
    /// The connection to the DVM was lost; the job's fate is unknown.
    Lost { status: i32 },
    /// Output of one of the job's ranks (only with [`Dvm::connect_with`]'s `capture_output`); may come after
    /// `Ended`.
    Output {
        rank: u32,
        stderr: bool,
        bytes: Vec<u8>,
    },
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot load {path}: {source}")]
    Load {
        path: PathBuf,
        source: libloading::Error,
    },
    #[error("this process already has a PMIx tool connection (PMIx allows one per process)")]
    AlreadyConnected,
    #[error("{call} failed: {name} ({status})")]
    Pmix {
        call: &'static str,
        status: i32,
        name: String,
    },
    #[error("the connection to the DVM is lost")]
    Lost,
    #[error("a task needs a command")]
    EmptyTask,
}
