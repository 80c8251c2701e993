//! PRRTE 3.0.8's OOB TCP wire: the message header, the connection handshake, a message.

use anyhow::{bail, ensure, Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `PMIX_MAX_NSLEN + 1`: the namespace field of a `pmix_proc_t`.
pub const NSPACE_LEN: usize = 256;
/// `PRTE_MAX_RTD_SIZE + 1`: the routed-module name field of the header.
const ROUTED_LEN: usize = 32;
/// `sizeof(prte_oob_tcp_hdr_t)` on x86_64: two 260-byte names, tag, sequence number and length
/// (4 bytes each), the type (1 byte), the routed name (32), padding to 4-byte alignment (3).
pub const HEADER_LEN: usize = 568;

/// `MCA_OOB_TCP_IDENT`: the handshake.
pub const IDENT: u8 = 1;
/// `MCA_OOB_TCP_USER`: a message for the RML.
pub const USER: u8 = 4;

/// PRRTE's `prte_version_string` (`PRTE_IDENT_STRING`), which the handshake must carry.
pub const PRRTE_VERSION: &str = "3.0.8";

/// `PRTE_RML_TAG_SCHED`: a prted relays an allocation request to the DVM master.
pub const TAG_SCHED: u32 = 72;
/// `PRTE_RML_TAG_SCHED_RESP` (patch 0003): the master's answer to a relayed request.
pub const TAG_SCHED_RESP: u32 = 73;

/// A process name (`pmix_proc_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcName {
    pub nspace: String,
    pub rank: u32,
}

impl ProcName {
    pub fn new(nspace: &str, rank: u32) -> ProcName {
        ProcName {
            nspace: nspace.to_string(),
            rank,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        let ns = self.nspace.as_bytes();
        ensure!(
            ns.len() < NSPACE_LEN && !ns.contains(&0),
            "namespace {:?} does not fit a pmix_proc_t",
            self.nspace
        );
        let mut field = [0u8; NSPACE_LEN];
        field[..ns.len()].copy_from_slice(ns);
        out.extend_from_slice(&field);
        out.extend_from_slice(&self.rank.to_be_bytes());
        Ok(())
    }

    fn decode(b: &[u8]) -> ProcName {
        let ns = &b[..NSPACE_LEN];
        let end = ns.iter().position(|&c| c == 0).unwrap_or(NSPACE_LEN);
        ProcName {
            nspace: String::from_utf8_lossy(&ns[..end]).into_owned(),
            rank: u32::from_be_bytes([
                b[NSPACE_LEN],
                b[NSPACE_LEN + 1],
                b[NSPACE_LEN + 2],
                b[NSPACE_LEN + 3],
            ]),
        }
    }
}

impl std::fmt::Display for ProcName {
    /// As PRRTE prints a name (`PRTE_NAME_PRINT`): `[nspace,rank]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{},{}]", self.nspace, self.rank)
    }
}

/// `prte_oob_tcp_hdr_t`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub origin: ProcName,
    pub dst: ProcName,
    pub tag: u32,
    pub seq_num: u32,
    pub nbytes: u32,
    pub kind: u8,
}

impl Header {
    /// The header's bytes as the sender's `MCA_OOB_TCP_HDR_HTON` leaves them.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(HEADER_LEN);
        self.origin.encode(&mut out)?;
        self.dst.encode(&mut out)?;
        out.extend_from_slice(&self.tag.to_be_bytes());
        out.extend_from_slice(&self.seq_num.to_le_bytes());
        out.extend_from_slice(&self.nbytes.to_be_bytes());
        out.push(self.kind);
        out.extend_from_slice(&[0u8; ROUTED_LEN]);
        out.resize(HEADER_LEN, 0);
        Ok(out)
    }

    pub fn decode(b: &[u8; HEADER_LEN]) -> Header {
        let be = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let name = NSPACE_LEN + 4;
        Header {
            origin: ProcName::decode(&b[..name]),
            dst: ProcName::decode(&b[name..2 * name]),
            tag: be(2 * name),
            seq_num: u32::from_le_bytes([
                b[2 * name + 4],
                b[2 * name + 5],
                b[2 * name + 6],
                b[2 * name + 7],
            ]),
            nbytes: be(2 * name + 8),
            kind: b[2 * name + 12],
        }
    }
}

/// An OOB connection to one daemon, made under a name of the caller's choosing.
pub struct Connection {
    stream: TcpStream,
    /// The daemon's own name, from its answer to the handshake.
    pub peer: ProcName,
    /// The name the connection was made with.
    pub me: ProcName,
    seq: u32,
}

