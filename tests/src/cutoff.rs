//! Cutting one pod off the network, as a failed node link or a partition would: every IPv4
//! frame from or to the pod's address is dropped on the sandbox's bridge, between pods and
//! between the pod and the node alike. The pod's processes keep running; TCP connections to it
//! stall (nothing answers, nothing is refused) until keepalives or timeouts notice.
//!
//! The rules live in an nftables table of the `bridge` family of their own,
//! `<network prefix>cut<n>` (so the sandbox's leftover check sees it), with chains on the
//! bridge's `forward`, `input` and `output` hooks at a priority before the NetworkPolicy table.
//! [`CutOff::restore`] or dropping the guard removes the table.

use crate::netpol::nft;
use anyhow::{Context, Result};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A pod cut off from the network while this guard lives.
#[derive(Debug)]
pub struct CutOff {
    table: String,
    ip: Ipv4Addr,
    active: bool,
}

/// The ruleset that drops every frame from or to `ip` on the bridge.
pub fn render(table: &str, ip: Ipv4Addr) -> String {
    format!(
        "table bridge {table} {{\n\
         \tchain forward {{ type filter hook forward priority -300; policy accept; ip saddr {ip} drop; ip daddr {ip} drop; }}\n\
         \tchain input {{ type filter hook input priority -300; policy accept; ip saddr {ip} drop; }}\n\
         \tchain output {{ type filter hook output priority -300; policy accept; ip daddr {ip} drop; }}\n\
         }}\n"
    )
}

impl CutOff {
    /// Cuts off the pod at `ip` on the network whose prefix (`pk8s<id>`) is given.
    pub fn new(prefix: &str, ip: Ipv4Addr) -> Result<CutOff> {
        let table = format!("{prefix}cut{}", NEXT.fetch_add(1, Ordering::Relaxed));
        nft(&["-f", "-"], Some(&render(&table, ip)))
            .with_context(|| format!("cutting off {ip} with nftables table {table}"))?;
        Ok(CutOff {
            table,
            ip,
            active: true,
        })
    }

    /// The pod's address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The nftables table (family bridge) holding the rules.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Reconnects the pod.
    pub fn restore(mut self) -> Result<()> {
        self.remove()
    }

    fn remove(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.active, false) {
            return Ok(());
        }
        crate::netpol::delete_table(&self.table)
    }
}

impl Drop for CutOff {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::warn!("reconnecting {}: {e:#}", self.ip);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rules_drop_both_directions_on_every_hook() {
        let r = super::render("pk8s1cut0", "10.250.1.7".parse().unwrap());
        assert!(r.starts_with("table bridge pk8s1cut0 {"), "{r}");
        for hook in ["forward", "input", "output"] {
            assert!(
                r.contains(&format!("type filter hook {hook} priority -300")),
                "{r}"
            );
        }
        assert!(
            r.contains("ip saddr 10.250.1.7 drop; ip daddr 10.250.1.7 drop"),
            "{r}"
        );
    }
}
