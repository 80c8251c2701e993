//! Each rank's output to the agent of the pod it ran in (see [`crate::agent::rank_output`]):
//! the relays hand every tagged piece of mpirun's output to the [`Router`], which finds the
//! rank's node in the job map and queues the piece for that pod's attached connection; the
//! connection's task sends it as `rank_output` while the command runs, and whatever is still
//! queued when the command has ended goes before `finish` (`super::peers`).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tracing::warn;

use super::report::MapFilter;
use crate::agent::rank_output::Stream;
use crate::discovery::Allocation;

/// At most this many bytes of output wait for the job map (a command whose own `--display`
/// shows no map never names the ranks' nodes); more are not sent to the workers.
const PENDING_LIMIT: usize = 8 << 20;

/// The most output one `rank_output` carries: its frame (base64, in JSON, sealed) stays
/// within the smallest `--max-frame` an agent takes (4 KiB).
pub(super) const FRAME_DATA: usize = 2 << 10;

/// A piece of one rank's output on its way to its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Chunk {
    pub rank: u32,
    pub stream: Stream,
    pub data: Vec<u8>,
}

/// What waits for the map: the pieces in the order they came, and their bytes.
#[derive(Debug, Default)]
struct Pending {
    chunks: Vec<Chunk>,
    bytes: usize,
    overflowed: bool,
}

/// Where each rank's output goes: the queue of the attached worker of each node name (pod
/// name and hostname); a rank on this pod, or on a worker not attached, goes nowhere (pod 0's
/// log has everything).
pub(super) struct Router {
    pods: HashMap<String, UnboundedSender<Chunk>>,
    pending: Mutex<Pending>,
}

impl Router {
    /// A router to the workers of the pods `pods` (attached), and the receiving end of each
    /// one's queue, in the same order.
    pub(super) fn new(
        alloc: Option<&Allocation>,
        pods: &[&str],
    ) -> (Router, Vec<UnboundedReceiver<Chunk>>) {
        let mut senders = HashMap::new();
        let mut queues = Vec::new();
        for pod in pods {
            let (tx, rx) = unbounded_channel();
            queues.push(rx);
            let node = alloc.and_then(|a| a.nodes.iter().find(|n| n.pod == *pod));
            if let Some(n) = node {
                senders.insert(n.hostname.clone(), tx.clone());
            }
            senders.insert((*pod).to_owned(), tx);
        }
        let router = Router {
            pods: senders,
            pending: Mutex::new(Pending::default()),
        };
        (router, queues)
    }

    /// A router to the queues `pods` by node name.
    #[cfg(test)]
    fn with_pods(pods: HashMap<String, UnboundedSender<Chunk>>) -> Router {
        Router {
            pods,
            pending: Mutex::new(Pending::default()),
        }
    }

    /// Queues `chunk` for its rank's pod, after every earlier piece that waited for the map.
    pub(super) fn send(&self, chunk: Chunk, map: &Mutex<MapFilter>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.bytes += chunk.data.len();
        pending.chunks.push(chunk);
        self.flush(&mut pending, map);
    }

    /// Queues what waited for the map, now that more of it may be known.
    pub(super) fn flush_pending(&self, map: &Mutex<MapFilter>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        self.flush(&mut pending, map);
    }

    fn flush(&self, pending: &mut Pending, map: &Mutex<MapFilter>) {
        if pending.chunks.is_empty() {
            return;
        }
        let map = map.lock().unwrap_or_else(|p| p.into_inner());
        let complete = map.complete();
        let mut keep = Vec::new();
        let mut kept = 0;
        for c in pending.chunks.drain(..) {
            match map.node_of(c.rank) {
                Some(node) => {
                    if let Some(tx) = self.pods.get(node) {
                        // A worker that went away no longer reads its queue.
                        let _ = tx.send(c);
                    }
                }
                None if !complete => {
                    kept += c.data.len();
                    keep.push(c);
                }
                None => {}
            }
        }
        pending.chunks = keep;
        pending.bytes = kept;
        if pending.bytes > PENDING_LIMIT {
            if !pending.overflowed {
                warn!("batch launcher: more than {PENDING_LIMIT} bytes of the ranks' output came before a job map named their pods; only pod 0's log has it");
            }
            pending.overflowed = true;
            pending.chunks.clear();
            pending.bytes = 0;
        }
    }
}

/// `chunks` with adjacent pieces of the same rank and stream joined, each at most
/// [`FRAME_DATA`] bytes (a longer piece is split).
pub(super) fn coalesce(chunks: Vec<Chunk>) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    for c in chunks {
        let mut data = &c.data[..];
        while !data.is_empty() {
            let joined = out
                .last_mut()
                .filter(|l| l.rank == c.rank && l.stream == c.stream && l.data.len() < FRAME_DATA);
            match joined {
                Some(l) => {
                    let n = (FRAME_DATA - l.data.len()).min(data.len());
                    l.data.extend_from_slice(&data[..n]);
                    data = &data[n..];
                }
                None => {
                    let n = FRAME_DATA.min(data.len());
                    out.push(Chunk {
                        rank: c.rank,
                        stream: c.stream,
                        data: data[..n].to_vec(),
                    });
                    data = &data[n..];
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
