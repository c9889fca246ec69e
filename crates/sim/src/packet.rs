//! Inner IP packets: the simulated applications exchange real IPv4/TCP and IPv4/UDP
//! packets (built and parsed with etherparse), so the tunnel classifies, numbers, seals
//! and reorders exactly what a TUN device would hand it.
//!
//! Invariant: `parse` never panics; a packet it cannot read is `None` and is counted by
//! the caller, never silently taken for another flow's.

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

/// IPv4 + TCP header bytes (no options).
pub const TCP_HEADERS: usize = 40;
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

/// A TCP segment with `len` payload bytes (content zero: only sizes matter to the
/// tunnel and the links).
pub fn tcp(a: Addrs, seq: u32, ack: Option<u32>, len: usize) -> Vec<u8> {
    let mut b = PacketBuilder::ipv4(a.src, a.dst, 64).tcp(a.sport, a.dport, seq, 65535);
    if let Some(n) = ack {
        b = b.ack(n);
    }
    let payload = vec![0u8; len];
    let mut out = Vec::with_capacity(TCP_HEADERS + len);
    b.write(&mut out, &payload)
        .expect("a segment of at most the MTU always fits an IPv4 packet");
    out
}

/// A UDP datagram carrying `payload`.
pub fn udp(a: Addrs, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ipv4(a.src, a.dst, 64).udp(a.sport, a.dport);
    let mut out = Vec::with_capacity(UDP_HEADERS + payload.len());
    b.write(&mut out, payload)
        .expect("a datagram of at most the MTU always fits an IPv4 packet");
    out
}

/// Parses an IPv4 TCP or UDP packet.
pub fn parse(pkt: &[u8]) -> Option<Parsed<'_>> {
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
        let u = udp(A.reversed(), &[1, 2, 3]);
        let q = parse(&u).unwrap();
        assert_eq!(q.body, Body::Udp(&[1, 2, 3]));
        assert_eq!(q.src, A.dst);
        assert!(parse(&u[..10]).is_none());
        assert!(parse(&[]).is_none());
    }
}
