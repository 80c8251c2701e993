//! The pod network's addresses: a /23 out of 10.250.0.0/16, as a node's pod CIDR is when its
//! kubelet runs more than 254 pods. The first address names the network, the second is the
//! gateway (the host), the last is the broadcast; every other one is a pod's. Host numbers
//! (offsets into the /23) run past 255: `.255` and `.0` inside the /23 are pod addresses too.

use anyhow::{anyhow, Result};
use std::collections::BTreeSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

/// The pod network's prefix length.
pub const PREFIX_LEN: u8 = 23;

/// Addresses in the pod network.
const SIZE: u32 = 1 << (32 - PREFIX_LEN as u32);

/// The host numbers of pods' addresses: after the network's and the gateway's, before the
/// broadcast.
pub(super) const POD_HOSTS: RangeInclusive<u16> = 2..=(SIZE - 2) as u16;

/// How many pods the network has addresses for.
pub const MAX_PODS: usize = (SIZE - 3) as usize;

/// The /23 of one network: 10.250.N.0/23 with an even N.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodCidr {
    base: u32,
}

impl PodCidr {
    /// The candidates in 10.250.0.0/16, the `i`-th of [`PodCidr::CANDIDATES`].
    pub(super) fn candidate(i: u16) -> PodCidr {
        let base = u32::from(Ipv4Addr::new(10, 250, 0, 0)) + (u32::from(i) * SIZE);
        PodCidr { base }
    }

    /// How many /23s 10.250.0.0/16 holds.
    pub(super) const CANDIDATES: u16 = (0x1_0000 / SIZE) as u16;

    /// The network as (address, prefix length), to compare with the host's prefixes.
    pub(super) fn prefix(&self) -> (u32, u8) {
        (self.base, PREFIX_LEN)
    }

    /// The host's address on the bridge.
    pub fn gateway(&self) -> Ipv4Addr {
        self.addr(1)
    }

    /// The address with host number `host`.
    pub(super) fn addr(&self, host: u16) -> Ipv4Addr {
        Ipv4Addr::from(self.base + u32::from(host))
    }

    /// The host number of `ip` if it is a pod address of this network.
    pub(super) fn pod_host(&self, ip: Ipv4Addr) -> Option<u16> {
        let off = u32::from(ip).checked_sub(self.base)?;
        u16::try_from(off).ok().filter(|h| POD_HOSTS.contains(h))
    }

    /// The lowest pod host number in neither set.
    pub(super) fn lowest_free(
        &self,
        reserved: &BTreeSet<u16>,
        in_use: &BTreeSet<u16>,
    ) -> Result<u16> {
        POD_HOSTS
            .clone()
            .find(|h| !reserved.contains(h) && !in_use.contains(h))
            .ok_or_else(|| {
                anyhow!("no free address left in {self} (it has {MAX_PODS} pod addresses)")
            })
    }
}

impl fmt::Display for PodCidr {
    /// `10.250.N.0/23`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{PREFIX_LEN}", Ipv4Addr::from(self.base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_is_a_23_with_509_pod_addresses() {
        assert_eq!(PodCidr::CANDIDATES, 128);
        let c = PodCidr::candidate(2);
        assert_eq!(c.to_string(), "10.250.4.0/23");
        assert_eq!(c.gateway(), Ipv4Addr::new(10, 250, 4, 1));
        assert_eq!(MAX_PODS, 509);
        assert_eq!(c.addr(*POD_HOSTS.end()), Ipv4Addr::new(10, 250, 5, 254));
        assert_eq!(PodCidr::candidate(127).to_string(), "10.250.254.0/23");
    }

    #[test]
    fn allocation_goes_past_254_with_unique_addresses_in_the_23() {
        let c = PodCidr::candidate(3);
        let (mut reserved, in_use) = (BTreeSet::new(), BTreeSet::new());
        let mut addrs = BTreeSet::new();
        for _ in 0..MAX_PODS {
            let h = c.lowest_free(&reserved, &in_use).unwrap();
            reserved.insert(h);
            let a = c.addr(h);
            assert_eq!(c.pod_host(a), Some(h), "{a}");
            assert!(addrs.insert(a), "{a} handed out twice");
        }
        // The 254th and later pods: past one byte of host number, into the /23's second half.
        let sorted: Vec<Ipv4Addr> = addrs.iter().copied().collect();
        assert_eq!(sorted[0], Ipv4Addr::new(10, 250, 6, 2));
        assert_eq!(sorted[253], Ipv4Addr::new(10, 250, 6, 255));
        assert_eq!(sorted[254], Ipv4Addr::new(10, 250, 7, 0));
        assert_eq!(sorted[255], Ipv4Addr::new(10, 250, 7, 1));
        assert_eq!(sorted[MAX_PODS - 1], Ipv4Addr::new(10, 250, 7, 254));
        let e = c.lowest_free(&reserved, &in_use).unwrap_err().to_string();
        assert!(e.contains("10.250.6.0/23") && e.contains("509"), "{e}");
        // A released address is handed out again, the lowest first.
        reserved.remove(&300);
        assert_eq!(c.lowest_free(&reserved, &in_use).unwrap(), 300);
    }

    #[test]
    fn only_pod_addresses_of_the_network_have_a_host_number() {
        let c = PodCidr::candidate(3);
        for not in [
            Ipv4Addr::new(10, 250, 6, 0),
            Ipv4Addr::new(10, 250, 6, 1),
            Ipv4Addr::new(10, 250, 7, 255),
            Ipv4Addr::new(10, 250, 8, 2),
            Ipv4Addr::new(10, 250, 5, 2),
        ] {
            assert_eq!(c.pod_host(not), None, "{not}");
        }
        assert_eq!(c.pod_host(Ipv4Addr::new(10, 250, 7, 3)), Some(259));
    }
}
