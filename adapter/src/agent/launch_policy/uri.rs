//! A daemon's contact URI (`prte_hnp_uri`, `prte_parent_uri`, ORTE's `orte_hnp_uri`,
//! `orte_parent_uri`), as PRRTE's and ORTE's TCP transport write it, and pinning it to the
//! launcher's own address.
//!
//! The form is `<nspace>.<rank>;tcp://<a1>,<a2>...:<port>[:<m1>,<m2>...][;tcp6://[...]:...]`:
//! one entry per address family, each with the process's addresses, one port and (PRRTE) the
//! addresses' prefix lengths. A daemon tries each address in turn; pinned, the URI holds only
//! the launcher's address (the one its authenticated connection came from), with its port and
//! prefix length, so the daemon can report to no one else.

use std::net::IpAddr;

/// One address family's entry of a URI.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    v6: bool,
    addrs: Vec<IpAddr>,
    port: u16,
    /// Prefix lengths, one per address (PRRTE); empty for ORTE's form.
    masks: Vec<u8>,
}

/// Why a URI is not accepted (the caller adds which parameter it was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UriProblem {
    /// Not of the form above.
    Malformed(&'static str),
    /// It is, but the launcher's address is not among its addresses (the addresses it names).
    Elsewhere(String),
}

/// The URI pinned to `peer`: `<proc>;tcp://<peer>:<port>[:<mask>]` (or `tcp6://[<peer>]`),
/// or why not.
pub fn pin(uri: &str, peer: IpAddr) -> Result<String, UriProblem> {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    let (proc_name, entries) = parse(uri)?;
    let found = entries.iter().find_map(|e| {
        let i = e.addrs.iter().position(|a| *a == peer)?;
        Some((e, i))
    });
    let Some((e, i)) = found else {
        let named: Vec<String> = entries
            .iter()
            .flat_map(|e| e.addrs.iter().map(|a| a.to_string()))
            .collect();
        return Err(UriProblem::Elsewhere(named.join(", ")));
    };
    let (scheme, host) = if e.v6 {
        ("tcp6", format!("[{peer}]"))
    } else {
        ("tcp", peer.to_string())
    };
    let mask = e.masks.get(i).map(|m| format!(":{m}")).unwrap_or_default();
    Ok(format!("{proc_name};{scheme}://{host}:{}{mask}", e.port))
}

/// The rank of the process `uri` names (what prted compares to tell its parent from the head).
pub fn rank(uri: &str) -> Result<u32, UriProblem> {
    let (proc_name, _) = parse(uri)?;
    // `parse` checked that the rank after the last `.` is a number.
    proc_name
        .rsplit_once('.')
        .and_then(|(_, r)| r.parse().ok())
        .ok_or(UriProblem::Malformed(
            "the process name is not <nspace>.<rank>",
        ))
}

/// `uri` with its addresses replaced by `peer` alone: `<proc>;tcp://<peer>:<port>[:<mask>]`
/// (the port of an entry of `peer`'s family, else of the first; the mask likewise, the full
/// length for another family). For a URI the daemon must not reach anyone else through,
/// although it legitimately names another host (the head, when the daemon reports to a parent
/// daemon: it then never contacts the head but through that parent).
pub(crate) fn redirect(uri: &str, peer: IpAddr) -> Result<String, UriProblem> {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    let (proc_name, entries) = parse(uri)?;
    let same = entries.iter().find(|e| e.v6 == peer.is_ipv6());
    let e = same.unwrap_or(&entries[0]);
    let mask = match (e.masks.first(), same.is_some()) {
        (None, _) => String::new(),
        (Some(m), true) => format!(":{m}"),
        (Some(_), false) => format!(":{}", if peer.is_ipv6() { 128 } else { 32 }),
    };
    let (scheme, host) = if peer.is_ipv6() {
        ("tcp6", format!("[{peer}]"))
    } else {
        ("tcp", peer.to_string())
    };
    Ok(format!("{proc_name};{scheme}://{host}:{}{mask}", e.port))
}

/// The process name and the address entries of `uri`.
fn parse(uri: &str) -> Result<(&str, Vec<Entry>), UriProblem> {
    use UriProblem::Malformed;
    if uri.len() > 4096 || !uri.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Malformed("not one word of printable ASCII"));
    }
    let mut parts = uri.split(';');
    let proc_name = parts.next().unwrap_or_default();
    let Some((nspace, rank)) = proc_name.rsplit_once('.') else {
        return Err(Malformed("the process name has no `.<rank>`"));
    };
    let name_ok = !nspace.is_empty()
        && nspace
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._@+-".contains(c));
    if !name_ok || rank.parse::<u32>().is_err() {
        return Err(Malformed("the process name is not <nspace>.<rank>"));
    }
    let entries = parts.map(entry).collect::<Result<Vec<_>, _>>()?;
    if entries.is_empty() {
        return Err(Malformed("no tcp:// address"));
    }
    Ok((proc_name, entries))
}

