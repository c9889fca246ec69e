//! IPv4/TCP packets rewritten for NAT mode: the client's SYN copied out with an uplink's
//! source address, and the winning SYN-ACK readdressed to the client.
//!
//! Everything but the one address is kept, so the connection stays the client's own end to
//! end: its port, initial sequence number, TCP options (MSS, window scale, SACK, timestamps)
//! and TOS/DSCP. The IP header checksum and the TCP checksum (whose pseudo-header covers
//! the addresses) are recomputed over the whole packet.
//!
//! Invariants: the functions never panic, whatever the bytes (property test below; no fuzz
//! target yet); they return `None` for anything that is not one whole, unfragmented
//! IPv4 TCP packet (a packet cut off by the queue's copy range is refused rather than sent
//! with a wrong checksum); the result has the input's length.

use std::net::{Ipv4Addr, SocketAddrV4};

const TCP: u8 = 6;
/// TCP flag bits.
pub const FIN: u8 = 0x01;
/// SYN.
pub const SYN: u8 = 0x02;
/// RST.
pub const RST: u8 = 0x04;
/// ACK.
pub const ACK: u8 = 0x10;

/// The fields NAT mode reads from a queued TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// The TCP flags byte.
    pub flags: u8,
}

impl Segment {
    /// SYN and ACK set, RST not: a server accepting a connection.
    pub fn is_syn_ack(&self) -> bool {
        self.flags & (SYN | ACK | RST) == SYN | ACK
    }

    /// RST set: a refusal (or an abort).
    pub fn is_rst(&self) -> bool {
        self.flags & RST != 0
    }
}

/// The IPv4 header length of a whole unfragmented TCP packet, or `None`.
fn whole_tcp(p: &[u8]) -> Option<usize> {
    let b0 = *p.first()?;
    let ihl = usize::from(b0 & 0x0f) * 4;
    if b0 >> 4 != 4 || ihl < 20 || p.len() < ihl + 20 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    let frag = u16::from_be_bytes([p[6], p[7]]) & 0x3fff; // MF flag and offset
    if total != p.len() || frag != 0 || p[9] != TCP {
        return None;
    }
    let doff = usize::from(p[ihl + 12] >> 4) * 4;
    (doff >= 20 && ihl + doff <= p.len()).then_some(ihl)
}

/// Reads the addresses, ports and flags of a whole IPv4 TCP packet.
pub fn segment(p: &[u8]) -> Option<Segment> {
    let ihl = whole_tcp(p)?;
    let addr = |o: usize| Ipv4Addr::new(p[o], p[o + 1], p[o + 2], p[o + 3]);
    let port = |o: usize| u16::from_be_bytes([p[ihl + o], p[ihl + o + 1]]);
    Some(Segment {
        src: SocketAddrV4::new(addr(12), port(0)),
        dst: SocketAddrV4::new(addr(16), port(2)),
        flags: p[ihl + 13],
    })
}

/// The client's SYN as sent over an uplink: source address `src`, TTL one less (we forward
/// it), everything else the client's. `None` if not a whole IPv4 TCP SYN or its TTL is spent.
pub fn syn_copy(syn: &[u8], src: Ipv4Addr) -> Option<Vec<u8>> {
    let ihl = whole_tcp(syn)?;
    if syn[ihl + 13] & (SYN | ACK | RST) != SYN || syn[8] <= 1 {
        return None;
    }
    let mut p = syn.to_vec();
    p[8] -= 1;
    p[12..16].copy_from_slice(&src.octets());
    fix_checksums(&mut p, ihl);
    Some(p)
}

