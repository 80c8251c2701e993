//! Limits against peers that open connections and never authenticate.
//!
//! Every connection of the launch port (and every request of the health port) holds a
//! [`Ticket`] from a [`Pending`] table until it has authenticated (or been answered); one whose
//! handshake failed or timed out holds it until it is closed, the short linger that lets the
//! peer read the refusal included (a dropped ticket ends the linger at once). The table
//! admits at most `global` such connections, and at most `per_peer` from one IP address; when a
//! new connection would exceed a cap, the **oldest** pending connection (of that peer for the
//! per-peer cap) is dropped, so a flood can delay a legitimate launcher by at most the time it
//! takes to open `per_peer` connections, and never lock it out. Each pending connection also has
//! one overall deadline (the handshake timeout), however slowly its bytes trickle in.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Default cap on unauthenticated launch connections.
pub(crate) const DEFAULT_MAX_PENDING: usize =
    crate::settings::agent::MAX_PENDING.default_u64() as usize;
/// Default cap on unauthenticated launch connections from one IP address.
pub(crate) const DEFAULT_MAX_PENDING_PER_PEER: usize =
    crate::settings::agent::MAX_PENDING_PER_PEER.default_u64() as usize;

struct Entry {
    id: u64,
    ip: IpAddr,
    cancel: CancellationToken,
}

#[derive(Default)]
struct Table {
    next: u64,
    /// Oldest first.
    entries: VecDeque<Entry>,
    evicted: u64,
}

/// The pending (not yet authenticated) connections of one port.
pub struct Pending {
    what: &'static str,
    global: usize,
    per_peer: usize,
    table: Mutex<Table>,
}

/// A pending connection's place in the table; dropping it (when the connection authenticated
/// or ended) frees the place. `cancelled()` completes when the connection was evicted.
pub struct Ticket {
    id: u64,
    owner: Arc<Pending>,
    pub cancel: CancellationToken,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut t = self.owner.lock();
        if let Some(i) = t.entries.iter().position(|e| e.id == self.id) {
            t.entries.remove(i);
        }
    }
}

impl Pending {
    /// A table for `what` ("launch", "health") with the given caps (each at least 1).
    pub fn new(what: &'static str, global: usize, per_peer: usize) -> Arc<Pending> {
        Arc::new(Pending {
            what,
            global: global.max(1),
            per_peer: per_peer.max(1).min(global.max(1)),
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a new connection from `ip`, evicting the oldest pending ones over the caps.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Ticket {
        let mut t = self.lock();
        let from_peer = t.entries.iter().filter(|e| e.ip == ip).count();
        let mut victims = Vec::new();
        if from_peer >= self.per_peer {
            let excess = from_peer + 1 - self.per_peer;
            let mut n = 0;
            t.entries.retain(|e| {
                if n < excess && e.ip == ip {
                    n += 1;
                    victims.push(e.cancel.clone());
                    false
                } else {
                    true
                }
            });
        }
        while t.entries.len() >= self.global {
            if let Some(e) = t.entries.pop_front() {
                victims.push(e.cancel.clone());
            }
        }
        t.next += 1;
        let id = t.next;
        let cancel = CancellationToken::new();
        t.entries.push_back(Entry {
            id,
            ip,
            cancel: cancel.clone(),
        });
        if !victims.is_empty() {
            t.evicted += victims.len() as u64;
            let total = t.evicted;
            // Log the first eviction and then every 1000th, not every one (a flood would flood
            // the log too).
            if total == victims.len() as u64
                || total / 1000 != (total - victims.len() as u64) / 1000
            {
                warn!(
                    port = self.what,
                    %ip,
                    pending = t.entries.len(),
                    max = self.global,
                    max_per_peer = self.per_peer,
                    dropped_so_far = total,
                    "too many unauthenticated connections: dropping the oldest"
                );
            }
        }
        drop(t);
        for v in victims {
            v.cancel();
        }
        Ticket {
            id,
            owner: self.clone(),
            cancel,
        }
    }

    /// How many connections are pending now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Raises the soft open-file limit to the hard limit (a flood of connections must not run the
/// agent out of descriptors before the caps above act); logs the outcome.
pub fn raise_nofile_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => info!(from = soft, to = hard, "raised the open-file limit"),
            Err(e) => warn!(soft, hard, error = %e, "cannot raise the open-file limit"),
        },
        Ok(_) => {}
        Err(e) => warn!(error = %e, "cannot read the open-file limit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_of_the_peer_then_oldest_overall_is_evicted() {
        let p = Pending::new("test", 4, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = p.admit(a);
        let a2 = p.admit(a);
        let a3 = p.admit(a);
        assert!(
            a1.cancel.is_cancelled(),
            "per-peer cap: the oldest of the peer goes"
        );
        assert!(!a2.cancel.is_cancelled() && !a3.cancel.is_cancelled());
        let b1 = p.admit(b);
        let b2 = p.admit(b);
        assert_eq!(p.len(), 4);
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        let c1 = p.admit(c);
        assert!(
            a2.cancel.is_cancelled(),
            "global cap: the oldest overall goes"
        );
        assert!(
            !b1.cancel.is_cancelled() && !b2.cancel.is_cancelled() && !c1.cancel.is_cancelled()
        );
        drop(c1);
        drop(b1);
        assert_eq!(p.len(), 2);
        drop((a1, a2, a3, b2));
        assert!(p.is_empty());
    }
}
