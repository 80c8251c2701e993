//! A forger of PRRTE 3.0.8's out-of-band (OOB) messages, for tests that play a hostile peer on
//! the DVM's network: it connects to a daemon's OOB listener as a process name of its choosing,
//! completes the handshake the daemon expects, and delivers a message on any RML tag with any
//! origin in its header.
//!
//! What it relies on, read in PRRTE 3.0.8 (`src/mca/oob/tcp/`) and PMIx 5.0.5 (`bfrops`,
//! `psquash`):
//! - Every message, the handshake included, starts with `prte_oob_tcp_hdr_t` (568 bytes on
//!   x86_64): origin and destination (`pmix_proc_t`: a 256-byte namespace and a 32-bit rank),
//!   tag, sequence number, payload length, message type and a 32-byte routed-module name. The
//!   ranks, the tag and the length travel in network byte order, the sequence number in the
//!   sender's (`MCA_OOB_TCP_HDR_HTON`).
//! - The handshake (`MCA_OOB_TCP_IDENT`) carries a 16-bit acknowledgement flag and the PRRTE
//!   version string; the receiver checks only that the version string is its own
//!   (`prte_oob_tcp_peer_recv_connect_ack`), answers with its own handshake and takes the
//!   connection for the name it was given.
//! - The receiver delivers a message to the RML with the origin **of the message's header**
//!   (`prte_oob_tcp_recv_handler`, `PRTE_RML_POST_MESSAGE`), not the name the connection was
//!   made with: nothing ties one to the other. PRRTE's OOB does not authenticate its peers.
//!
//! `oob` is the wire, `pack` the PMIx buffer encoding of the few values an allocation answer or
//! a relayed allocation request carries, `listen` finds a daemon's OOB port.
#![forbid(unsafe_code)]

pub mod listen;
pub mod oob;
pub mod pack;