/// A SYN-ACK that arrived on an uplink, readdressed to the client at `client` (the port is
/// already the client's: NAT mode keeps it). `None` if not a whole IPv4 TCP SYN-ACK.
pub fn to_client(syn_ack: &[u8], client: Ipv4Addr) -> Option<Vec<u8>> {
    let ihl = whole_tcp(syn_ack)?;
    if syn_ack[ihl + 13] & (SYN | ACK | RST) != SYN | ACK {
        return None;
    }
    let mut p = syn_ack.to_vec();
    p[16..20].copy_from_slice(&client.octets());
    fix_checksums(&mut p, ihl);
    Some(p)
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Recomputes the IPv4 header checksum and the TCP checksum of a whole packet.
fn fix_checksums(p: &mut [u8], ihl: usize) {
    p[10..12].fill(0);
    let ip = fold(sum16(&p[..ihl], 0));
    p[10..12].copy_from_slice(&ip.to_be_bytes());
    let tcp_len = p.len() - ihl;
    p[ihl + 16..ihl + 18].fill(0);
    // Pseudo-header: source, destination, zero + protocol, TCP length.
    let mut acc = sum16(&p[12..20], 0);
    acc += u32::from(TCP) + tcp_len as u32;
    let tcp = fold(sum16(&p[ihl..], acc));
    p[ihl + 16..ihl + 18].copy_from_slice(&tcp.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A SYN with MSS, SACK-permitted, timestamps and window scale, as Linux sends it.
    fn syn() -> Vec<u8> {
        let b = etherparse::PacketBuilder::ipv4([192, 168, 60, 2], [10, 80, 0, 1], 64)
            .tcp(40000, 80, 0x1234_5678, 64240)
            .syn()
            .options(&[
                etherparse::TcpOptionElement::MaximumSegmentSize(1460),
                etherparse::TcpOptionElement::SelectiveAcknowledgementPermitted,
                etherparse::TcpOptionElement::Timestamp(1, 0),
                etherparse::TcpOptionElement::Noop,
                etherparse::TcpOptionElement::WindowScale(7),
            ])
            .unwrap();
        let mut out = Vec::new();
        b.write(&mut out, &[]).unwrap();
        out
    }

    fn checksums_ok(p: &[u8]) -> bool {
        let s = etherparse::SlicedPacket::from_ip(p).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = s.net else {
            return false;
        };
        let Some(etherparse::TransportSlice::Tcp(tcp)) = s.transport else {
            return false;
        };
        let h = ip.header();
        h.to_header().calc_header_checksum() == h.header_checksum()
            && tcp
                .calc_checksum_ipv4(h.source(), h.destination())
                .is_ok_and(|c| c == tcp.checksum())
    }

    #[test]
    fn syn_copy_keeps_the_clients_connection_and_fixes_checksums() {
        let s = syn();
        assert!(checksums_ok(&s));
        let c = syn_copy(&s, Ipv4Addr::new(10, 62, 0, 2)).unwrap();
        assert!(checksums_ok(&c));
        let seg = segment(&c).unwrap();
        assert_eq!(seg.src, "10.62.0.2:40000".parse().unwrap());
        assert_eq!(seg.dst, "10.80.0.1:80".parse().unwrap());
        assert_eq!(seg.flags, SYN);
        assert_eq!(c[8], 63, "TTL decremented");
        assert_eq!(
            &c[20..],
            &{
                let mut t = s[20..].to_vec();
                t[16..18].copy_from_slice(&c[36..38]);
                t
            }[..],
            "ports, ISN and options unchanged"
        );
        assert_eq!(
            syn_copy(&s[..s.len() - 1], Ipv4Addr::LOCALHOST),
            None,
            "cut off"
        );
        assert_eq!(to_client(&s, Ipv4Addr::LOCALHOST), None, "not a SYN-ACK");
    }

    #[test]
    fn syn_ack_is_readdressed_to_the_client() {
        let b = etherparse::PacketBuilder::ipv4([10, 80, 0, 1], [10, 62, 0, 2], 60)
            .tcp(80, 40000, 99, 65160)
            .syn()
            .ack(0x1234_5679)
            .options(&[etherparse::TcpOptionElement::MaximumSegmentSize(1460)])
            .unwrap();
        let mut p = Vec::new();
        b.write(&mut p, &[]).unwrap();
        let seg = segment(&p).unwrap();
        assert!(seg.is_syn_ack() && !seg.is_rst());
        let c = to_client(&p, Ipv4Addr::new(192, 168, 60, 2)).unwrap();
        assert!(checksums_ok(&c));
        assert_eq!(
            segment(&c).unwrap().dst,
            "192.168.60.2:40000".parse().unwrap()
        );
        assert_eq!(syn_copy(&p, Ipv4Addr::LOCALHOST), None, "not a SYN");
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = segment(&bytes);
            let _ = syn_copy(&bytes, Ipv4Addr::LOCALHOST);
            let _ = to_client(&bytes, Ipv4Addr::LOCALHOST);
        }
    }
}
