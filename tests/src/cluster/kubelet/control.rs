//! What the node keeps per pod it runs, and the messages it sends the pod's worker thread.

use crate::runtime::podnet::RunningPod;
use anyhow::Result;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

/// A message to a pod's worker thread.
pub(crate) enum Ctl {
    /// The pod object was deleted: kill and clean up.
    Delete,
    /// The pod is being deleted with this grace period (seconds): SIGTERM to its containers,
    /// SIGKILL to those still running when it is over (a shorter one brings that forward).
    Terminate(i64),
    /// Kill the pod and mark it Failed/Evicted with this message.
    Evict(String, Sender<Result<()>>),
    /// The cluster is shutting down.
    Shutdown,
}

/// What the kubelet keeps per pod it runs.
pub(crate) struct PodHandle {
    pub ns: String,
    pub name: String,
    pub ctl: Sender<Ctl>,
    pub thread: Option<std::thread::JoinHandle<()>>,
    /// The pod's sandbox while it exists.
    pub running: Arc<Mutex<Option<Arc<RunningPod>>>>,
    pub dir: PathBuf,
}
