//! The launches an agent starts itself, beside serving connections: the DVM head's prte
//! (`--dvm-head`) and batch mode's command (`--run`, in the launcher's role). They belong to the
//! launcher's layer (`crate::launch::head`, `crate::launch::batch`), above the agent: the agent
//! starts prted for a launcher and knows no launcher itself. The binary hands them in
//! (`crate::launch::AGENT_LAUNCHES`); the agent spawns them when its configuration asks.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::batch::BatchState;
use super::checked_config::{AgentConfig, HeadConfig};
use super::process::Reaper;
use super::tracking::Tracking;

/// A launch running to its end (or until its stop is cancelled).
pub(crate) type Running = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The DVM head: runs prte (`head`) until it ends or `stop` is cancelled; `up` is true while
/// prte runs; `health` is the agent's health endpoint, awaited first.
pub(crate) type Head = fn(
    head: HeadConfig,
    config: AgentConfig,
    reaper: Arc<Reaper>,
    tracking: Tracking,
    health: Option<SocketAddr>,
    stop: CancellationToken,
    up: Arc<AtomicBool>,
) -> Running;

/// Batch mode's launcher: attaches to the other agents, runs the command, tells them how it
/// ended, and sets the agent's exit through `batch`.
pub(crate) type BatchLauncher = fn(
    config: AgentConfig,
    reaper: Arc<Reaper>,
    health: Option<SocketAddr>,
    batch: Arc<BatchState>,
    stop: CancellationToken,
) -> Running;

/// The launches the agent may start itself.
#[derive(Clone, Copy)]
pub struct Launches {
    pub(crate) head: Head,
    pub(crate) batch_launcher: BatchLauncher,
}
