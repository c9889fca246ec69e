//! Coalescing received TCP segments into offload super-frames for the TUN (GRO in userspace).
//!
//! Role: the tunnel's receive side decrypts many small IP packets per wakeup. Written one per
//! `write(2)`, each runs the kernel's TCP receive path on its own. [`GroBatch`] collects a
//! batch of packets and merges consecutive TCP segments of one flow into a single
//! super-packet with a `virtio_net_hdr` (GSO TCPv4/TCPv6, partial checksum) that an offload
//! TUN ([`super::Tun::create_with_offload`]) accepts as one frame, the way a NIC with
//! hardware GRO feeds the kernel. Write the frames with [`super::Tun::send_frame`].
//!
//! Invariants:
//! - Nothing is merged that the kernel's own GRO (`inet_gro_receive`/`ipv6_gro_receive`/
//!   `tcp_gro_receive`) would refuse: only IPv4 without options or fragmentation and IPv6
//!   without extension headers, with a correct length and checksums; same addresses, ports,
//!   TOS/traffic class/flow label, TTL/hop limit and DF; IPv4 IDs incrementing (or, with DF,
//!   all equal); contiguous sequence numbers; same ACK number, window, urgent pointer and TCP
//!   options byte for byte; flags ACK or ACK|PSH with PSH only on the last segment; payloads
//!   of equal size except a smaller last one; at most 65 535 bytes of IP packet.
//!   Anything else is passed through untouched with a zero header.
//! - Cutting a merged frame with [`super::split_gso`] gives back the input packets byte for
//!   byte (with DF and fixed IPv4 IDs, all but the IDs, which nobody reads then).
//! - Per flow, packets leave in arrival order: a segment is only ever appended to its flow's
//!   newest pending frame. Different flows may be reordered relative to each other, as the
//!   kernel's GRO does.
//! - Checksums are verified before merging, because the kernel trusts a partial checksum and
//!   would otherwise accept a corrupted segment hidden inside a super-packet.
//! - Memory is bounded: at most `capacity` pending frames of at most 64 KiB each, buffers
//!   reused across flushes.

use super::gso::{fold, sum, F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4, GSO_TCPV6, TCP_PSH};
use super::VNET_HDR_LEN;

/// Pending frames a [`GroBatch::new`] holds before [`GroBatch::push`] reports it full.
pub const DEFAULT_CAPACITY: usize = 64;

/// Largest IP packet a super-frame may become (IPv4 total length is 16 bits; the kernel's
/// GRO stops at 64 KiB as well).
const MAX_IP_LEN: usize = 65_535;

const TCP_ACK: u8 = 0x10;
/// Offset of the TCP checksum field inside the TCP header (virtio `csum_offset`).
const TCP_CSUM_OFFSET: usize = 16;

/// Errors of [`GroBatch`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroError {
    /// The batch holds `capacity` pending frames; the packet was not taken.
    #[error("GRO batch full ({capacity} frames pending); flush it, then push the packet again")]
    Full {
        /// The batch's capacity in frames.
        capacity: usize,
    },
}

/// Addresses and ports of a TCP packet: segments are only merged within one flow.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FlowKey {
    src: [u8; 16],
    dst: [u8; 16],
    ports: [u8; 4],
    v6: bool,
}

/// Header facts of a TCP segment that may start or extend a super-frame.
#[derive(Clone, Copy)]
struct Seg {
    v6: bool,
    /// IP header length (offset of the TCP header).
    l4: usize,
    /// IP plus TCP header length (offset of the payload).
    hdr_len: usize,
    seq: u32,
    payload: usize,
    psh: bool,
    /// IPv4 identification (0 for IPv6).
    id: u16,
}

/// How IPv4 IDs advance within a frame; decided by its second segment.
#[derive(Clone, Copy, PartialEq, Eq)]
enum IdMode {
    Unknown,
    Incrementing,
    /// Only with DF set (RFC 6864 atomic datagrams), which Linux's GRO accepts as well.
    Fixed,
}

/// One frame to be written: a single packet, or a super-packet growing by merged segments.
struct Item {
    /// `VNET_HDR_LEN` bytes for the header, then the packet (first segment's headers followed
    /// by every merged payload).
    buf: Vec<u8>,
    /// Flow of a TCP packet; None for everything else.
    key: Option<FlowKey>,
    /// Set when the frame's headers were eligible and nothing has closed it yet.
    seg: Option<Seg>,
    open: bool,
    /// The first segment's checksums were checked (done lazily: only merging needs it).
    verified: bool,
    segs: usize,
    /// Payload size of the first segment: the `gso_size`.
    mss: usize,
    next_seq: u32,
    last_id: u16,
    id_mode: IdMode,
}

/// A batch of IP packets being coalesced; see the module documentation.
pub struct GroBatch {
    items: Vec<Item>,
    /// Buffers of flushed frames, reused so that steady state does not allocate.
    pool: Vec<Vec<u8>>,
    capacity: usize,
}

