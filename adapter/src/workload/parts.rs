//! What a kind's renderer is given: the object's metadata and pod template, made by the
//! manifest, and the job's settings that the workload object carries.

use std::collections::BTreeMap;

use clap::ValueEnum;
use serde_json::Value;

/// When a batch Job counts as complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Success {
    /// When the pod with index 0 (the one that runs the command) succeeded; the rest are
    /// then stopped by the Job controller.
    Index0,
    /// When every pod succeeded.
    All,
    /// An MPIJob's `cleanPodPolicy: None`: the pod with index 0 succeeding is the job's
    /// success, and the other pods stay up after it (their agents' `--workers-stay`), so the
    /// Job has no success policy and does not complete while they run (the MPIJob's controller
    /// reads the success off index 0). Not a `--success` choice.
    #[value(skip)]
    Index0WorkersStay,
}

/// The parts of one workload object.
#[derive(Debug, Clone)]
pub struct Parts {
    /// Its name.
    pub name: String,
    /// Its metadata (untyped: it carries the plan's labels and annotations verbatim).
    pub metadata: Value,
    /// Its pod template (metadata and spec).
    pub template: Value,
    /// Labels that select exactly its pods.
    pub selector: BTreeMap<String, String>,
    /// The container whose non-zero exit fails the job.
    pub container: String,
    pub pods: u32,
    /// A batch command runs (pod 0 runs it); else interactive.
    pub batch: bool,
    pub success: Success,
    /// activeDeadlineSeconds.
    pub deadline: Option<u64>,
    /// ttlSecondsAfterFinished.
    pub ttl: Option<u64>,
    /// Created suspended.
    pub suspend: bool,
    /// `spec.managedBy`.
    pub(crate) managed_by: Option<String>,
    /// How many times a JobSet restarts as a whole.
    pub(crate) max_restarts: u32,
    /// An MPIJob's launcher with a pod of its own: its pod template ([`Parts::template`] is
    /// then the workers', [`Parts::pods`] counting the launcher's too). A JobSet only.
    pub(crate) launcher: Option<LauncherParts>,
}

/// The launcher's own pod.
#[derive(Debug, Clone)]
pub(crate) struct LauncherParts {
    /// Its pod template.
    pub(crate) template: Value,
    /// Made only once every worker is ready (else with them).
    pub(crate) after_workers: bool,
}
