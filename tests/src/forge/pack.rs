//! PMIx 5.0.5's buffer encoding (`PMIx_Data_pack`) of the values an allocation answer and a
//! relayed allocation request start with, as PRRTE 3.0.8 packs them into the messages it sends.
//!
//! PMIx 5.0.5 packs with its `bfrops/v41` module into buffers that are not fully described
//! (`bfrops_base_default_type` is `PMIX_BFROP_BUFFER_NON_DESC` unless PMIx is built with
//! debugging): no type tags, except those "system types" need when integers are not encoded.
//! With `psquash/flex128` (the default) they are, so an `int`, a `size_t` and a status are
//! each a variable-length integer, and so is the count `PMIx_Data_pack` puts before every
//! call's values:
//! - `flex128`: little-endian groups of 7 bits, the high bit of a byte set when another group
//!   follows, at most 8 such bytes, then a 9th holding the 8 bits left;
//! - signed values (`PMIX_INT`, `PMIX_INT32`, a status) are zigzag-mapped first (`2x` for
//!   `x >= 0`, `-2x - 1` below), unsigned ones (`PMIX_SIZE`, a rank) taken as they are.
//!
//! Bytes (`PMIX_UINT8`, an allocation directive) are themselves; a string is its length with
//! the terminating NUL (an `int32`), then its bytes and the NUL; a process name its namespace
//! as a string, then its rank.

/// `PMIX_SUCCESS`.
pub const PMIX_SUCCESS: i32 = 0;
/// `PMIX_ALLOC_EXTEND`.
pub const PMIX_ALLOC_EXTEND: u8 = 2;

/// A buffer being packed.
#[derive(Default, Debug)]
pub struct Buffer {
    bytes: Vec<u8>,
}

impl Buffer {
    pub fn new() -> Buffer {
        Buffer::default()
    }

    /// `PMIx_Data_pack(NULL, buf, &v, 1, PMIX_INT)`.
    pub fn int(&mut self, v: i32) -> &mut Buffer {
        self.count(1);
        flex(zigzag(v.into()), &mut self.bytes);
        self
    }

    /// `PMIx_Data_pack(NULL, buf, &v, 1, PMIX_STATUS)`.
    pub fn status(&mut self, v: i32) -> &mut Buffer {
        self.int(v)
    }

    /// `PMIx_Data_pack(NULL, buf, &v, 1, PMIX_SIZE)`.
    pub fn size(&mut self, v: u64) -> &mut Buffer {
        self.count(1);
        flex(v, &mut self.bytes);
        self
    }

    /// `PMIx_Data_pack(NULL, buf, &v, 1, PMIX_UINT8)`, or `PMIX_ALLOC_DIRECTIVE`.
    pub fn byte(&mut self, v: u8) -> &mut Buffer {
        self.count(1);
        self.bytes.push(v);
        self
    }

    /// `PMIx_Data_pack(NULL, buf, &p, 1, PMIX_PROC)`.
    pub fn proc_name(&mut self, nspace: &str, rank: u32) -> &mut Buffer {
        self.count(1);
        let len = i64::try_from(nspace.len() + 1).unwrap_or(i64::MAX);
        flex(zigzag(len), &mut self.bytes);
        self.bytes.extend_from_slice(nspace.as_bytes());
        self.bytes.push(0);
        flex(rank.into(), &mut self.bytes);
        self
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn count(&mut self, n: i32) {
        flex(zigzag(n.into()), &mut self.bytes);
    }
}

/// What patch 0003's `send_sched_resp` sends on `PRTE_RML_TAG_SCHED_RESP`: the relaying
/// daemon's tracking index, the status and the number of info, without the info themselves.
/// A count above zero makes the receiver size an info array for it and then fail to unpack.
pub fn sched_answer(refid: i32, status: i32, ninfo: u64) -> Vec<u8> {
    let mut b = Buffer::new();
    b.int(refid).status(status).size(ninfo);
    b.bytes
}

/// What a prted sends the DVM master on `PRTE_RML_TAG_SCHED` for an allocation request
/// (`pass_request` in `pmix_server_session.c`): command 0, the prted's tracking index, the
/// requester, the directive and the number of info, without the info themselves.
pub fn sched_request(refid: i32, requester: (&str, u32), allocdir: u8, ninfo: u64) -> Vec<u8> {
    let mut b = Buffer::new();
    b.byte(0)
        .int(refid)
        .proc_name(requester.0, requester.1)
        .byte(allocdir)
        .size(ninfo);
    b.bytes
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn flex(v: u64, out: &mut Vec<u8>) {
    let mut rest = v;
    for _ in 0..8 {
        let group = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.push(group);
            return;
        }
        out.push(group | 0x80);
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_take_one_byte_and_signs_zigzag() {
        assert_eq!(sched_answer(0, PMIX_SUCCESS, 0), [2, 0, 2, 0, 2, 0]);
        assert_eq!(sched_answer(3, -1, 1), [2, 6, 2, 1, 2, 1]);
        assert_eq!(
            sched_answer(64, -65, 128),
            [2, 0x80, 1, 2, 0x81, 1, 2, 0x80, 1]
        );
    }

    #[test]
    fn what_pmix_5_0_5_packs_for_an_answer_with_a_huge_count() {
        // PMIx_Data_pack of the int 5, the status -46 and the size_t 2^61 + 1, as PMIx 5.0.5
        // itself produced them (a tool initialised without a server)
        assert_eq!(
            sched_answer(5, -46, (1 << 61) + 1),
            [0x02, 0x0a, 0x02, 0x5b, 0x02, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20]
        );
    }

    #[test]
    fn what_pmix_5_0_5_packs_for_a_relayed_request_with_a_huge_count() {
        // PMIx_Data_pack of the uint8 0, the int 3, the proc ns@0 rank 1, PMIX_ALLOC_EXTEND
        // and the size_t 2^61 + 1, as PMIx 5.0.5 itself produced them
        assert_eq!(
            sched_request(3, ("ns@0", 1), PMIX_ALLOC_EXTEND, (1 << 61) + 1),
            [
                0x02, 0x00, 0x02, 0x06, 0x02, 0x0a, b'n', b's', b'@', b'0', 0x00, 0x01, 0x02, 0x02,
                0x02, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20
            ]
        );
    }

    #[test]
    fn the_largest_values_fill_nine_bytes() {
        let mut b = Buffer::new();
        b.size(u64::MAX);
        assert_eq!(
            b.bytes(),
            [2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        let mut b = Buffer::new();
        b.int(i32::MIN);
        assert_eq!(b.bytes(), [2, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    }
}
