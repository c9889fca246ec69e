//! What the racing gateway reads from a packet held in its netfilter queue: the addresses and
//! ports, the DSCP, and for TCP whether it is a bare SYN (a client opening a connection).
//!
//! Only the first bytes of a packet reach the daemon (the queue's copy range), so the IP
//! length fields may promise more than the slice holds: parsing is lax about a cut-off tail
//! (etherparse's `LaxIpSlice`) and strict about everything it returns. IPv6 extension headers
//! are walked by etherparse; fragments other than a whole datagram are not classified (their
//! ports may be missing), and neither is anything but TCP or UDP.
//!
//! Invariant: [`classify`] never panics, whatever the bytes (property-tested below).

use etherparse::LaxIpSlice;
use std::net::SocketAddr;

/// The transport of a classified packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TCP; `syn` when SYN is set and ACK, RST and FIN are not (a connection attempt).
    Tcp {
        /// A bare SYN.
        syn: bool,
    },
    /// UDP.
    Udp,
}

/// The fields the gateway decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// TCP or UDP.
    pub transport: Transport,
    /// Source address and port (the LAN client).
    pub src: SocketAddr,
    /// Destination address and port (the original destination).
    pub dst: SocketAddr,
    /// The DSCP (0..=63) of the IP header.
    pub dscp: u8,
}

const TCP: u8 = 6;
const UDP: u8 = 17;
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// Classifies an IPv4 or IPv6 packet (possibly cut off after its transport header).
pub fn classify(packet: &[u8]) -> Option<Classified> {
    let (ip, _ext_error) = LaxIpSlice::from_slice(packet).ok()?;
    let dscp = match &ip {
        LaxIpSlice::Ipv4(v4) => v4.header().dcp().value(),
        LaxIpSlice::Ipv6(v6) => v6.header().dscp().value(),
    };
    let payload = ip.payload();
    if payload.fragmented {
        return None;
    }
    let l4 = payload.payload;
    let ports = l4.get(..4)?;
    let sport = u16::from_be_bytes([ports[0], ports[1]]);
    let dport = u16::from_be_bytes([ports[2], ports[3]]);
    let transport = match payload.ip_number.0 {
        TCP => {
            let flags = *l4.get(13)?;
            Transport::Tcp {
                syn: flags & (SYN | ACK | RST | FIN) == SYN,
            }
        }
        UDP => Transport::Udp,
        _ => return None,
    };
    Some(Classified {
        transport,
        src: SocketAddr::new(ip.source_addr(), sport),
        dst: SocketAddr::new(ip.destination_addr(), dport),
        dscp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    fn tcp4(syn: bool, ack: bool, tos_dscp: u8, payload: &[u8]) -> Vec<u8> {
        let mut b =
            PacketBuilder::ipv4([192, 168, 60, 2], [10, 80, 0, 1], 64).tcp(40000, 80, 1234, 64240);
        if syn {
            b = b.syn();
        }
        if ack {
            b = b.ack(1);
        }
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out[1] = tos_dscp << 2; // DSCP is the upper six bits of the TOS byte
        out
    }

    fn udp6(payload: &[u8]) -> Vec<u8> {
        let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let dst = [0xfd, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut out = Vec::new();
        PacketBuilder::ipv6(src, dst, 64)
            .udp(5353, 53)
            .write(&mut out, payload)
            .unwrap();
        out
    }

    #[test]
    fn syn_and_not_syn() {
        let c = classify(&tcp4(true, false, 10, &[])).unwrap();
        assert_eq!(c.transport, Transport::Tcp { syn: true });
        assert_eq!(c.src, "192.168.60.2:40000".parse().unwrap());
        assert_eq!(c.dst, "10.80.0.1:80".parse().unwrap());
        assert_eq!(c.dscp, 10);
        let c = classify(&tcp4(true, true, 0, &[])).unwrap();
        assert_eq!(c.transport, Transport::Tcp { syn: false }, "a SYN-ACK");
        let c = classify(&tcp4(false, true, 0, b"data")).unwrap();
        assert_eq!(c.transport, Transport::Tcp { syn: false });
    }

    #[test]
    fn udp_over_ipv6_cut_after_the_header() {
        let p = udp6(&[7u8; 1200]);
        // The queue copies only the first bytes: the length field promises 1208 more.
        let c = classify(&p[..40 + 8 + 16]).unwrap();
        assert_eq!(c.transport, Transport::Udp);
        assert_eq!(c.dst, "[fd80::1]:53".parse().unwrap());
        assert_eq!(c.src.port(), 5353);
    }

    #[test]
    fn too_short_or_foreign_is_none() {
        let p = tcp4(true, false, 0, &[]);
        assert_eq!(classify(&p[..20 + 13]), None, "TCP flags cut off");
        assert_eq!(classify(&p[..20 + 3]), None, "ports cut off");
        let mut icmp = p.clone();
        icmp[9] = 1;
        assert_eq!(classify(&icmp), None);
        let mut frag = p.clone();
        frag[6] = 0x20; // more fragments
        assert_eq!(classify(&frag), None);
        assert_eq!(classify(&[]), None);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = classify(&bytes);
        }

        /// Any cut of a real SYN either fails or yields exactly the SYN's fields.
        #[test]
        fn cuts_are_all_or_nothing(cut in 0usize..60, dscp in 0u8..64) {
            let p = tcp4(true, false, dscp, &[]);
            let full = classify(&p).unwrap();
            if let Some(c) = classify(&p[..cut.min(p.len())]) {
                prop_assert_eq!(c, full);
            }
        }

        /// Random bytes after a valid IPv4 header never produce a wrong address.
        #[test]
        fn garbage_transport(tail in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut p = tcp4(true, false, 0, &[]);
            p.truncate(20);
            p.extend(&tail);
            if let Some(c) = classify(&p) {
                prop_assert_eq!(c.dst.ip(), "10.80.0.1".parse::<std::net::IpAddr>().unwrap());
            }
        }
    }
}
