//! A PRRTE daemon's OOB port, found through `/proc`.
//!
//! PRRTE 3.0.8's OOB listener binds IPv4 `INADDR_ANY` whatever interfaces it is told to use
//! (`oob_tcp_listener.c`), while the PMIx server in the same process binds its tool listener to
//! 127.0.0.1 (or the address it is given): the daemon's one IPv4 socket listening on 0.0.0.0 is
//! its OOB listener.

use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};

/// The socket inodes `pid` holds.
fn socket_inodes(pid: u32) -> Result<HashSet<u64>> {
    let mut out = HashSet::new();
    let dir = format!("/proc/{pid}/fd");
    for e in std::fs::read_dir(&dir).with_context(|| format!("read {dir}"))? {
        let Ok(target) = std::fs::read_link(e?.path()) else {
            continue; // closed meanwhile
        };
        let t = target.to_string_lossy();
        if let Some(inode) = t
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse().ok())
        {
            out.insert(inode);
        }
    }
    Ok(out)
}

/// `(local address, port, inode)` of the listening sockets in a `/proc/net/tcp` table.
fn listening(table: &str) -> Vec<(Ipv4Addr, u16, u64)> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "0A" {
                return None;
            }
            let (addr, port) = f[1].split_once(':')?;
            // the kernel prints the address as the u32 it holds, network order, in hex
            let addr = Ipv4Addr::from(u32::from_str_radix(addr, 16).ok()?.swap_bytes());
            Some((
                addr,
                u16::from_str_radix(port, 16).ok()?,
                f[9].parse().ok()?,
            ))
        })
        .collect()
}

/// The OOB address of the PRRTE daemon `pid` (`prte` or `prted`), reachable on 127.0.0.1.
pub fn oob_addr(pid: u32) -> Result<SocketAddr> {
    let mine = socket_inodes(pid)?;
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))?;
    let ports: Vec<u16> = listening(&table)
        .into_iter()
        .filter(|(addr, _, inode)| addr.is_unspecified() && mine.contains(inode))
        .map(|(_, port, _)| port)
        .collect();
    match ports[..] {
        [port] => Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        _ => bail!("process {pid} listens on 0.0.0.0 at {ports:?}: not one OOB listener"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_read_from_the_kernel_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:8CB7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
   1: 00000000:ADB3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4243 1 0 100 0 0 10 0\n\
   2: 0100007F:ADB3 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 4244 1 0 20 4 30 10 -1\n";
        assert_eq!(
            listening(table),
            [
                (Ipv4Addr::LOCALHOST, 36023, 4242),
                (Ipv4Addr::UNSPECIFIED, 44467, 4243)
            ]
        );
    }
}
