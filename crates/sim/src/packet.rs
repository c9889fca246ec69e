//! Inner IP packets: the simulated applications exchange real IPv4/TCP and IPv4/UDP
//! packets (headers from etherparse, checksums valid), so the tunnel classifies, numbers,
//! seals and reorders exactly what a TUN device would hand it. TCP segments carry the
//! timestamp option, as Linux sends them by default: 52 bytes of headers, so a segment of
//! a given MSS is as long as a real one and occupies the links as long.
//!
//! Payloads are zero beyond a short prefix (only sizes matter to the tunnel and the
//! links), and zero bytes add nothing to the Internet checksum: packets are written in one
//! allocation and their checksums summed over headers and prefix only — bytes identical to
//! etherparse's `PacketBuilder` (a test checks), at a fraction of the cost per packet.
//!
//! Invariant: `parse` never panics; a packet it cannot read is `None` and is counted by
//! the caller, never silently taken for another flow's.

use etherparse::checksum::Sum16BitWords;
use etherparse::{ip_number, IpNumber, Ipv4Header, NetSlice, SlicedPacket, TcpHeader};
use etherparse::{TcpOptionElement, TransportSlice, UdpHeader};

/// IPv4 + TCP header bytes, with the 12 bytes of the timestamp option.
pub const TCP_HEADERS: usize = 52;
/// IPv4 + UDP header bytes.
pub const UDP_HEADERS: usize = 28;

/// A parsed inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Transport content.
    pub body: Body<'a>,
}

/// Transport-specific content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// A TCP segment.
    Tcp {
        /// Sequence number of the first payload byte.
        seq: u32,
        /// Acknowledgment number, if the ACK flag is set.
        ack: Option<u32>,
        /// Payload bytes.
        len: usize,
    },
    /// A UDP datagram.
    Udp(&'a [u8]),
}

/// Endpoint addresses and ports of a packet to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addrs {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl Addrs {
    /// The reverse direction.
    pub fn reversed(self) -> Addrs {
        Addrs {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
        }
    }
}

/// TTL of every packet built here.
const TTL: u8 = 64;
/// Offsets of the checksum in a UDP and in a TCP header.
const UDP_CSUM_AT: usize = 6;
const TCP_CSUM_AT: usize = 16;

/// An IPv4 packet of `l4_len` transport bytes: `hdr` (transport header, checksum zero),
/// then `prefix`, then zeros.
fn ipv4(a: Addrs, proto: IpNumber, hdr: &[u8], prefix: &[u8], l4_len: usize) -> Vec<u8> {
    let ip = Ipv4Header::new(l4_len as u16, TTL, proto, a.src, a.dst)
        .expect("a segment of at most the MTU always fits an IPv4 packet");
    // Transport headers have even length, so summing the two slices apart equals summing
    // them joined.
    let sum = Sum16BitWords::new()
        .add_4bytes(a.src)
        .add_4bytes(a.dst)
        .add_2bytes([0, proto.0])
        .add_2bytes((l4_len as u16).to_be_bytes())
        .add_slice(hdr)
        .add_slice(prefix);
    // RFC 768: a computed UDP checksum of zero is sent as all ones (zero means "none").
    let (csum, at) = if proto == ip_number::UDP {
        (sum.to_ones_complement_with_no_zero(), UDP_CSUM_AT)
    } else {
        (sum.ones_complement(), TCP_CSUM_AT)
    };
    let total = Ipv4Header::MIN_LEN + l4_len;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&ip.to_bytes());
    out[10..12].copy_from_slice(&ip.calc_header_checksum().to_be_bytes());
    let at = out.len() + at;
    out.extend_from_slice(hdr);
    out.extend_from_slice(prefix);
    // `to_be` above and `to_be_bytes` here: etherparse's convention, byte for byte.
    out[at..at + 2].copy_from_slice(&csum.to_be().to_be_bytes());
    out.resize(total, 0);
    out
}

/// A TCP segment with `len` payload bytes (content zero: only sizes matter to the
/// tunnel and the links).
pub fn tcp(a: Addrs, seq: u32, ack: Option<u32>, len: usize) -> Vec<u8> {
    let mut h = TcpHeader::new(a.sport, a.dport, seq, 65535);
    if let Some(n) = ack {
        h.ack = true;
        h.acknowledgment_number = n;
    }
    // NOP, NOP, timestamps (Linux's layout); the values are not modelled.
    h.set_options(&[
        TcpOptionElement::Noop,
        TcpOptionElement::Noop,
        TcpOptionElement::Timestamp(0, 0),
    ])
    .expect("12 bytes of options always fit");
    let hdr = h.to_bytes();
    ipv4(a, ip_number::TCP, &hdr, &[], hdr.len() + len)
}

/// A UDP datagram of `len` payload bytes that start with `head` (the rest zero).
pub fn udp(a: Addrs, head: &[u8], len: usize) -> Vec<u8> {
    let l4_len = UdpHeader::LEN + len.max(head.len());
    let h = UdpHeader {
        source_port: a.sport,
        destination_port: a.dport,
        length: l4_len as u16,
        checksum: 0,
    };
    ipv4(a, ip_number::UDP, &h.to_bytes(), head, l4_len)
}

