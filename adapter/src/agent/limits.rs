//! Limits against peers that open connections and never authenticate.
//!
//! Every connection of the launch port (and every request of the health port) holds a
//! [`Ticket`] from a [`Pending`] table until it has authenticated (or been answered); one whose
//! handshake failed or timed out holds it until it is closed, the short linger that lets the
//! peer read the refusal included (a dropped ticket ends the linger at once). The table
//! admits at most `global` such connections, and at most `per_peer` from one IP address. When a
//! new connection would exceed the per-peer cap, the oldest pending connection of that peer is
//! dropped. When it would exceed the global cap, the victim is taken from the source holding
//! the **most** pending connections, the arriving one counted (its oldest), not the oldest
//! overall; among sources holding as many, from the one that opened the most connections in
//! the last 5 to 10 s. A flood from many addresses then evicts itself, and a launcher's pending
//! connection goes only when every other pending one is from an address that opened as few. Sources that have authenticated (the last
//! `TRUSTED_SOURCES` addresses, for `TRUSTED_FOR`) come last: their connections are dropped
//! only when nothing else is pending. A launcher whose connection was still dropped retries it
//! (`crate::launch::connect`). Each pending connection also has one overall deadline (the
//! handshake timeout), however slowly its bytes trickle in.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// How many addresses that authenticated are remembered (the least recent is forgotten).
pub(crate) const TRUSTED_SOURCES: usize = 1024;
/// How long an address that authenticated keeps its priority.
pub(crate) const TRUSTED_FOR: Duration = Duration::from_secs(3600);

/// The period over which connections are counted per address (this one and the one before).
const RECENT_PERIOD: Duration = Duration::from_secs(5);
/// How many addresses a period counts (one more is not counted).
const RECENT_SOURCES: usize = 4096;

/// Connections admitted per address in the current and the previous [`RECENT_PERIOD`]: what
/// tells a flooding address from a launcher when both hold as many pending connections.
#[derive(Default)]
struct Recent {
    since: Option<Instant>,
    now: HashMap<IpAddr, u32>,
    before: HashMap<IpAddr, u32>,
}

impl Recent {
    fn note(&mut self, ip: IpAddr) {
        let t = Instant::now();
        match self.since.map(|s| t.saturating_duration_since(s)) {
            Some(d) if d < RECENT_PERIOD => {}
            Some(d) if d < 2 * RECENT_PERIOD => {
                self.before = std::mem::take(&mut self.now);
                self.since = Some(t);
            }
            _ => {
                self.before.clear();
                self.now.clear();
                self.since = Some(t);
            }
        }
        if self.now.len() < RECENT_SOURCES || self.now.contains_key(&ip) {
            let n = self.now.entry(ip).or_default();
            *n = n.saturating_add(1);
        }
    }

    fn count(&self, ip: &IpAddr) -> u32 {
        let n = |m: &HashMap<IpAddr, u32>| m.get(ip).copied().unwrap_or(0);
        n(&self.now).saturating_add(n(&self.before))
    }
}

#[derive(Default)]
struct Table {
    next: u64,
    /// Oldest first.
    entries: VecDeque<Entry>,
    evicted: u64,
    /// Addresses that authenticated, and when they last did.
    trusted: HashMap<IpAddr, Instant>,
    recent: Recent,
}

impl Table {
    fn is_trusted(&self, ip: &IpAddr) -> bool {
        self.trusted
            .get(ip)
            .is_some_and(|at| at.elapsed() < TRUSTED_FOR)
    }