fn entry(text: &str) -> Result<Entry, UriProblem> {
    use UriProblem::Malformed;
    let (v6, rest) = if let Some(r) = text.strip_prefix("tcp6://") {
        (true, r)
    } else if let Some(r) = text.strip_prefix("tcp://") {
        (false, r)
    } else {
        return Err(Malformed("an address is neither tcp:// nor tcp6://"));
    };
    // tcp6: [a1],[a2]:port:masks (PRRTE brackets the whole list); tcp: a1,a2:port[:masks].
    let (hosts, tail) = if v6 {
        let r = rest
            .strip_prefix('[')
            .ok_or(Malformed("a tcp6:// address is not in brackets"))?;
        let (h, t) = r
            .split_once("]:")
            .ok_or(Malformed("a tcp6:// address has no port"))?;
        (h.replace(['[', ']'], ""), t)
    } else {
        let (h, t) = rest
            .split_once(':')
            .ok_or(Malformed("a tcp:// address has no port"))?;
        (h.to_owned(), t)
    };
    let (port, masks) = match tail.split_once(':') {
        Some((p, m)) => (p, Some(m)),
        None => (tail, None),
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or(Malformed("the port is not a number in 1..=65535"))?;
    let addrs = hosts
        .split(',')
        .map(|h| h.parse::<IpAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| Malformed("an address is not a numeric IP address"))?;
    if addrs.iter().any(|a| a.is_ipv6() != v6) {
        return Err(Malformed(
            "an address does not match its tcp:// or tcp6:// scheme",
        ));
    }
    let masks = match masks {
        Some(m) => m
            .split(',')
            .map(|m| m.parse::<u8>().ok().filter(|m| *m <= 128))
            .collect::<Option<Vec<_>>>()
            .ok_or(Malformed("a prefix length is not a number"))?,
        None => Vec::new(),
    };
    Ok(Entry {
        v6,
        addrs,
        port,
        masks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_uri_is_pinned_to_the_launchers_address() {
        let uri =
            "prterun-vm-5676@0.0;tcp://10.0.0.2,192.0.2.2:60241:24,24;tcp6://[fd00::2]:34847:64";
        assert_eq!(
            pin(uri, ip("192.0.2.2")).unwrap(),
            "prterun-vm-5676@0.0;tcp://192.0.2.2:60241:24"
        );
        assert_eq!(
            pin(uri, ip("::ffff:10.0.0.2")).unwrap(),
            "prterun-vm-5676@0.0;tcp://10.0.0.2:60241:24"
        );
        assert_eq!(
            pin(uri, ip("fd00::2")).unwrap(),
            "prterun-vm-5676@0.0;tcp6://[fd00::2]:34847:64"
        );
        // ORTE's form has no prefix lengths.
        assert_eq!(
            pin("3456106496.0;tcp://10.0.0.2:4000", ip("10.0.0.2")).unwrap(),
            "3456106496.0;tcp://10.0.0.2:4000"
        );
        match pin(uri, ip("10.66.0.1")) {
            Err(UriProblem::Elsewhere(named)) => {
                assert_eq!(named, "10.0.0.2, 192.0.2.2, fd00::2")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_uri_is_redirected_to_the_launchers_address() {
        let uri = "x@0.0;tcp://10.0.0.9,10.0.0.8:7000:24,16;tcp6://[fd00::9]:7001:64";
        assert_eq!(
            redirect(uri, ip("10.0.0.2")).unwrap(),
            "x@0.0;tcp://10.0.0.2:7000:24"
        );
        assert_eq!(
            redirect(uri, ip("fd00::2")).unwrap(),
            "x@0.0;tcp6://[fd00::2]:7001:64"
        );
        assert_eq!(
            redirect("x@0.0;tcp://10.0.0.9:7000:24", ip("fd00::2")).unwrap(),
            "x@0.0;tcp6://[fd00::2]:7000:128"
        );
        assert_eq!(
            redirect("3456106496.0;tcp://10.0.0.9:4000", ip("10.0.0.2")).unwrap(),
            "3456106496.0;tcp://10.0.0.2:4000"
        );
        assert_eq!(rank("x@0.00;tcp://10.0.0.9:4000"), Ok(0));
        assert_eq!(rank("x@0.0;tcp://10.0.0.9:4000"), Ok(0));
        assert_eq!(rank("x@0.12;tcp://10.0.0.9:4000"), Ok(12));
        assert!(rank("x@0.4294967296;tcp://10.0.0.9:4000").is_err());
        assert!(redirect("x.0", ip("10.0.0.2")).is_err());
    }

    #[test]
    fn malformed_uris_are_refused() {
        let peer = ip("10.0.0.2");
        for bad in [
            "",
            "x;tcp://10.0.0.2:1:24",
            "x.y;tcp://10.0.0.2:1:24",
            "x.0",
            "x.0;tcp://10.0.0.2",
            "x.0;tcp://10.0.0.2:0:24",
            "x.0;tcp://localhost:7000:24",
            "x.0;tcp://host.example:7000:24",
            "x.0;udp://10.0.0.2:7000:24",
            "x.0;tcp://10.0.0.2:7000:24 ",
            "\"x.0;tcp://10.0.0.2:7000:24\"",
            "x.0;tcp6://fd00::2:7000:64",
            "x.0;tcp://[fd00::2]:7000:64",
        ] {
            assert!(
                matches!(pin(bad, peer), Err(UriProblem::Malformed(_))),
                "{bad:?}: {:?}",
                pin(bad, peer)
            );
        }
    }
}