/// Parses an IPv4 TCP or UDP packet: the fields are read in place (this runs for every
/// packet an application receives), and anything the direct reader does not cover —
/// options, fragments, odd lengths — goes through etherparse's full parser. A property
/// test checks that both agree.
pub fn parse(pkt: &[u8]) -> Option<Parsed<'_>> {
    parse_direct(pkt).or_else(|| parse_full(pkt))
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The common case: a 20-byte IPv4 header (no fragment), then a whole TCP or UDP header.
fn parse_direct(pkt: &[u8]) -> Option<Parsed<'_>> {
    if pkt.len() < 28 || pkt[0] != 0x45 || usize::from(be16(pkt, 2)) != pkt.len() {
        return None;
    }
    if be16(pkt, 6) & 0x3fff != 0 {
        return None; // a fragment (more-fragments flag or an offset)
    }
    let l4 = &pkt[20..];
    let (sport, dport) = (be16(l4, 0), be16(l4, 2));
    let body = match pkt[9] {
        6 => {
            let off = usize::from(l4.get(12)? >> 4) * 4;
            if off < 20 || l4.len() < off {
                return None;
            }
            Body::Tcp {
                seq: be32(l4, 4),
                ack: (l4[13] & 0x10 != 0).then(|| be32(l4, 8)),
                len: l4.len() - off,
            }
        }
        17 if usize::from(be16(l4, 4)) == l4.len() => Body::Udp(&l4[8..]),
        _ => return None,
    };
    let src = pkt[12..16].try_into().ok()?;
    let dst = pkt[16..20].try_into().ok()?;
    Some(Parsed {
        src,
        dst,
        sport,
        dport,
        body,
    })
}

fn parse_full(pkt: &[u8]) -> Option<Parsed<'_>> {
    let s = SlicedPacket::from_ip(pkt).ok()?;
    let Some(NetSlice::Ipv4(ip)) = &s.net else {
        return None;
    };
    let (src, dst) = (ip.header().source(), ip.header().destination());
    let (sport, dport, body) = match s.transport? {
        TransportSlice::Tcp(t) => (
            t.source_port(),
            t.destination_port(),
            Body::Tcp {
                seq: t.sequence_number(),
                ack: t.ack().then(|| t.acknowledgment_number()),
                len: t.payload().len(),
            },
        ),
        TransportSlice::Udp(u) => (
            u.source_port(),
            u.destination_port(),
            Body::Udp(u.payload()),
        ),
        _ => return None,
    };
    Some(Parsed {
        src,
        dst,
        sport,
        dport,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Addrs = Addrs {
        src: [100, 64, 0, 2],
        dst: [198, 51, 100, 1],
        sport: 10000,
        dport: 80,
    };

    proptest::proptest! {
        /// The direct reader agrees with etherparse wherever it answers, on built packets
        /// and on arbitrary bytes (where it must never panic).
        #[test]
        fn direct_parse_agrees_with_etherparse(
            seq: u32, ack: Option<u32>, len in 0usize..1500, udp: bool,
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            at in 0usize..60, byte: u8,
        ) {
            let mut p = if udp { self::udp(A, &[1, 2, 3], len) } else { tcp(A, seq, ack, len) };
            proptest::prop_assert!(parse_direct(&p).is_some());
            proptest::prop_assert_eq!(parse_direct(&p), parse_full(&p));
            // One header byte changed: wherever the direct reader still answers, it agrees.
            if let Some(b) = p.get_mut(at) {
                *b = byte;
            }
            if let Some(d) = parse_direct(&p) {
                proptest::prop_assert_eq!(Some(d), parse_full(&p));
            }
            if let Some(d) = parse_direct(&noise) {
                proptest::prop_assert_eq!(Some(d), parse_full(&noise));
            }
        }
    }

    #[test]
    fn round_trips() {
        let p = tcp(A, 7, Some(9), 1000);
        assert_eq!(p.len(), TCP_HEADERS + 1000);
        let q = parse(&p).unwrap();
        assert_eq!((q.src, q.dst, q.sport, q.dport), (A.src, A.dst, 10000, 80));
        assert_eq!(
            q.body,
            Body::Tcp {
                seq: 7,
                ack: Some(9),
                len: 1000
            }
        );
        let u = udp(A.reversed(), &[1, 2, 3], 3);
        let q = parse(&u).unwrap();
        assert_eq!(q.body, Body::Udp(&[1, 2, 3]));
        assert_eq!(q.src, A.dst);
        assert!(parse(&u[..10]).is_none());
        assert!(parse(&[]).is_none());
    }

    /// Same bytes as etherparse's `PacketBuilder` (full checksum over the whole payload).
    #[test]
    fn identical_to_packet_builder() {
        use etherparse::PacketBuilder;
        for len in [0usize, 1, 2, 3, 17, 100, 1333, 1334, 1380, 1460] {
            for (seq, ack) in [(0u32, None), (7, Some(9)), (u32::MAX, Some(0xfffe_0001))] {
                let mut b = PacketBuilder::ipv4(A.src, A.dst, 64)
                    .tcp(A.sport, A.dport, seq, 65535)
                    .options(&[
                        TcpOptionElement::Noop,
                        TcpOptionElement::Noop,
                        TcpOptionElement::Timestamp(0, 0),
                    ])
                    .unwrap();
                if let Some(n) = ack {
                    b = b.ack(n);
                }
                let mut want = Vec::new();
                b.write(&mut want, &vec![0u8; len]).unwrap();
                assert_eq!(tcp(A, seq, ack, len), want, "tcp {len} {seq} {ack:?}");
            }
            for head in [&[][..], &[0xff, 0xff], &[1, 2, 3], &[9u8; 16]] {
                if head.len() > len {
                    continue;
                }
                let mut payload = vec![0u8; len];
                payload[..head.len()].copy_from_slice(head);
                let mut want = Vec::new();
                PacketBuilder::ipv4(A.dst, A.src, 64)
                    .udp(A.dport, A.sport)
                    .write(&mut want, &payload)
                    .unwrap();
                assert_eq!(udp(A.reversed(), head, len), want, "udp {len} {head:?}");
            }
        }
    }
}