    /// The index of the entry to drop for the global cap when a connection from `incoming`
    /// arrives: the oldest of the untrusted source holding the most pending connections, the
    /// arriving one counted; on a tie, of the one that opened the most connections lately, then
    /// the oldest. Else (every pending connection is from a trusted source) the oldest of all.
    fn global_victim(&self, incoming: IpAddr) -> Option<usize> {
        let mut count: HashMap<IpAddr, usize> = HashMap::from([(incoming, 1)]);
        for e in &self.entries {
            *count.entry(e.ip).or_default() += 1;
        }
        let mut best: Option<(usize, (usize, u32))> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if self.is_trusted(&e.ip) {
                continue;
            }
            let key = (count[&e.ip], self.recent.count(&e.ip));
            if best.is_none_or(|(_, k)| key > k) {
                best = Some((i, key));
            }
        }
        match best {
            Some((i, _)) => Some(i),
            None if self.entries.is_empty() => None,
            None => Some(0),
        }
    }
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

    /// Admits a new connection from `ip`, evicting pending ones over the caps (see the module
    /// documentation for which).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Ticket {
        let mut t = self.lock();
        t.recent.note(ip);
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
            let Some(e) = t.global_victim(ip).and_then(|i| t.entries.remove(i)) else {
                break;
            };
            victims.push(e.cancel.clone());
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
                    "too many unauthenticated connections: dropping those of the sources holding the most"
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

    /// Records that `ip` authenticated: its pending connections are dropped last from now on.
    pub fn authenticated(&self, ip: IpAddr) {
        let mut t = self.lock();
        if t.trusted.len() >= TRUSTED_SOURCES && !t.trusted.contains_key(&ip) {
            if let Some(least) = t
                .trusted
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(ip, _)| *ip)
            {
                t.trusted.remove(&least);
            }
        }
        t.trusted.insert(ip, Instant::now());
    }

    /// What the table is for ("launch", "health", "metrics").
    pub fn what(&self) -> &'static str {
        self.what
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
            "global cap: the oldest of the sources holding the most goes"
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

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn a_flood_from_many_sources_evicts_the_source_holding_most_not_the_oldest() {
        let p = Pending::new("test", 8, 4);
        // A launcher's connection, pending first (the oldest overall).
        let launcher = p.admit(ip(1));
        // A flood from many sources, several connections each.
        let mut flood = Vec::new();
        for round in 0..50 {
            flood.push(p.admit(ip(2 + (round % 5))));
        }
        assert!(
            !launcher.cancel.is_cancelled(),
            "the launcher's only pending connection was dropped for the flood"
        );
        assert_eq!(p.len(), 8);
        drop(flood);
        // As many flood sources as the rest of the table holds, one pending each: the arriving
        // connection counts for its source, which then holds the most.
        let p = Pending::new("test", 8, 4);
        let launcher = p.admit(ip(1));
        let flood: Vec<Ticket> = (0..100).map(|i| p.admit(ip(2 + (i % 7)))).collect();
        assert!(
            !launcher.cancel.is_cancelled(),
            "the launcher's pending connection was dropped for a flood from 7 sources"
        );
        assert_eq!(flood.iter().filter(|t| !t.cancel.is_cancelled()).count(), 7);
        // Every source at once holding one: the oldest of them goes (the launcher's), unless
        // its address authenticated before.
        drop(flood);
        let p = Pending::new("test", 4, 4);
        let launcher = p.admit(ip(1));
        let _flood: Vec<Ticket> = (2..6).map(|i| p.admit(ip(i))).collect();
        assert!(launcher.cancel.is_cancelled());
        p.authenticated(ip(1));
        let launcher = p.admit(ip(1));
        let flood: Vec<Ticket> = (10..60).map(|i| p.admit(ip(i))).collect();
        assert!(
            !launcher.cancel.is_cancelled(),
            "an address that authenticated loses its pending connection to a flood"
        );
        assert_eq!(flood.iter().filter(|t| !t.cancel.is_cancelled()).count(), 3);
        // Only trusted connections pending: the oldest goes.
        let p = Pending::new("test", 2, 2);
        p.authenticated(ip(1));
        p.authenticated(ip(2));
        let a = p.admit(ip(1));
        let b = p.admit(ip(2));
        let c = p.admit(ip(1));
        assert!(a.cancel.is_cancelled() && !b.cancel.is_cancelled() && !c.cancel.is_cancelled());
    }

    #[test]
    fn among_sources_holding_as_many_the_one_that_opened_most_loses() {
        // More flooding sources than the cap: each holds one pending connection at most, as
        // the launcher does, but each opened many.
        let p = Pending::new("test", 8, 8);
        let mut flood = Vec::new();
        for _ in 0..4 {
            flood.extend((0..32).map(|i| p.admit(ip(10 + i))));
        }
        let launcher = p.admit(ip(1));
        for _ in 0..4 {
            flood.extend((0..32).map(|i| p.admit(ip(10 + i))));
        }
        assert!(
            !launcher.cancel.is_cancelled(),
            "the launcher's pending connection was dropped for a flood from 32 sources"
        );
        assert_eq!(p.len(), 8);
        assert_eq!(flood.iter().filter(|t| !t.cancel.is_cancelled()).count(), 7);
    }

    #[test]
    fn the_trusted_addresses_are_bounded() {
        let p = Pending::new("test", 4, 4);
        for i in 0..(TRUSTED_SOURCES as u32 + 10) {
            p.authenticated(IpAddr::from((0x0a00_0000u32 + i).to_be_bytes()));
        }
        assert_eq!(p.lock().trusted.len(), TRUSTED_SOURCES);
        // The most recent are kept.
        let last = IpAddr::from((0x0a00_0000u32 + TRUSTED_SOURCES as u32 + 9).to_be_bytes());
        assert!(p.lock().is_trusted(&last));
        assert!(!p.lock().is_trusted(&IpAddr::from([10, 0, 0, 0])));
    }
}
