//! The load generator's inner packets: IPv4/UDP datagrams it hands to each session as if
//! an application on the client had sent them, and reads back from what the tunnel
//! delivers.
//!
//! Payload layout (after the UDP header): magic `MHLG`, kind (1 byte), 3 zero bytes,
//! session number (u32), sequence number (u64), all big-endian, then zero padding to the
//! requested size. The sink in the server's namespace counts by session and sequence, so
//! loss is counted per session, not guessed from totals.
//!
//! Invariant: the IPv4 header checksum is right (the server's kernel drops a packet from
//! its TUN device otherwise); the UDP checksum is 0 (none), which IPv4 allows.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Bytes of IPv4 + UDP header.
pub const HEADERS: usize = 28;
/// Bytes of our payload header.
pub const PAYLOAD_HEADER: usize = 20;
const MAGIC: &[u8; 4] = b"MHLG";

/// What a packet is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Client to sink: counted there (and echoed back when the sink echoes).
    Up = 1,
    /// The sink's echo of an `Up` packet.
    Echo = 2,
    /// Sink to client: the bulk download.
    Bulk = 3,
}

/// A parsed payload header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// What the packet is for.
    pub kind: Kind,
    /// The session it belongs to.
    pub session: u32,
    /// Its sequence number in that session's stream of this kind.
    pub seq: u64,
}

/// Writes our payload header for `tag` into `out` (at least [`PAYLOAD_HEADER`] bytes); the
/// rest of `out` is left as it is (zero padding, written once).
pub fn write_tag(out: &mut [u8], tag: Tag) {
    out[..4].copy_from_slice(MAGIC);
    out[4] = tag.kind as u8;
    out[5..8].fill(0);
    out[8..12].copy_from_slice(&tag.session.to_be_bytes());
    out[12..20].copy_from_slice(&tag.seq.to_be_bytes());
}

/// Reads our payload header, if `payload` starts with one.
pub fn read_tag(payload: &[u8]) -> Option<Tag> {
    if payload.len() < PAYLOAD_HEADER || &payload[..4] != MAGIC {
        return None;
    }
    let kind = match payload[4] {
        1 => Kind::Up,
        2 => Kind::Echo,
        3 => Kind::Bulk,
        _ => return None,
    };
    Some(Tag {
        kind,
        session: u32::from_be_bytes(payload[8..12].try_into().ok()?),
        seq: u64::from_be_bytes(payload[12..20].try_into().ok()?),
    })
}

/// Builds an IPv4/UDP packet of `total` bytes (at least `HEADERS + PAYLOAD_HEADER`) from
/// `src` to `dst` carrying `tag` into `buf` (resized; reused across calls).
pub fn build(buf: &mut Vec<u8>, src: SocketAddrV4, dst: SocketAddrV4, tag: Tag, total: usize) {
    let total = total.max(HEADERS + PAYLOAD_HEADER);
    buf.clear();
    buf.resize(total, 0);
    let len = total as u16;
    buf[0] = 0x45;
    buf[2..4].copy_from_slice(&len.to_be_bytes());
    buf[8] = 64; // TTL
    buf[9] = 17; // UDP
    buf[12..16].copy_from_slice(&src.ip().octets());
    buf[16..20].copy_from_slice(&dst.ip().octets());
    let sum = checksum(&buf[..20]);
    buf[10..12].copy_from_slice(&sum.to_be_bytes());
    buf[20..22].copy_from_slice(&src.port().to_be_bytes());
    buf[22..24].copy_from_slice(&dst.port().to_be_bytes());
    buf[24..26].copy_from_slice(&(len - 20).to_be_bytes());
    write_tag(&mut buf[HEADERS..], tag);
}

/// The UDP payload and source of an IPv4/UDP packet (no options checked beyond IHL).
pub fn udp_payload(packet: &[u8]) -> Option<(Ipv4Addr, &[u8])> {
    if packet.len() < HEADERS || packet[0] >> 4 != 4 || packet[9] != 17 {
        return None;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    packet.get(ihl + 8..).map(|p| (src, p))
}

/// The Internet checksum of an IPv4 header whose checksum field is zero.
fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_packet_parses_back_with_a_valid_header_checksum() {
        let mut buf = Vec::new();
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 200, 3, 7), 40000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 200, 0, 1), 9000);
        let tag = Tag {
            kind: Kind::Up,
            session: 777,
            seq: 1 << 40,
        };
        build(&mut buf, src, dst, tag, 200);
        assert_eq!(buf.len(), 200);
        // A header with its checksum sums to 0xffff: the complement is 0.
        assert_eq!(checksum(&buf[..20]), 0);
        let (from, payload) = udp_payload(&buf).expect("udp");
        assert_eq!(from, *src.ip());
        assert_eq!(read_tag(payload), Some(tag));
        assert_eq!(read_tag(&payload[1..]), None);
    }
}