impl Connection {
    /// Connects to the OOB listener at `addr` as `me` and completes the handshake: our IDENT
    /// (acknowledgement flag 1, PRRTE's version string), then the daemon's.
    pub fn open(addr: SocketAddr, me: ProcName) -> Result<Connection> {
        let limit = Duration::from_secs(10);
        let mut stream =
            TcpStream::connect_timeout(&addr, limit).with_context(|| format!("connect {addr}"))?;
        stream.set_read_timeout(Some(limit))?;
        stream.set_write_timeout(Some(limit))?;
        stream.set_nodelay(true)?;
        let mut payload = 1u16.to_be_bytes().to_vec();
        payload.extend_from_slice(PRRTE_VERSION.as_bytes());
        payload.push(0);
        let hdr = Header {
            origin: me.clone(),
            // the receiver does not look at it; its own name comes back in its answer
            dst: ProcName::new("", 0),
            tag: 0,
            seq_num: 0,
            nbytes: payload.len() as u32,
            kind: IDENT,
        };
        let mut msg = hdr.encode()?;
        msg.extend_from_slice(&payload);
        stream.write_all(&msg).context("send the handshake")?;

        let mut raw = [0u8; HEADER_LEN];
        stream
            .read_exact(&mut raw)
            .with_context(|| format!("{addr} refused the handshake of {me}"))?;
        let answer = Header::decode(&raw);
        ensure!(
            answer.kind == IDENT,
            "{addr} answered the handshake with a message of type {}",
            answer.kind
        );
        ensure!(
            answer.nbytes <= 4096,
            "{addr} announced a {}-byte handshake",
            answer.nbytes
        );
        let mut body = vec![0u8; answer.nbytes as usize];
        stream.read_exact(&mut body).context("read the handshake")?;
        ensure!(
            body.len() > 2 && body[..2] == 1u16.to_be_bytes(),
            "{addr} did not acknowledge the connection: {body:?}"
        );
        let version = String::from_utf8_lossy(&body[2..]);
        let version = version.trim_end_matches('\0');
        if version != PRRTE_VERSION {
            bail!("{addr} runs PRRTE {version:?}, not {PRRTE_VERSION}");
        }
        Ok(Connection {
            stream,
            peer: answer.origin,
            me,
            seq: 0,
        })
    }

    /// Sends `payload` on `tag` to the daemon, its header naming `origin` as the sender.
    pub fn send(&mut self, origin: &ProcName, tag: u32, payload: &[u8]) -> Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let hdr = Header {
            origin: origin.clone(),
            dst: self.peer.clone(),
            tag,
            seq_num: self.seq,
            nbytes: u32::try_from(payload.len()).context("payload too long")?,
            kind: USER,
        };
        let mut msg = hdr.encode()?;
        msg.extend_from_slice(payload);
        self.stream
            .write_all(&msg)
            .with_context(|| format!("send on tag {tag} to {}", self.peer))?;
        self.stream.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_568_bytes_with_prrte_byte_order_and_decodes_back() {
        let h = Header {
            origin: ProcName::new("prte-host-1@0", 1),
            dst: ProcName::new("prte-host-1@0", 0),
            tag: TAG_SCHED_RESP,
            seq_num: 7,
            nbytes: 300,
            kind: USER,
        };
        let b = h.encode().unwrap();
        assert_eq!(b.len(), HEADER_LEN);
        assert_eq!(&b[..13], b"prte-host-1@0");
        assert_eq!(b[13..256], [0u8; 243]);
        assert_eq!(b[256..260], [0, 0, 0, 1]);
        assert_eq!(b[516..520], [0, 0, 0, 0]);
        assert_eq!(b[520..524], [0, 0, 0, 73]);
        assert_eq!(b[524..528], [7, 0, 0, 0]);
        assert_eq!(b[528..532], [0, 0, 1, 44]);
        assert_eq!(b[532], USER);
        assert!(b[533..].iter().all(|&c| c == 0));
        let raw: [u8; HEADER_LEN] = b.try_into().unwrap();
        assert_eq!(Header::decode(&raw), h);
        assert_eq!(h.origin.to_string(), "[prte-host-1@0,1]");
    }

    #[test]
    fn a_namespace_longer_than_pmix_allows_is_refused() {
        let h = Header {
            origin: ProcName::new(&"x".repeat(NSPACE_LEN), 0),
            dst: ProcName::new("d", 0),
            tag: 0,
            seq_num: 0,
            nbytes: 0,
            kind: IDENT,
        };
        assert!(h.encode().is_err());
    }
}