impl std::fmt::Debug for GroBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroBatch")
            .field("pending", &self.items.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl Default for GroBatch {
    fn default() -> GroBatch {
        GroBatch::new()
    }
}

impl GroBatch {
    /// A batch holding up to [`DEFAULT_CAPACITY`] pending frames.
    pub fn new() -> GroBatch {
        Self::with_capacity(DEFAULT_CAPACITY)
    }

    /// A batch holding up to `capacity` (at least 1) pending frames; memory stays below about
    /// `capacity` × 64 KiB.
    pub fn with_capacity(capacity: usize) -> GroBatch {
        let capacity = capacity.max(1);
        GroBatch {
            items: Vec::with_capacity(capacity),
            pool: Vec::with_capacity(capacity),
            capacity,
        }
    }

    /// Number of frames [`GroBatch::flush`] would emit now.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when no packet is pending.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Adds one IP packet (copied). Packets must be pushed in arrival order. Fails only when
    /// the packet would need a new frame and `capacity` frames are pending: flush, then push
    /// it again.
    pub fn push(&mut self, packet: &[u8]) -> Result<(), GroError> {
        let (key, mut seg) = parse(packet);
        if let Some(key) = key {
            // Only the flow's newest frame may grow, so the flow's packets keep their order.
            if let Some(item) = self.items.iter_mut().rev().find(|i| i.key == Some(key)) {
                if let Some(s) = seg {
                    match item.try_merge(packet, &s) {
                        Merge::Done => return Ok(()),
                        Merge::Refused => {}
                        Merge::BadChecksum => seg = None,
                    }
                }
            }
        }
        if self.items.len() >= self.capacity {
            return Err(GroError::Full {
                capacity: self.capacity,
            });
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.resize(VNET_HDR_LEN, 0);
        buf.extend_from_slice(packet);
        self.items.push(Item {
            buf,
            key,
            seg,
            open: seg.is_some_and(|s| !s.psh),
            verified: false,
            segs: 1,
            mss: seg.map_or(0, |s| s.payload),
            next_seq: seg.map_or(0, |s| s.seq.wrapping_add(s.payload as u32)),
            last_id: seg.map_or(0, |s| s.id),
            id_mode: IdMode::Unknown,
        });
        Ok(())
    }

    /// Emits every pending frame (`virtio_net_hdr` included, ready for
    /// [`super::Tun::send_frame`]) in order and empties the batch.
    pub fn flush(&mut self, mut emit: impl FnMut(&[u8])) {
        for mut item in self.items.drain(..) {
            if item.segs > 1 {
                item.finish();
            }
            emit(&item.buf);
            // A buffer that grew past one maximal frame (an oversized non-IP blob) is dropped
            // rather than kept, so the pool stays within the documented bound.
            if item.buf.capacity() <= VNET_HDR_LEN + MAX_IP_LEN {
                self.pool.push(item.buf);
            }
        }
    }
}

enum Merge {
    Done,
    Refused,
    /// The new segment's checksum is wrong: it must travel alone so the kernel drops it.
    BadChecksum,
}

impl Item {
    fn try_merge(&mut self, pkt: &[u8], s: &Seg) -> Merge {
        let Some(first) = self.seg else {
            return Merge::Refused;
        };
        let head = &self.buf[VNET_HDR_LEN..];
        let (l4, hl) = (first.l4, first.hdr_len);
        let len = head.len();
        let ip_ok = if first.v6 {
            head[..4] == pkt[..4] && head[7] == pkt[7]
        } else {
            let df = head[6] & 0x40 != 0;
            let incr = s.id == self.last_id.wrapping_add(1);
            let fixed = df && s.id == self.last_id;
            let id_ok = match self.id_mode {
                IdMode::Unknown => incr || fixed,
                IdMode::Incrementing => incr,
                IdMode::Fixed => fixed,
            };
            head[1] == pkt[1] && head[8] == pkt[8] && head[6] & 0x40 == pkt[6] & 0x40 && id_ok
        };
        let fits = self.open
            && s.v6 == first.v6
            && s.hdr_len == hl
            && s.seq == self.next_seq
            && s.payload <= self.mss
            && len + s.payload <= MAX_IP_LEN;
        // ACK number, data offset, window, urgent pointer and options equal; flags are ACK
        // (possibly with PSH on the newcomer) for both, checked by `parse`.
        let tcp_ok = fits
            && head[l4 + 8..l4 + 13] == pkt[l4 + 8..l4 + 13]
            && head[l4 + 14..l4 + 16] == pkt[l4 + 14..l4 + 16]
            && head[l4 + 18..hl] == pkt[l4 + 18..hl];
        if !(ip_ok && tcp_ok) {
            return Merge::Refused;
        }
        if !self.verified {
            self.verified = true;
            if !checksums_ok(head, &first) {
                self.open = false;
                return Merge::Refused;
            }
        }
        if !checksums_ok(pkt, s) {
            return Merge::BadChecksum;
        }
        if !first.v6 && self.segs == 1 {
            self.id_mode = if s.id == self.last_id {
                IdMode::Fixed
            } else {
                IdMode::Incrementing
            };
        }
        self.buf.extend_from_slice(&pkt[hl..]);
        self.segs += 1;
        self.next_seq = s.seq.wrapping_add(s.payload as u32);
        self.last_id = s.id;
        if s.psh {
            self.buf[VNET_HDR_LEN + l4 + 13] |= TCP_PSH;
        }
        // A short segment or PSH ends the frame, as in tcp_gro_receive.
        self.open = !s.psh && s.payload == self.mss;
        Merge::Done
    }

    /// Turns a merged frame into a valid GSO frame: IP length (and IPv4 header checksum), the
    /// TCP pseudo-header partial checksum, and the virtio header.
    fn finish(&mut self) {
        let s = self.seg.expect("only eligible frames merge");
        let (head, pkt) = self.buf.split_at_mut(VNET_HDR_LEN);
        let len = pkt.len();
        if s.v6 {
            pkt[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        } else {
            pkt[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            pkt[10..12].fill(0);
            let c = !fold(sum(0, &pkt[..s.l4]));
            pkt[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let pseudo = fold(pseudo_sum(pkt, s.v6) + (len - s.l4) as u64);
        let at = s.l4 + TCP_CSUM_OFFSET;
        pkt[at..at + 2].copy_from_slice(&pseudo.to_be_bytes());
        head[0] = F_NEEDS_CSUM;
        head[1] = if s.v6 { GSO_TCPV6 } else { GSO_TCPV4 };
        head[2..4].copy_from_slice(&(s.hdr_len as u16).to_ne_bytes());
        head[4..6].copy_from_slice(&(self.mss as u16).to_ne_bytes());
        head[6..8].copy_from_slice(&(s.l4 as u16).to_ne_bytes());
        head[8..10].copy_from_slice(&(TCP_CSUM_OFFSET as u16).to_ne_bytes());
        debug_assert_ne!(head[1], GSO_NONE);
    }
}

/// Sum of the addresses and protocol of the TCP pseudo-header (length not included).
fn pseudo_sum(pkt: &[u8], v6: bool) -> u64 {
    let addrs = if v6 { &pkt[8..40] } else { &pkt[12..20] };
    sum(6, addrs)
}

/// Whether the IPv4 header checksum (if any) and the TCP checksum of `pkt` are correct.
fn checksums_ok(pkt: &[u8], s: &Seg) -> bool {
    let ip_ok = s.v6 || fold(sum(0, &pkt[..s.l4])) == 0xffff;
    let tcp = &pkt[s.l4..];
    ip_ok && fold(sum(pseudo_sum(pkt, s.v6) + tcp.len() as u64, tcp)) == 0xffff
}

/// The flow of a TCP packet (if it is one with complete addresses and ports) and, when its
/// headers allow merging, its segment facts. Checksums are left to [`checksums_ok`].
fn parse(pkt: &[u8]) -> (Option<FlowKey>, Option<Seg>) {
    let mut key = FlowKey {
        src: [0; 16],
        dst: [0; 16],
        ports: [0; 4],
        v6: false,
    };
    let (l4, ip_ok, id) = match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 && pkt[9] == 6 => {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            key.src[..4].copy_from_slice(&pkt[12..16]);
            key.dst[..4].copy_from_slice(&pkt[16..20]);
            let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
            // No options, exact length, no fragmentation (only DF may be set).
            let ok = ihl == 20 && total == pkt.len() && pkt[6] & 0xbf == 0 && pkt[7] == 0;
            (ihl.max(20), ok, u16::from_be_bytes([pkt[4], pkt[5]]))
        }
        Some(6) if pkt.len() >= 40 && pkt[6] == 6 => {
            key.v6 = true;
            key.src.copy_from_slice(&pkt[8..24]);
            key.dst.copy_from_slice(&pkt[24..40]);
            let plen = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
            (40, plen + 40 == pkt.len(), 0)
        }
        _ => return (None, None),
    };
    if pkt.len() < l4 + 20 {
        return (None, None);
    }
    key.ports.copy_from_slice(&pkt[l4..l4 + 4]);
    let thl = usize::from(pkt[l4 + 12] >> 4) * 4;
    let flags = pkt[l4 + 13];
    let hdr_len = l4 + thl;
    let eligible = ip_ok
        && thl >= 20
        && hdr_len < pkt.len() // carries payload: pure ACKs are never merged
        && (flags == TCP_ACK || flags == TCP_ACK | TCP_PSH);
    let seg = eligible.then(|| Seg {
        v6: key.v6,
        l4,
        hdr_len,
        seq: u32::from_be_bytes([pkt[l4 + 4], pkt[l4 + 5], pkt[l4 + 6], pkt[l4 + 7]]),
        payload: pkt.len() - hdr_len,
        psh: flags & TCP_PSH != 0,
        id,
    });
    (Some(key), seg)
}

#[cfg(test)]
mod tests;
